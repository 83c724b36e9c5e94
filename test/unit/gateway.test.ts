import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { routeShape } from '../../activities/routers/gateway-api.ts';
import { readHTTPRouteWeights, renderHTTPRoute, renderMirrorService, renderRouteService, routePort } from '../../render/gateway.ts';
import { clusterApp } from '../fixtures/applications.ts';

const app = (over: object = {}) => clusterApp({
  traffic: { router: 'gatewayAPI', gatewayAPI: { parentRefs: [{ name: 'edge', namespace: 'gateways' }], hostnames: ['shop.example.com'], ...over } },
  serviceMesh: { canary: { enabled: true, canaryVersion: 'v7' } },
});

describe('renderHTTPRoute', () => {
  test('steady state: every request under the path to the stable pods\' Service', () => {
    const r = renderHTTPRoute(app(), { canary: null });
    assert.deepEqual(r.spec, {
      parentRefs: [{ name: 'edge', namespace: 'gateways' }],
      hostnames: ['shop.example.com'],
      rules: [{ matches: [{ path: { type: 'PathPrefix', value: '/' } }], backendRefs: [{ name: 'shop-stable', port: 80 }] }],
    });
    assert.deepEqual([r.apiVersion, r.kind, r.metadata.name, r.metadata.namespace], ['gateway.networking.k8s.io/v1', 'HTTPRoute', 'shop', 'prod']);
  });
  test('a weight splits the weighted rule, always both backends, summing to 100', () => {
    for (const w of [0, 20, 100]) {
      const r = renderHTTPRoute(app(), { canary: { weight: w } });
      assert.deepEqual(r.spec.rules.at(-1)?.backendRefs, [{ name: 'shop-stable', port: 80, weight: 100 - w }, { name: 'shop-canary', port: 80, weight: w }]);
    }
  });
  test('a header route is a rule of its own with header matches, before the weighted one; a prefix and a cookie become regular expressions', () => {
    const r = renderHTTPRoute(app({ path: '/api' }), { canary: { weight: 10, headers: [{ header: 'x-canary', exact: 'yes' }, { header: 'x-group', prefix: 'beta.' }, { cookie: 'tier', exact: 'gold' }] } });
    assert.equal(r.spec.rules.length, 2);
    assert.deepEqual(r.spec.rules[0], {
      matches: [{
        path: { type: 'PathPrefix', value: '/api' },
        headers: [
          { type: 'Exact', name: 'x-canary', value: 'yes' },
          { type: 'RegularExpression', name: 'x-group', value: '^beta\\..*' },
          { type: 'RegularExpression', name: 'cookie', value: '^(.*?;\\s*)?tier=gold(;.*)?$' },
        ],
      }],
      backendRefs: [{ name: 'shop-canary', port: 80 }],
    });
  });
  test('a mirror is a RequestMirror filter with its percent on the weighted rule', () => {
    const r = renderHTTPRoute(app(), { canary: { weight: 0, mirror: 25 } });
    assert.deepEqual(r.spec.rules[0]?.filters, [{ type: 'RequestMirror', requestMirror: { backendRef: { name: 'shop-canary', port: 80 }, percent: 25 } }]);
  });
  test('refuses weights and percentages outside 0..100, and a spec without a Gateway', () => {
    assert.throws(() => renderHTTPRoute(app(), { canary: { weight: 101 } }), RangeError);
    assert.throws(() => renderHTTPRoute(app(), { canary: { weight: 10, mirror: 2.5 } }), RangeError);
    assert.throws(() => renderHTTPRoute(clusterApp(), { canary: null }), /no traffic.gatewayAPI/);
  });
  test('the port is the one named http, else the first', () => {
    assert.equal(routePort(clusterApp({ service: { ports: [{ name: 'metrics', port: 9090 }, { name: 'http', port: 8080 }] } })), 8080);
    assert.equal(routePort(clusterApp({ service: { ports: [{ name: 'grpc', port: 9000 }] } })), 9000);
  });
});

describe('renderRouteService', () => {
  test('the stable Service selects only stable pods; the canary\'s only its version; both ClusterIP with the app\'s ports', () => {
    const stable = renderRouteService(app(), 'stable');
    const canary = renderRouteService(app(), 'canary');
    assert.deepEqual([stable.metadata?.name, stable.spec?.selector, stable.spec?.type], ['shop-stable', { 'app.kubernetes.io/name': 'shop', version: 'stable' }, 'ClusterIP']);
    assert.deepEqual([canary.metadata?.name, canary.spec?.selector], ['shop-canary', { 'app.kubernetes.io/name': 'shop', version: 'v7' }]);
    assert.deepEqual(stable.spec?.ports, [{ name: 'http', port: 80, targetPort: 80, protocol: 'TCP' }]);
  });
});

