// Hostile input: 500+ seeded Applications, random, boundary and malformed, sent 16 at a time to the real API server
// with one operator watching. Each is either rejected with a clear message that names a field, or accepted; an
// accepted one converges (Running) or ends Failed with a reasoned condition and nothing half-applied. The operator
// survives all of it (same pid, ready) and keeps serving an app created before the storm.
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { API_VERSION, KIND } from '../../api/constants.ts';
import { KubeError } from '../../kube/client.ts';
import { mulberry32, type Rng } from '../../chaos/prng.ts';
import { specExamples } from '../fixtures/spec-examples.ts';
import { appManifest, closeTemporal, getApp, getDeployment, kube, kubeApi, testNamespace, waitForObject, waitForPhase, type Json } from '../../testkit/apps.ts';
import { startOperator, type OperatorProcess } from '../../testkit/operator.ts';

const SEED = 20261130;
const TOTAL = 520;
const CONCURRENCY = 16;
const SAMPLE = 60;

type Expect = 'accept' | 'reject' | 'either' | 'operator-rejects';

interface Case {
  id: number;
  category: string;
  name: string;
  spec: Json | undefined;
  expect: Expect;
  /** For rejections we know the cause of: a piece of the message. */
  messageIncludes?: string;
}

interface Outcome {
  c: Case;
  accepted: boolean;
  status?: number;
  message?: string;
}

const NBSP = '\u00a0';

/** A random spec the CRD accepts and the cluster can run (small, schedulable, no storage). */
function validSpec(r: Rng): Json {
  const spec: Json = { image: r.pick(['nginx:1.25', 'nginx:1.27-alpine', 'registry.example.com/team/app@sha256:' + 'ab'.repeat(32), 'ghcr.io/ünïcode/app:1']), replicas: r.int(1, 2) };
  if (r.chance(0.4)) {
    const n = r.int(1, 20);
    spec['service'] = { type: r.pick(['ClusterIP', 'NodePort', 'LoadBalancer']), ports: Array.from({ length: n }, (_, i) => ({ name: `p${i}`, port: 8000 + i, enableIstioProxy: r.chance(0.5) })) };
  }
  if (r.chance(0.4)) {
    const n = r.pick([1, 5, 50, 200]);
    spec['env'] = Array.from({ length: n }, (_, i) => ({ name: `VAR_${i}`, value: r.pick(['x', 'ünïcödé ✓ 日本語', '🚀'.repeat(50), 'v'.repeat(r.int(0, 1000)), '']) }));
  }
  if (r.chance(0.3)) spec['resources'] = { requests: { cpu: r.pick(['1m', '10m', '0.1', 1]), memory: r.pick(['1Mi', '64Mi', '1e6', '128M']) }, limits: { cpu: r.pick(['1', 2]), memory: '1Gi' } };
  if (r.chance(0.2)) spec['configMaps'] = [{ name: 'does-not-exist', mountPath: '/etc/x' }];
  if (r.chance(0.2)) spec['healthCheck'] = { livenessProbe: { tcpSocket: { port: 80 }, periodSeconds: r.int(1, 100) }, readinessProbe: { httpGet: { path: '/ünï', port: 80 } } };
  if (r.chance(0.15)) spec['autoscaling'] = { enabled: true, minReplicas: 1, maxReplicas: r.int(1, 100), targetCPU: r.int(1, 100) };
  if (r.chance(0.3)) {
    spec['serviceMesh'] = {
      enabled: true,
      trafficPolicy: { connectionTimeout: r.pick(['1ms', '10s', '1h30m']), loadBalancer: r.pick(['ROUND_ROBIN', 'LEAST_CONN', 'RANDOM']), retryPolicy: { attempts: r.int(0, 10), perTryTimeout: '2s', retryOn: '5xx,reset' } },
      // A disabled canary may carry anything valid; it must not start a rollout.
      ...(r.chance(0.5) ? { canary: { enabled: false, weight: r.int(0, 100) } } : {}),
    };
  }
  return spec;
}

