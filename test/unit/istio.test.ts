// Istio's schemas judge the rendered objects in test/integration/crd.test.ts, against the CRDs the stack installs.
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { readRouteWeights, renderDestinationRule, renderVirtualService } from '../../render/istio.ts';
import { routesToCanary } from '../../routing/route.ts';
import { clusterApp, withCanary } from '../fixtures/applications.ts';
import type { JsonObject } from '../fixtures/spec-examples.ts';

const HOST = 'shop.prod.svc.cluster.local';

describe('renderDestinationRule', () => {
  test('has only the stable subset outside a rollout, with the default traffic policy', () => {
    const dr = renderDestinationRule(clusterApp({ serviceMesh: { enabled: true } }), { canary: false });
    assert.equal(dr.metadata.name, 'shop');
    assert.deepEqual(dr.spec, {
      host: HOST,
      trafficPolicy: { connectionPool: { tcp: { connectTimeout: '10s' } }, loadBalancer: { simple: 'ROUND_ROBIN' } },
      subsets: [{ name: 'stable', labels: { version: 'stable' } }],
    });
  });

  test('adds the canary subset selecting version=<canaryVersion>', () => {
    const dr = renderDestinationRule(clusterApp(withCanary({ canaryVersion: '1.26' }, { trafficPolicy: { connectionTimeout: '3s', loadBalancer: 'LEAST_CONN' } })), { canary: true });
    assert.deepEqual(dr.spec.subsets, [
      { name: 'stable', labels: { version: 'stable' } },
      { name: 'canary', labels: { version: '1.26' } },
    ]);
    assert.deepEqual(dr.spec.trafficPolicy, { connectionPool: { tcp: { connectTimeout: '3s' } }, loadBalancer: { simple: 'LEAST_CONN' } });
  });

  test('throws for a canary subset without a canary version', () => {
    assert.throws(() => renderDestinationRule(clusterApp({ serviceMesh: { enabled: true } }), { canary: true }), /no canary version/);
  });
});

describe('renderVirtualService', () => {
  const app = clusterApp(withCanary());

  test('routes everything to stable outside a rollout', () => {
    assert.deepEqual(renderVirtualService(app, { canary: null }).spec, {
      hosts: [HOST],
      http: [{ name: 'primary', route: [{ destination: { host: HOST, subset: 'stable' }, weight: 100 }] }],
    });
  });

  for (const weight of [0, 1, 20, 50, 99, 100]) {
    test(`splits ${100 - weight}/${weight} between stable and canary`, () => {
      const route = renderVirtualService(app, { canary: { weight } }).spec.http[0]?.route;
      assert.deepEqual(route, [
        { destination: { host: HOST, subset: 'stable' }, weight: 100 - weight },
        { destination: { host: HOST, subset: 'canary' }, weight },
      ]);
      assert.equal(route.reduce((sum, r) => sum + r.weight, 0), 100);
    });
  }

  for (const weight of [-1, 101, 12.5, Number.NaN]) {
    test(`rejects weight ${weight}`, () => assert.throws(() => renderVirtualService(app, { canary: { weight } }), RangeError));
  }

  const retryCases: { name: string; retryPolicy: JsonObject | undefined; retries: object | undefined }[] = [
    { name: 'no retry policy', retryPolicy: undefined, retries: undefined },
    { name: 'full retry policy', retryPolicy: { attempts: 3, perTryTimeout: '2s', retryOn: '5xx,reset' }, retries: { attempts: 3, perTryTimeout: '2s', retryOn: '5xx,reset' } },
    { name: 'attempts only', retryPolicy: { attempts: 0 }, retries: { attempts: 0 } },
  ];
  for (const { name, retryPolicy, retries } of retryCases) {
    test(`retries: ${name}`, () => {
      const vs = renderVirtualService(clusterApp({ serviceMesh: { enabled: true, trafficPolicy: retryPolicy ? { retryPolicy } : {} } }), { canary: null });
      const route = vs.spec.http[0];
      assert.ok(route);
      assert.equal('retries' in route, retries !== undefined);
      assert.deepEqual(route.retries, retries);
    });
  }

  test('a header route goes before the weighted one and sends matching requests to the canary', () => {
    const vs = renderVirtualService(app, { canary: { weight: 10, headers: [{ header: 'x-canary', exact: 'yes' }, { cookie: 'beta', exact: 'on.1' }] } });
    assert.deepEqual(vs.spec.http.map((h) => h.name), ['canary-match', 'primary']);
    assert.deepEqual(vs.spec.http[0]?.match, [{ headers: { 'x-canary': { exact: 'yes' }, cookie: { regex: '^(.*?;\\s*)?beta=on\\.1(;.*)?$' } } }]);
    assert.deepEqual(vs.spec.http[0]?.route, [{ destination: { host: HOST, subset: 'canary' }, weight: 100 }]);
    assert.deepEqual(readRouteWeights(vs), { stable: 90, canary: 10, total: 100, headerRoute: true, mirror: 0 });
  });

  test('prefix and regex header conditions', () => {
    const vs = renderVirtualService(app, { canary: { weight: 0, headers: [{ header: 'x-a', prefix: 'p' }, { header: 'x-b', regex: 'r.*' }] } });
    assert.deepEqual(vs.spec.http[0]?.match, [{ headers: { 'x-a': { prefix: 'p' }, 'x-b': { regex: 'r.*' } } }]);
  });

  test('a mirror copies a percentage of the weighted route to the canary', () => {
    const vs = renderVirtualService(app, { canary: { weight: 0, mirror: 25 } });
    assert.deepEqual(vs.spec.http, [{
      name: 'primary', route: [{ destination: { host: HOST, subset: 'stable' }, weight: 100 }, { destination: { host: HOST, subset: 'canary' }, weight: 0 }],
      mirror: { host: HOST, subset: 'canary' }, mirrorPercentage: { value: 25 },
    }]);
    assert.deepEqual(readRouteWeights(vs), { stable: 100, canary: 0, total: 100, headerRoute: false, mirror: 25 });
    assert.equal(routesToCanary(readRouteWeights(vs)), true);
    assert.equal(routesToCanary(readRouteWeights(renderVirtualService(app, { canary: { weight: 0 } }))), false);
  });

  test('rejects a mirror percentage out of range', () => assert.throws(() => renderVirtualService(app, { canary: { weight: 0, mirror: 101 } }), RangeError));
});
