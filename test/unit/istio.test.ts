import assert from 'node:assert/strict';
import { existsSync, readFileSync } from 'node:fs';
import { describe, test } from 'node:test';
import { parseAllDocuments } from 'yaml';
import { renderDestinationRule, renderVirtualService } from '../../render/istio.ts';
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
    assert.deepEqual(renderVirtualService(app, { canaryWeight: null }).spec, {
      hosts: [HOST],
      http: [{ name: 'primary', route: [{ destination: { host: HOST, subset: 'stable' }, weight: 100 }] }],
    });
  });

  for (const weight of [0, 1, 20, 50, 99, 100]) {
    test(`splits ${100 - weight}/${weight} between stable and canary`, () => {
      const route = renderVirtualService(app, { canaryWeight: weight }).spec.http[0]?.route;
      assert.deepEqual(route, [
        { destination: { host: HOST, subset: 'stable' }, weight: 100 - weight },
        { destination: { host: HOST, subset: 'canary' }, weight },
      ]);
      assert.equal(route.reduce((sum, r) => sum + r.weight, 0), 100);
    });
  }

  for (const weight of [-1, 101, 12.5, Number.NaN]) {
    test(`rejects weight ${weight}`, () => assert.throws(() => renderVirtualService(app, { canaryWeight: weight }), RangeError));
  }

  const retryCases: { name: string; retryPolicy: JsonObject | undefined; retries: object | undefined }[] = [
    { name: 'no retry policy', retryPolicy: undefined, retries: undefined },
    { name: 'full retry policy', retryPolicy: { attempts: 3, perTryTimeout: '2s', retryOn: '5xx,reset' }, retries: { attempts: 3, perTryTimeout: '2s', retryOn: '5xx,reset' } },
    { name: 'attempts only', retryPolicy: { attempts: 0 }, retries: { attempts: 0 } },
  ];
  for (const { name, retryPolicy, retries } of retryCases) {
    test(`retries: ${name}`, () => {
      const vs = renderVirtualService(clusterApp({ serviceMesh: { enabled: true, trafficPolicy: retryPolicy ? { retryPolicy } : {} } }), { canaryWeight: null });
      const route = vs.spec.http[0];
      assert.ok(route);
      assert.equal('retries' in route, retries !== undefined);
      assert.deepEqual(route.retries, retries);
    });
  }
});

// Istio's real CRDs, kept beside the repository; the cluster tests install them for real.
const ISTIO_CRDS = new URL('../../../shared/testdata/istio-networking-crds.yaml', import.meta.url);

interface Schema {
  type?: string;
  enum?: unknown[];
  properties?: Record<string, Schema>;
  additionalProperties?: Schema | boolean;
  items?: Schema;
  'x-kubernetes-preserve-unknown-fields'?: boolean;
  required?: string[];
}

function schemaProblems(value: unknown, schema: Schema, path: string): string[] {
  if (schema['x-kubernetes-preserve-unknown-fields']) return [];
  if (schema.enum && !schema.enum.includes(value)) return [`${path}: ${JSON.stringify(value)} is not one of ${JSON.stringify(schema.enum)}`];
  if (Array.isArray(value)) {
    if (schema.type !== 'array' || !schema.items) return [`${path}: unexpected array`];
    const items = schema.items;
    return value.flatMap((v, i) => schemaProblems(v, items, `${path}[${i}]`));
  }
  if (value !== null && typeof value === 'object') {
    if (schema.type !== 'object') return [`${path}: unexpected object`];
    const entries = Object.entries(value);
    const missing = (schema.required ?? []).filter((name) => !entries.some(([k]) => k === name)).map((name) => `${path}.${name}: required`);
    return missing.concat(
      entries.flatMap(([k, v]) => {
        const child = schema.properties?.[k] ?? (typeof schema.additionalProperties === 'object' ? schema.additionalProperties : undefined);
        return child ? schemaProblems(v, child, `${path}.${k}`) : [`${path}.${k}: unknown field`];
      }),
    );
  }
  const type = typeof value === 'number' ? (Number.isInteger(value) ? 'integer' : 'number') : typeof value;
  return schema.type === undefined || schema.type === type || (schema.type === 'number' && type === 'integer') ? [] : [`${path}: ${type} is not ${schema.type}`];
}

describe("Istio's CRD schemas accept the rendered objects", { skip: !existsSync(ISTIO_CRDS) && 'Istio CRDs not found next to the repository' }, () => {
  const specSchemas = new Map<string, Schema>();
  if (existsSync(ISTIO_CRDS)) {
    for (const doc of parseAllDocuments(readFileSync(ISTIO_CRDS, 'utf8'))) {
      const crd = doc.toJS() as { spec?: { names: { kind: string }; versions: { name: string; schema: { openAPIV3Schema: Schema } }[] } } | null;
      const v1 = crd?.spec?.versions.find((v) => v.name === 'v1');
      const spec = v1?.schema.openAPIV3Schema.properties?.spec;
      if (crd?.spec && spec) specSchemas.set(crd.spec.names.kind, spec);
    }
  }
  const app = clusterApp(withCanary({}, { trafficPolicy: { connectionTimeout: '250ms', loadBalancer: 'LEAST_REQUEST', retryPolicy: { attempts: 2, perTryTimeout: '1s', retryOn: 'connect-failure' } } }));
  const objects = [
    renderDestinationRule(app, { canary: false }),
    renderDestinationRule(app, { canary: true }),
    renderVirtualService(app, { canaryWeight: null }),
    renderVirtualService(app, { canaryWeight: 30 }),
  ];
  for (const object of objects) {
    test(`${object.kind} (${JSON.stringify(object.spec).length} bytes)`, () => {
      const schema = specSchemas.get(object.kind);
      assert.ok(schema, `no v1 schema for ${object.kind}`);
      assert.equal(object.apiVersion, 'networking.istio.io/v1');
      assert.deepEqual(schemaProblems(object.spec, schema, 'spec'), []);
    });
  }
});