describe('readHTTPRouteWeights', () => {
  const cases: { name: string; canary: Parameters<typeof renderHTTPRoute>[1]['canary']; want: object }[] = [
    { name: 'steady state', canary: null, want: { stable: 100, canary: 0, total: 100, headerRoute: false, mirror: 0 } },
    { name: '30%', canary: { weight: 30 }, want: { stable: 70, canary: 30, total: 100, headerRoute: false, mirror: 0 } },
    { name: 'a header route and a mirror', canary: { weight: 0, headers: [{ header: 'x', exact: '1' }], mirror: 10 }, want: { stable: 100, canary: 0, total: 100, headerRoute: true, mirror: 10 } },
  ];
  for (const c of cases) test(`as rendered: ${c.name}`, () => assert.deepEqual(readHTTPRouteWeights(renderHTTPRoute(app(), { canary: c.canary }), app()), c.want));
  test('weights are relative, and a backend without one counts 1', () => {
    const read = (backendRefs: object[]) => readHTTPRouteWeights({ spec: { rules: [{ backendRefs }] } }, app());
    assert.deepEqual(read([{ name: 'shop-stable', weight: 3 }, { name: 'shop-canary', weight: 1 }]), { stable: 75, canary: 25, total: 100, headerRoute: false, mirror: 0 });
    assert.deepEqual(read([{ name: 'shop-stable' }, { name: 'shop-canary' }]), { stable: 50, canary: 50, total: 100, headerRoute: false, mirror: 0 });
    assert.deepEqual(read([{ name: 'shop-stable', weight: 0 }]), { stable: 0, canary: 0, total: 0, headerRoute: false, mirror: 0 });
  });
  test('no route: null', () => assert.equal(readHTTPRouteWeights(null, app()), null));
});

describe('routeShape: rendered and read back compare equal until someone edits the route', () => {
  const rendered = renderHTTPRoute(app(), { canary: { weight: 20, headers: [{ header: 'x-canary', exact: 'yes' }], mirror: 5 } });
  // What the API server returns: its defaults filled in (group, kind, weight 1, Exact), keys in its own order.
  const asRead = JSON.parse(JSON.stringify(rendered)) as typeof rendered & { spec: { parentRefs: object[] } };
  asRead.spec.parentRefs = [{ group: 'gateway.networking.k8s.io', kind: 'Gateway', name: 'edge', namespace: 'gateways' }];
  const header = asRead.spec.rules[0]!;
  header.backendRefs = [{ group: '', kind: 'Service', name: 'shop-canary', port: 80, weight: 1 }];
  test('defaults do not count as a change', () => assert.deepEqual(routeShape(asRead), routeShape(rendered)));
  test('a hand edit of a weight does', () => {
    const edited = JSON.parse(JSON.stringify(asRead)) as typeof asRead;
    edited.spec.rules[1]!.backendRefs[1]!.weight = 90;
    assert.notDeepEqual(routeShape(edited), routeShape(rendered));
  });
  test('a removed mirror does', () => {
    const edited = JSON.parse(JSON.stringify(asRead)) as typeof asRead;
    delete edited.spec.rules[1]!.filters;
    assert.notDeepEqual(routeShape(edited), routeShape(rendered));
  });
});

describe('on Traefik: a mirror through its mirroring service', () => {
  const traefik = () => app({ implementation: 'traefik' });
  test('the weighted rule sends stable\'s share through <app>-mirror, which copies the percent to the canary; no RequestMirror filter', () => {
    const r = renderHTTPRoute(traefik(), { canary: { weight: 10, mirror: 30 } });
    assert.deepEqual(r.spec.rules.at(-1), {
      matches: [{ path: { type: 'PathPrefix', value: '/' } }],
      backendRefs: [{ group: 'traefik.io', kind: 'TraefikService', name: 'shop-mirror', weight: 90 }, { name: 'shop-canary', port: 80, weight: 10 }],
    });
    assert.deepEqual(renderMirrorService(traefik(), 30).spec, { mirroring: { name: 'shop-stable', port: 80, mirrors: [{ name: 'shop-canary', port: 80, percent: 30 }] } });
  });
  test('without a mirror, the route goes to stable directly, as anywhere', () => {
    assert.deepEqual(renderHTTPRoute(traefik(), { canary: { weight: 10 } }).spec.rules.at(-1)?.backendRefs, [{ name: 'shop-stable', port: 80, weight: 90 }, { name: 'shop-canary', port: 80, weight: 10 }]);
  });
  test('read back with its mirroring service: stable\'s share and the mirror; without it the mirror is not counted', () => {
    const r = renderHTTPRoute(traefik(), { canary: { weight: 10, mirror: 30 } });
    assert.deepEqual(readHTTPRouteWeights(r, traefik(), renderMirrorService(traefik(), 30)), { stable: 90, canary: 10, total: 100, headerRoute: false, mirror: 30 });
    assert.deepEqual(readHTTPRouteWeights(r, traefik(), null), { stable: 0, canary: 10, total: 100, headerRoute: false, mirror: 0 });
  });
});