/** Mutations that break one rule the API server checks (the spec is copied first). */
const breakers: ((s: Json, r: Rng) => void)[] = [
  (s) => { s['replicas'] = 'three'; },
  (s, r) => { s['replicas'] = r.pick([0, -1, 101, 1e9, 1.5]); },
  (s) => { delete s['image']; },
  (s, r) => { s['image'] = r.pick(['', ' ', 'nginx 1.25', 'nginx\t:1', 'a'.repeat(513)]); },
  (s, r) => { s['service'] = { type: r.pick(['ExternalName', 'clusterip', '']) }; },
  (s) => { s['service'] = { ports: Array.from({ length: 21 }, (_, i) => ({ name: `p${i}`, port: 1000 + i })) }; },
  (s) => { s['service'] = { ports: [{ name: 'http', port: 80 }, { name: 'http', port: 81 }] }; },
  (s, r) => { s['service'] = { ports: [{ name: r.pick(['HTTP', 'ünï', 'a--b', '-x', 'x'.repeat(16)]), port: 80 }] }; },
  (s) => { s['env'] = Array.from({ length: 201 }, (_, i) => ({ name: `V${i}`, value: 'x' })); },
  (s) => { s['env'] = [{ name: 'DUP', value: '1' }, { name: 'DUP', value: '2' }]; },
  (s, r) => { s['env'] = [{ name: r.pick(['1ABC', 'ünï', 'has space', '']), value: 'x' }]; },
  (s, r) => { s['resources'] = { limits: { memory: r.pick(['lots', '-1Gi', '1.5.5', '1GB', '∞', '']) } }; },
  // (Not 'm', 'e3' or 'Ki': Kubernetes parses those as zero.)
  (s, r) => { s['resources'] = { requests: { cpu: r.pick(['abc', '-100m', '1e', '1.5.5']) } }; },
  (s) => { s['resources'] = { requests: { memory: '2Gi' }, limits: { memory: '1Gi' } }; },
  (s, r) => { s['storage'] = { size: r.pick(['0', 'ten gigs', '-1Gi', '', '1.5.5Gi']) }; },
  (s) => { s['storage'] = { size: '1Gi', accessMode: 'ReadWriteSometimes' }; },
  (s) => { s['serviceMesh'] = { enabled: false, canary: { enabled: true, canaryVersion: 'v2' } }; },
  (s) => { s['serviceMesh'] = { enabled: true, canary: { enabled: true } }; },
  (s, r) => { s['serviceMesh'] = { enabled: true, canary: { enabled: true, canaryVersion: r.pick(['stable', 'v2/beta', '-v', 'ü']), weight: 10 } }; },
  (s, r) => { s['serviceMesh'] = { enabled: true, canary: { enabled: true, canaryVersion: 'v2', weight: r.pick([-1, 101, 1000]) } }; },
  (s) => { s['serviceMesh'] = { enabled: true, canary: { enabled: true, canaryVersion: 'v2', steps: [{ setWeight: 10, pause: {} }] } }; },
  (s) => { s['serviceMesh'] = { enabled: true, trafficPolicy: { connectionTimeout: '10' } }; },
  (s) => { s['autoscaling'] = { enabled: true, minReplicas: 5, maxReplicas: 3, targetCPU: 50 }; },
  (s) => { s['autoscaling'] = { enabled: true, maxReplicas: 5 }; },
  (s) => { s['healthCheck'] = { readinessProbe: { httpGet: { port: 80 }, tcpSocket: { port: 80 } } }; },
  (s) => { s['healthCheck'] = { livenessProbe: { httpGet: { port: 0 } } }; },
  (s) => { s['configMaps'] = [{ name: 'a', mountPath: 'relative' }]; },
  (s) => { s['env'] = 'not-a-list'; },
  (s) => { s['service'] = 42; },
];

/** Specs the CRD accepts but the cluster (Deployment validation) refuses: only the operator can tell. */
// Specs that pass the CRD and fail only in the cluster, plus the Unicode-whitespace images this test once found
// slipping through the CRD (now rejected by its rule, as the pod validation would).
const operatorOnly: [(s: Json) => void, Expect][] = [
  [(s) => { s['image'] = `nginx:1.25${NBSP}`; }, 'reject'],
  [(s) => { s['image'] = `${NBSP}nginx:1.25`; }, 'reject'],
  [(s) => { s['env'] = [{ name: 'F', valueFrom: { fieldRef: { fieldPath: 'metadata.bogus' } } }]; }, 'operator-rejects'],
  [(s) => { s['env'] = [{ name: 'K', valueFrom: { configMapKeyRef: { name: 'cm', key: 'bad key!' } } }]; }, 'operator-rejects'],
];

