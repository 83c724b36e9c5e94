// The Application CRD as the real API server serves it: every spec example gets the verdict the
// fixture expects (and the zod model agrees), kubectl's explain, columns, short name and scale work,
// and every child the renderers produce is accepted by the API server and Istio's installed CRDs.
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { parseApplication, type Application } from '../../api/application.ts';
import { API_VERSION, KIND } from '../../api/constants.ts';
import { KubeError, type Kube, type KubeObject } from '../../kube/client.ts';
import { collectionPath, objectPath } from '../../kube/resources.ts';
import { renderChildren } from '../../render/index.ts';
import { canaryAppSpec, demoAppSpec, specExamples } from '../fixtures/spec-examples.ts';
import type { JsonObject, SpecExample } from '../fixtures/spec-examples.ts';
import { appManifest, kube, kubeApi, kubeJson, testNamespace, type Json } from '../../testkit/apps.ts';

const FIELD_MANAGER = 'crd-test';
// Strict, as kubectl sends it: on create and update an unknown field is an error instead of being
// pruned in silence, so a field the schema does not know cannot pass unnoticed.
const dryRunStrict = { dryRun: 'All', fieldValidation: 'Strict' };

/** The example's object moved into `namespace`. */
function inNamespace(obj: JsonObject, namespace: string): Json {
  const o: Json = structuredClone(obj);
  o.metadata = { ...o.metadata, namespace };
  return o;
}

/** The API server's answer to a request: the object it returned, or its rejection message. */
async function verdict(send: () => Promise<Json | null>): Promise<{ ok: true; object: Json } | { ok: false; message: string }> {
  try {
    const object = await send();
    assert.ok(object, 'the API server answered without a body');
    return { ok: true, object };
  } catch (err) {
    if (err instanceof KubeError && err.permanent) return { ok: false, message: err.message };
    throw err;
  }
}

const createDryRun = (api: Kube, obj: Json) => () =>
  api.request<Json>('POST', collectionPath({ apiVersion: API_VERSION, kind: KIND, namespace: obj.metadata.namespace }), { body: obj, query: dryRunStrict });

async function judgeCreate(api: Kube, example: Extract<SpecExample, { app: JsonObject }>, namespace: string): Promise<void> {
  const obj = inNamespace(example.app, namespace);
  const server = await verdict(createDryRun(api, obj));
  const zod = parseApplication(obj);
  const both = `API server: ${server.ok ? 'accepted' : server.message}\nzod model:  ${zod.ok ? 'accepted' : zod.message}`;
  assert.equal(server.ok, example.valid, `API server verdict is not valid=${example.valid}\n${both}`);
  assert.equal(zod.ok, example.valid, `zod verdict is not valid=${example.valid}\n${both}`);
  if (!server.ok && !zod.ok && example.messageIncludes !== undefined) {
    assert.ok(server.message.includes(example.messageIncludes), `API server message lacks "${example.messageIncludes}"\n${both}`);
    assert.ok(zod.message.includes(example.messageIncludes), `zod message lacks "${example.messageIncludes}"\n${both}`);
  }
  // Accepted by both: the server's defaulting must be the model's, since the operator acts on the latter.
  if (server.ok && zod.ok) assert.deepEqual(server.object.spec, zod.app.spec, 'the API server defaults the spec as the zod model does');
}

async function judgeTransition(api: Kube, example: Extract<SpecExample, { transition: true }>, namespace: string): Promise<void> {
  const old = inNamespace(example.old, namespace);
  const created = await api.create(old as KubeObject);
  assert.ok(created?.metadata.resourceVersion, `created ${example.name} for real`);
  const next = inNamespace(example.new, namespace);
  const ref = { apiVersion: API_VERSION, kind: KIND, namespace, name: String(next.metadata.name) };
  next.metadata.resourceVersion = created.metadata.resourceVersion;
  if (example.oldStatus) {
    // A create drops status: it is written as the operator writes it, through the status subresource.
    const withStatus = await api.request<Json>('PATCH', objectPath(ref, 'status'), { body: { status: example.oldStatus }, contentType: 'application/merge-patch+json' });
    next.metadata.resourceVersion = withStatus?.metadata.resourceVersion ?? assert.fail('no answer to the status write');
  }
  const server = await verdict(() => api.request<Json>('PUT', objectPath(ref), { body: next, query: dryRunStrict }));
  assert.equal(server.ok, example.valid, `update verdict is not valid=${example.valid}: ${server.ok ? 'accepted' : server.message}`);
  if (!server.ok && example.messageIncludes !== undefined) {
    assert.ok(server.message.includes(example.messageIncludes), `API server message lacks "${example.messageIncludes}": ${server.message}`);
  }
  if (server.ok) {
    const zod = parseApplication(next);
    assert.ok(zod.ok, `the zod model accepts the new object: ${zod.ok ? '' : zod.message}`);
    assert.deepEqual(server.object.spec, zod.app.spec, 'the update would store the new spec, defaulted');
  }
}