function generate(r: Rng): Case[] {
  const cases: Case[] = [];
  const fixtures = specExamples.filter((e) => !e.transition && !e.valid);
  let id = 0;
  const add = (category: string, name: string, spec: Json | undefined, expect: Expect, messageIncludes?: string) =>
    cases.push({ id: id++, category, name, spec, expect, ...(messageIncludes ? { messageIncludes } : {}) });
  const fresh = (prefix: string) => `${prefix}-${id}`;

  while (cases.length < TOTAL) {
    const kind = r.weighted({ valid: 9, broken: 54, fixture: 14, names: 10, operatorOnly: 3, weird: 9 });
    switch (kind) {
      case 'valid':
        add('valid', fresh('ok'), validSpec(r), 'accept');
        break;
      case 'broken': {
        const spec = validSpec(r);
        const n = r.int(1, 2);
        for (let i = 0; i < n; i++) r.pick(breakers)(spec, r);
        add('broken', fresh('bad'), spec, 'reject');
        break;
      }
      case 'fixture': {
        const row = r.pick(fixtures);
        if (row.transition) break;
        // An example refused for its name (or its name with its spec) keeps its name: under a fresh one it is valid.
        const aboutName = row.name.startsWith('name-') || (row.messageIncludes ?? '').includes('metadata.name');
        add('fixture', aboutName ? (row.app['metadata'] as Json)['name'] : fresh(row.name.slice(0, 40)), row.app['spec'] as Json, 'reject', row.messageIncludes);
        break;
      }
      case 'names': {
        const n = r.int(0, 6);
        const name = [
          `a${'b'.repeat(r.int(56, 300))}`, // too long: the CEL limit (56) or the API server's (253)
          `a${'b'.repeat(54)}c`, // exactly 56: accepted
          'café-ünïcode', '名前', 'UPPER-case', `x-${id}-`, '', // malformed
        ][n]!;
        if (n === 1) {
          // The 56-character name is valid; only the first of these gets in, the others are duplicates.
          add('names', name, { image: 'nginx:1.25' }, 'either');
        } else {
          add('names', name, { image: 'nginx:1.25' }, 'reject');
        }
        break;
      }
      case 'operatorOnly': {
        const spec: Json = { image: 'nginx:1.25' };
        const [mutate, expect] = r.pick(operatorOnly);
        mutate(spec);
        add('operator-only', fresh('opfail'), spec, expect);
        break;
      }
      case 'weird': {
        // Duplicate names of earlier valid cases, missing or null specs, unknown fields.
        const earlier = cases.filter((c) => c.category === 'valid');
        const w = r.int(0, 3);
        if (w === 0 && earlier.length) add('duplicate', r.pick(earlier).name, validSpec(r), 'reject');
        else if (w === 1) add('no-spec', fresh('nospec'), undefined, 'either');
        else if (w === 2) add('unknown-fields', fresh('unknown'), { ...validSpec(r), bogus: { deep: [1, 2, 3] }, replicas: 1 }, 'either');
        else add('null-fields', fresh('nulls'), { image: 'nginx:1.25', service: null, env: null, serviceMesh: null }, 'either');
        break;
      }
    }
  }
  return cases;
}

async function pool<T, R>(items: T[], concurrency: number, fn: (item: T) => Promise<R>): Promise<R[]> {
  const out: R[] = new Array<R>(items.length);
  let next = 0;
  await Promise.all(Array.from({ length: concurrency }, async () => {
    while (next < items.length) {
      const i = next++;
      out[i] = await fn(items[i]!);
    }
  }));
  return out;
}

/** A rejection names what is wrong: a field path (spec..., metadata.name) or, for a duplicate, the object. */
const NAMES_A_FIELD = /(^|[\s[":])(spec(\.[\w[\]."-]+)?|metadata\.name|metadata)\b|already exists/;

describe('hostile input', () => {
  let ns: { name: string; cleanup: () => Promise<void> };
  let op: OperatorProcess;
  let pid: number | undefined;
  const outcomes: Outcome[] = [];

  before(async () => {
    ns = await testNamespace('hostile');
    op = await startOperator({ namespaces: [ns.name] });
    pid = op.pid();
  });
  after(async () => {
    // Let the operator release the finalizers before it stops, so the namespace can go.
    await kube(['-n', ns.name, 'delete', 'applications', '--all', '--wait=true', '--timeout=60s']).catch(() => '');
    await op?.stop();
    await closeTemporal();
    await ns?.cleanup();
  });

  it('a control app created before the storm runs', async () => {
    const kubeClient = await kubeApi();
    await kubeClient.create(appManifest(ns.name, 'control', { image: 'nginx:1.25', replicas: 1 }) as never);
    await waitForPhase(ns.name, 'control', 'Running', 120_000);
  });

  it(`${TOTAL} generated Applications: each rejected with a message naming a field, or accepted`, async () => {
    const cases = generate(mulberry32(SEED));
    assert.ok(cases.length >= 500);
    const kubeClient = await kubeApi();
    const t0 = Date.now();
    // Duplicates go in a second wave, once the objects they copy exist.
    const send = (batch: Case[]) => pool(batch, CONCURRENCY, async (c): Promise<Outcome> => {
      const obj: Json = { apiVersion: API_VERSION, kind: KIND, metadata: { name: c.name, namespace: ns.name } };
      if (c.spec !== undefined) obj['spec'] = c.spec;
      try {
        await kubeClient.create(obj as never);
        return { c, accepted: true };
      } catch (err) {
        if (!(err instanceof KubeError)) throw err;
        return { c, accepted: false, status: err.status, message: err.message };
      }
    });
    outcomes.push(...await send(cases.filter((c) => c.category !== 'duplicate')));
    outcomes.push(...await send(cases.filter((c) => c.category === 'duplicate')));
    const accepted = outcomes.filter((o) => o.accepted);
    const byCategory = new Map<string, { accepted: number; rejected: number }>();
    for (const o of outcomes) {
      const e = byCategory.get(o.c.category) ?? { accepted: 0, rejected: 0 };
      e[o.accepted ? 'accepted' : 'rejected']++;
      byCategory.set(o.c.category, e);
    }
    console.log(`sent ${outcomes.length} in ${((Date.now() - t0) / 1000).toFixed(1)} s: ${accepted.length} accepted; ${JSON.stringify(Object.fromEntries(byCategory))}`);

    const problems: string[] = [];
    for (const o of outcomes) {
      const label = `#${o.c.id} ${o.c.category} ${JSON.stringify(o.c.name).slice(0, 40)}`;
      if (!o.accepted) {
        if (o.status !== 422 && o.status !== 409 && o.status !== 400) problems.push(`${label}: rejected with status ${o.status}: ${o.message}`);
        if (!o.message || !NAMES_A_FIELD.test(o.message)) problems.push(`${label}: rejection does not name a field: ${o.message}`);
        if (o.c.messageIncludes && !o.message?.includes(o.c.messageIncludes)) problems.push(`${label}: message lacks "${o.c.messageIncludes}": ${o.message}`);
        if (o.c.category === 'duplicate' && o.status !== 409) problems.push(`${label}: a duplicate was refused with ${o.status}, not 409 AlreadyExists`);
        if (o.c.expect === 'accept' || o.c.expect === 'operator-rejects') problems.push(`${label}: a valid spec was rejected: ${o.message}`);
      } else if (o.c.expect === 'reject') {
        problems.push(`${label}: accepted although it breaks a rule: ${JSON.stringify(o.c.spec).slice(0, 300)}`);
      }
    }
    assert.deepEqual(problems, []);
  });

  it('changes to immutable fields (storage) are rejected with the field named', async () => {
    const kubeClient = await kubeApi();
    await kubeClient.create(appManifest(ns.name, 'stor', { image: 'nginx:1.25', storage: { size: '1Gi', storageClass: '' } }) as never);
    await kubeClient.create(appManifest(ns.name, 'nostor', { image: 'nginx:1.25' }) as never);
    const ref = (name: string) => ({ apiVersion: API_VERSION, kind: KIND, namespace: ns.name, name });
    const attempts: [string, Json, RegExp][] = [
      ['stor', { spec: { storage: { size: '2Gi' } } }, /storage is immutable after creation/],
      ['stor', { spec: { storage: { accessMode: 'ReadWriteMany' } } }, /storage is immutable after creation/],
      ['stor', { spec: { storage: null } }, /storage cannot be added or removed/],
      ['nostor', { spec: { storage: { size: '1Gi' } } }, /storage cannot be added or removed/],
    ];
    for (const [name, patch, re] of attempts) {
      await assert.rejects(kubeClient.mergePatch(ref(name), patch), (err: Error) => {
        assert.match(err.message, re);
        assert.match(err.message, /spec/);
        return true;
      });
    }
    // An allowed change next to storage still goes through.
    // (Not waiting for Running: the claim binds only if the stack's volume pool has a free volume left.)
    await kubeClient.mergePatch(ref('stor'), { spec: { image: 'nginx:1.26' } });
    await waitForObject('stor rolled to nginx:1.26', () => getDeployment(ns.name, 'stor'), (d) => d?.spec.template.spec.containers[0].image === 'nginx:1.26', 90_000);
    assert.equal((await getApp(ns.name, 'stor'))!.spec.storage.size, '1Gi');
  });

  it('a bad change to a Running app fails with a reason and leaves what ran in place', async () => {
    const kubeClient = await kubeApi();
    const ref = { apiVersion: API_VERSION, kind: KIND, namespace: ns.name, name: 'was-running' };
    await kubeClient.create(appManifest(ns.name, 'was-running', { image: 'nginx:1.25' }) as never);
    await waitForPhase(ns.name, 'was-running', 'Running', 120_000);
    // A new image with a downward-API field the Deployment refuses: the CRD cannot know, only the cluster can.
    await kubeClient.mergePatch(ref, { spec: { image: 'nginx:1.26', env: [{ name: 'F', valueFrom: { fieldRef: { fieldPath: 'metadata.bogus' } } }] } });
    const reasoned = (a: Json | null) => a?.status?.observedGeneration === a?.metadata.generation
      && (a?.status?.conditions as Json[] | undefined)?.some((c) => ['InvalidSpec', 'Degraded'].includes(c.type) && c.status === 'True' && c.reason && c.message);
    const app = await waitForObject('was-running reports the bad image as InvalidSpec/Degraded with a reason', () => getApp(ns.name, 'was-running'), (a) => reasoned(a) === true, 45_000)
      .catch(async (err: Error) => {
        const d = await getDeployment(ns.name, 'was-running');
        throw new Error(`${err.message}\nDeployment image ${JSON.stringify(d?.spec.template.spec.containers[0].image)}, conditions ${JSON.stringify(d?.status?.conditions?.map((c: Json) => `${c.type}:${c.reason}:${c.message}`))}`);
      });
    assert.notEqual(app!.status.phase, 'Running');
    const pods = await kubeClient.list<Json>({ apiVersion: 'v1', kind: 'Pod', namespace: ns.name }, 'app.kubernetes.io/name=was-running');
    assert.ok(pods.items.some((p) => p.spec.containers[0].image === 'nginx:1.25' && p.status?.conditions?.some((c: Json) => c.type === 'Ready' && c.status === 'True')), 'the old version keeps running');
    // And it recovers once the spec is fixed.
    await kubeClient.mergePatch(ref, { spec: { image: 'nginx:1.26', env: null } });
    await waitForPhase(ns.name, 'was-running', 'Running', 120_000);
  });

  it('accepted apps converge or fail with a reason, never half-applied (sampled)', async () => {
    const kubeClient = await kubeApi();
    const accepted = outcomes.filter((o) => o.accepted);
    // Deterministic sample: every operator-only case, then valid ones spread over the run.
    const must = accepted.filter((o) => o.c.expect === 'operator-rejects' || o.c.expect === 'either');
    const rest = accepted.filter((o) => !must.includes(o));
    const step = Math.max(1, Math.ceil(rest.length / Math.max(1, SAMPLE - must.length)));
    const sample = [...must, ...rest.filter((_, i) => i % step === 0)].slice(0, Math.max(SAMPLE, must.length));
    const deadline = Date.now() + 90_000;
    const verdicts = new Map<string, string>();
    let last: string[] = [];
    while (Date.now() < deadline) {
      const apps = new Map((await kubeClient.list<Json>({ apiVersion: API_VERSION, kind: KIND, namespace: ns.name })).items.map((a) => [a.metadata.name as string, a]));
      last = [];
      for (const o of sample) {
        if (verdicts.has(o.c.name)) continue;
        const a = apps.get(o.c.name);
        const s = a?.status ?? {};
        const current = a && s.observedGeneration === a.metadata.generation;
        if (current && s.phase === 'Running') verdicts.set(o.c.name, 'Running');
        else if (current && s.phase === 'Failed') {
          const cond = (s.conditions as Json[] | undefined)?.find((c) => ['InvalidSpec', 'Degraded'].includes(c.type) && c.status === 'True');
          verdicts.set(o.c.name, cond?.reason && cond.message ? `Failed:${cond.type}:${cond.reason}` : `Failed without a reasoned condition: ${JSON.stringify(s.conditions)}`);
        } else last.push(`${o.c.name}: phase=${s.phase} observedGeneration=${s.observedGeneration}/${a?.metadata.generation}`);
      }
      if (last.length === 0) break;
      await sleep(1000);
    }
    const problems: string[] = [];
    for (const l of last) {
      const name = l.split(':')[0]!;
      const d = await getDeployment(ns.name, name);
      const spec = sample.find((o) => o.c.name === name)?.c.spec;
      problems.push(`not converged in 90 s: ${l}; spec ${JSON.stringify(spec).slice(0, 160)}; Deployment ${d ? JSON.stringify(d.status?.conditions?.map((c: Json) => `${c.type}:${c.reason}:${String(c.message).slice(0, 160)}`)) : 'absent'}`);
    }
    for (const o of sample) {
      const v = verdicts.get(o.c.name);
      if (!v) continue;
      if (v.startsWith('Failed without')) problems.push(`${o.c.name}: ${v}`);
      if (o.c.expect === 'accept' && v !== 'Running') problems.push(`${o.c.name} (valid ${JSON.stringify(o.c.spec).slice(0, 200)}): ${v}`);
      if (o.c.expect === 'operator-rejects' && !v.startsWith('Failed')) problems.push(`${o.c.name} (${JSON.stringify(o.c.spec)}): ${v}, expected Failed`);
    }
    const tally: Record<string, number> = {};
    for (const v of verdicts.values()) tally[v] = (tally[v] ?? 0) + 1;
    console.log(`sampled ${sample.length} of ${accepted.length} accepted: ${JSON.stringify(tally)}`);

    // Never half-applied: no accepted app that failed (and never ran) has any child.
    const apps = (await kubeClient.list<Json>({ apiVersion: API_VERSION, kind: KIND, namespace: ns.name })).items;
    for (const a of apps.filter((x) => x.status?.phase === 'Failed' && x.metadata.name !== 'was-running')) {
      const name = a.metadata.name as string;
      for (const [apiVersion, kind] of [['apps/v1', 'Deployment'], ['v1', 'Service'], ['networking.istio.io/v1', 'VirtualService'], ['networking.istio.io/v1', 'DestinationRule'], ['autoscaling/v2', 'HorizontalPodAutoscaler'], ['v1', 'PersistentVolumeClaim']] as const) {
        if (await kubeClient.get({ apiVersion, kind, namespace: ns.name, name })) problems.push(`${name} is Failed (${a.status.conditions?.map((c: Json) => c.reason).join(',')}) but its ${kind} exists: half-applied`);
      }
    }
    assert.deepEqual(problems, []);
  });

  it('the operator survived (same pid, ready) and still serves the control app', async () => {
    assert.equal(op.pid(), pid, 'the operator process is the one started before the storm');
    assert.ok(await op.isReady(), '/readyz OK');
    const kubeClient = await kubeApi();
    await kubeClient.mergePatch({ apiVersion: API_VERSION, kind: KIND, namespace: ns.name, name: 'control' }, { spec: { image: 'nginx:1.27' } });
    await waitForObject('control rolled to nginx:1.27', () => getDeployment(ns.name, 'control'), (d) => d?.spec.template.spec.containers[0].image === 'nginx:1.27', 120_000);
    await waitForPhase(ns.name, 'control', 'Running', 120_000);
  });
});