describe('Application CRD on the API server', () => {
  let ns: { name: string; cleanup: () => Promise<void> };
  let api: Kube;
  before(async () => {
    ns = await testNamespace('crd');
    api = await kubeApi();
  });
  after(async () => ns?.cleanup());

  describe('spec examples: the API server and the zod model give the expected verdict', { concurrency: 8 }, () => {
    for (const example of specExamples) {
      const expected = example.valid ? 'accepted' : `rejected (${example.messageIncludes ?? 'any message'})`;
      it(`${example.transition ? 'update' : 'create'} ${example.name} is ${expected}`, async () => {
        if (example.transition) await judgeTransition(api, example, ns.name);
        else await judgeCreate(api, example, ns.name);
      });
    }
  });

  it('explains serviceMesh.canary and its fields', async () => {
    const out = await kube(['explain', 'application.spec.serviceMesh.canary']);
    assert.match(out, /^KIND:\s+Application$/m);
    const description = /DESCRIPTION:\n([\s\S]*?)\n\s*FIELDS:/.exec(out)?.[1]?.trim() ?? '';
    assert.ok(description.length > 40, `canary has a description: ${out}`);
    // Each field is a line "  <name>\t<type>" followed by its indented description.
    const fields = new Map<string, string>();
    for (const m of out.matchAll(/^ {2}(\w+)\t<[^>]+>\n((?: {4}.*\n?)*)/gm)) fields.set(m[1] ?? '', (m[2] ?? '').replace(/\s+/g, ' ').trim());
    const expectations: [string, RegExp][] = [['canaryVersion', /label/], ['weight', /traffic/], ['steps', /pause/]];
    for (const [field, mentions] of expectations) {
      const text = fields.get(field);
      assert.ok(text, `kubectl explain lists ${field}: ${out}`);
      assert.ok(text.length > 40, `${field} has a real description: "${text}"`);
      assert.match(text, mentions, `${field}'s description`);
    }
  });

  describe('kubectl on a stored Application', () => {
    const name = 'printed';
    before(async () => {
      await kube(['apply', '--server-side', `--field-manager=${FIELD_MANAGER}`, '-f', '-'], JSON.stringify(appManifest(ns.name, name, { image: 'nginx:1.25', replicas: 2 })));
    });

    it('lists it by the short name app with the printer columns', async () => {
      const [header = '', row = '', ...rest] = (await kube(['-n', ns.name, 'get', 'app', name, '-o', 'wide'])).trim().split('\n');
      assert.deepEqual(rest, [], 'one Application printed');
      const columns = header.trim().split(/\s{2,}/);
      for (const column of ['NAME', 'PHASE', 'DESIRED', 'AVAILABLE', 'CANARY', 'IMAGE', 'MESSAGE', 'AGE']) assert.ok(columns.includes(column), `column ${column} in ${header}`);
      // kubectl's tabwriter starts every cell where its header starts; a cell ends where the next header starts.
      const starts = columns.map((c) => header.indexOf(c));
      const cells = Object.fromEntries(columns.map((c, i) => [c, row.slice(starts[i], starts[i + 1]).trim()]));
      assert.equal(cells['NAME'], name);
      // Replica columns come from status (an HPA may own the count), which no operator has written here.
      assert.ok(['<none>', ''].includes(cells['DESIRED'] ?? '?'), `DESIRED is empty until status says otherwise, not spec's 2: "${cells['DESIRED']}"`);
      assert.equal(cells['IMAGE'], 'nginx:1.25');
      const byShortName = await kubeJson(['-n', ns.name, 'get', `app/${name}`]);
      assert.equal(byShortName.kind, KIND);
      assert.equal(byShortName.metadata.name, name);
    });

    it('scales through the scale subresource', async () => {
      await kube(['-n', ns.name, 'scale', `app/${name}`, '--replicas=4']);
      const app = await kubeJson(['-n', ns.name, 'get', `app/${name}`, '--show-managed-fields']);
      assert.equal(app.spec.replicas, 4);
      assert.ok(app.metadata.managedFields.some((m: Json) => m.subresource === 'scale' && m.operation === 'Update'), `the change came through /scale: ${JSON.stringify(app.metadata.managedFields)}`);
      const scale = JSON.parse(await kube(['get', '--raw', `${objectPath({ apiVersion: API_VERSION, kind: KIND, namespace: ns.name, name })}/scale`]));
      assert.equal(scale.kind, 'Scale');
      assert.equal(scale.spec.replicas, 4);
    });
  });

  describe('rendered children pass the API server and the installed Istio CRDs', () => {
    // The fixture's full-featured spec (storage, configMaps, probes, env, resources, autoscaling) with a canary to roll out.
    const fullFeatured = specExamples.find((e) => e.name === 'full-featured');
    assert.ok(fullFeatured && !fullFeatured.transition, 'the fixture has the full-featured example');
    const fullSpec = structuredClone(fullFeatured.app['spec']) as Json;
    fullSpec.serviceMesh.canary = { enabled: true, canaryVersion: 'v2', replicas: 2 };
    // The demo has no canary to render, so only its steady state; the others go through a rollout's weights.
    const cases: { name: string; spec: JsonObject; weights: (number | null)[] }[] = [
      { name: 'demo-app', spec: demoAppSpec, weights: [null] },
      { name: 'full-featured', spec: fullSpec, weights: [null, 0, 40, 100] },
      { name: 'canary-app', spec: canaryAppSpec, weights: [null, 0, 40, 100] },
    ];

    for (const { name, spec, weights } of cases) {
      it(`${name}: every child at canary weight ${weights.map(String).join(', ')}`, async () => {
        await kube(['apply', '--server-side', `--field-manager=${FIELD_MANAGER}`, '-f', '-'], JSON.stringify(appManifest(ns.name, name, spec)));
        const stored = await api.get<Json>({ apiVersion: API_VERSION, kind: KIND, namespace: ns.name, name });
        const { status: _status, ...statusLess } = stored ?? {};
        const parsed = parseApplication(statusLess);
        assert.ok(parsed.ok, parsed.ok ? '' : parsed.message);
        const app: Application = parsed.app;
        assert.ok(app.metadata.uid, 'read back with its uid');

        for (const canaryWeight of weights) {
          const children = renderChildren(app, { canary: canaryWeight === null ? null : { weight: canaryWeight } }).apply;
          const kinds = children.map((c) => c.object.kind);
          assert.ok(kinds.includes('Deployment') && kinds.includes('Service') && kinds.includes('VirtualService'), `rendered ${kinds.join(', ')}`);
          if (canaryWeight !== null) assert.equal(kinds.filter((k) => k === 'Deployment').length, 2, 'a rollout adds the canary Deployment');
          // The operator's own apply: server-side apply also rejects fields the schema does not declare.
          const answers = await Promise.all(children.map(async ({ object }) => {
            const obj = object;
            try {
              return await api.apply<Json & KubeObject>(obj, { fieldManager: FIELD_MANAGER, dryRun: true });
            } catch (err) {
              throw new Error(`weight ${canaryWeight}: ${obj.kind} ${obj.metadata.name} rejected: ${err instanceof Error ? err.message : String(err)}`, { cause: err });
            }
          }));
          const vs = answers.find((o) => o.kind === 'VirtualService');
          assert.ok(vs, 'the server answered with the VirtualService');
          for (const route of vs.spec.http) {
            const routeWeights = route.route.map((r: Json) => r.weight ?? 100);
            assert.equal(routeWeights.reduce((a: number, b: number) => a + b, 0), 100, `weight ${canaryWeight}: route ${route.name} weights ${routeWeights.join('+')}`);
            const canary = route.route.find((r: Json) => r.destination.subset === 'canary');
            assert.equal(canary?.weight ?? null, canaryWeight, `weight ${canaryWeight}: the canary's share`);
          }
        }
      });
    }
  });
});
