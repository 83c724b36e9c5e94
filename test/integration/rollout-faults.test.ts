// What a demanding user does to a rollout in flight, against the real API server, Temporal and kwok: hand edits of
// its routes, deleting its canary, a canary that starts slowly, pods that cannot start, and deleting the namespace.
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { readRouteWeights } from '../../render/istio.ts';
import { slowReadyMs, testImages } from '../../stack/stack.ts';
import { appManifest, applyAsUser, closeTemporal, getApp, getDeployment, getObject, kube, kubeJson, temporalClient, testNamespace, waitForObject, waitForPhase, type Json } from '../../testkit/apps.ts';
import { setTimeout as sleep } from 'node:timers/promises';
import { assertPromoted, virtualService, waitCanaryPhase, waitWeights } from '../../testkit/canary.ts';
import { startOperator, type OperatorProcess } from '../../testkit/operator.ts';
import { eventually } from '../../lib/poll.ts';
import { operatorSuite } from '../../testkit/suite.ts';
import { getRelease, meshApp as releaseApp, releaseManifest, releasePhaseIs, waitRelease } from '../../testkit/release.ts';
import { controlRelease } from '../../client/release.ts';

// A long gate interval: anything that happens well within it was not waiting for the next scheduled check.
const slowGates = { interval: '30s', failureThreshold: 3, initialDelay: '0s' };
const meshApp = (ns: string, name: string, canary?: Json, spec: Json = {}) => appManifest(ns, name, {
  image: 'nginx:1.25', replicas: 1, ...spec,
  serviceMesh: { enabled: true, ...(canary ? { canary: { enabled: true, ...canary } } : {}) },
});

describe('rollouts under hand edits and slow or broken pods', () => {
  const s = operatorSuite('faults', { routes: true });

  it('a hand edit of the VirtualService during a paused rollout is put back well within a gate interval, and status agrees with it', async () => {
    await applyAsUser(meshApp(s.ns, 'edit', { canaryVersion: 'v2', weight: 30, healthGates: slowGates }));
    await waitCanaryPhase(s.ns, 'edit', 'Paused');
    await waitWeights(s.ns, 'edit', 30);
    const edited = Date.now();
    await kube(['-n', s.ns, 'patch', 'virtualservice', 'edit', '--type=json', '-p',
      JSON.stringify([{ op: 'replace', path: '/spec/http/0/route/0/weight', value: 0 }, { op: 'replace', path: '/spec/http/0/route/1/weight', value: 100 }])]);
    await waitWeights(s.ns, 'edit', 30, 20_000);
    assert.ok(Date.now() - edited < 20_000, 'restored before the next scheduled gate check');
    await waitForObject('status says the weight the mesh has', () => getApp(s.ns, 'edit'), (a) => a?.status?.canary?.weight === 30, 10_000);
    assert.equal(readRouteWeights(await virtualService(s.ns, 'edit'))!.canary, 30);
  });

  it('deleting the canary Deployment moves traffic to stable at once, puts the canary back and restores its weight', async () => {
    await applyAsUser(meshApp(s.ns, 'gone', { canaryVersion: 'v2', weight: 30, healthGates: slowGates }));
    await waitCanaryPhase(s.ns, 'gone', 'Paused');
    await waitWeights(s.ns, 'gone', 30);
    const before = await getDeployment(s.ns, 'gone-canary');
    await kube(['-n', s.ns, 'delete', 'deployment', 'gone-canary', '--wait=false']);
    // Well before the next scheduled check (30 s): the watcher's delete event made the rollout look at once. The canary
    // may be back within a second, so look often.
    await eventually('traffic off the deleted canary', async () => (readRouteWeights(await virtualService(s.ns, 'gone'))?.canary === 0 ? true : undefined), { timeoutMs: 15_000, intervalMs: 50 });
    await waitForObject('the canary Deployment put back', () => getDeployment(s.ns, 'gone-canary'), (d) => Boolean(d && d.metadata.uid !== before!.metadata.uid && d.status?.readyReplicas >= 1), 30_000);
    await waitWeights(s.ns, 'gone', 30, 40_000);
    // Status follows the VirtualService (it is written right after the route is).
    await waitForObject('status says 30%', () => getApp(s.ns, 'gone'), (a) => a?.status?.canary?.weight === 30 && a.status.canary.phase === 'Paused', 10_000);
  });

  it('a canary scaled to 0 or re-imaged by hand is put back, not rolled back, and gets no traffic meanwhile', async () => {
    await applyAsUser(meshApp(s.ns, 'drift', { canaryVersion: 'v2', weight: 30, healthGates: slowGates }));
    await waitCanaryPhase(s.ns, 'drift', 'Paused');
    await waitWeights(s.ns, 'drift', 30);
    const notRolledBack = async () => {
      const canary = (await getApp(s.ns, 'drift'))?.status?.canary;
      assert.ok(canary?.phase === 'Paused' || canary?.phase === 'Progressing', `rolled back for a hand edit: ${canary?.phase}: ${canary?.message}`);
    };
    for (const edit of [['scale', 'deployment', 'drift-canary', '--replicas=0'], ['set', 'image', 'deployment/drift-canary', 'app=evil:1']]) {
      await kube(['-n', s.ns, ...edit]);
      // The watch wakes the rollout at the edit, well before the next scheduled gate check (30 s).
      await eventually(`traffic off the canary after kubectl ${edit[0]}`, async () => (readRouteWeights(await virtualService(s.ns, 'drift'))?.canary === 0 ? true : undefined), { timeoutMs: 15_000, intervalMs: 50 });
      await waitForObject(`the canary put back after kubectl ${edit[0]}`, () => getDeployment(s.ns, 'drift-canary'),
        (d) => d?.spec?.replicas === 1 && d.spec.template.spec.containers[0].image === 'nginx:v2' && d.status?.readyReplicas >= 1, 30_000);
      await waitWeights(s.ns, 'drift', 30, 40_000);
      await notRolledBack();
    }
    // Status follows the VirtualService (written right after the route is).
    await waitForObject('status says 30% again', () => getApp(s.ns, 'drift'), (a) => a?.status?.canary?.weight === 30 && a.status.canary.phase === 'Paused', 10_000);
    const events = await kubeJson<{ items: { message: string }[] }>(['-n', s.ns, 'get', 'events', '--field-selector', 'involvedObject.name=drift,reason=CanaryRepaired']);
    const messages = events.items.map((e) => e.message).join('\n');
    assert.match(messages, /the canary Deployment has 0 replicas, not the rollout's 1/);
    assert.match(messages, /the canary Deployment's container app runs evil:1, not the rollout's nginx:v2/);
  });

  it('a canary that takes longer than failureThreshold intervals to start is not rolled back during its start-up grace', async () => {
    const gates = { interval: '2s', failureThreshold: 3, initialDelay: '60s' };
    await applyAsUser(meshApp(s.ns, 'slow', { canaryVersion: 'v2', image: testImages.slow, healthGates: gates, steps: [{ setWeight: 20 }, { pause: { duration: '1s' } }] }));
    // Becoming ready takes slowReadyMs (15 s): 7 failed checks at a 2 s interval, none counted.
    await eventually('the slow canary promoted', async () => {
      const canary = (await getApp(s.ns, 'slow'))?.status?.canary;
      if (canary?.phase === 'RolledBack') throw new assert.AssertionError({ message: `rolled back: ${canary.message}` });
      return canary?.phase === 'Promoted' ? true : undefined;
    }, { timeoutMs: slowReadyMs + 60_000 });
    await assertPromoted(s.ns, 'slow', testImages.slow);
  });

  it('a canary that never gets ready is still rolled back once the grace is over, and the conditions say so', async () => {
    await applyAsUser(meshApp(s.ns, 'never', { canaryVersion: 'v2', image: testImages.unready, healthGates: { interval: '1s', failureThreshold: 2, initialDelay: '4s' }, steps: [{ setWeight: 20 }] }));
    const app = await waitCanaryPhase(s.ns, 'never', 'RolledBack', 60_000);
    assert.equal(app.status.canary.reason, 'HealthGateFailed');
    const cond = app.status.conditions.find((c: Json) => c.type === 'CanaryProgressing');
    assert.deepEqual([cond.status, cond.reason], ['False', 'HealthGateFailed']);
  });

  for (const [image, reason] of [[testImages.pullError, 'ImagePullBackOff'], [testImages.configError, 'CreateContainerConfigError']] as const) {
    it(`pods that cannot start say why in the Ready condition and status.message: ${reason}`, async () => {
      const name = reason.toLowerCase().slice(0, 20);
      await applyAsUser(appManifest(s.ns, name, { image, replicas: 2 }));
      const app = await waitForObject(`${name} says ${reason}`, () => getApp(s.ns, name), (a) => String(a?.status?.message ?? '').includes(reason), 60_000);
      const ready = app!.status.conditions.find((c: Json) => c.type === 'Ready');
      assert.equal(ready.status, 'False');
      assert.match(ready.message, new RegExp(`^0/2 replicas available; pod ${name}-[a-z0-9-]+: container app: ${reason}: .+`));
      assert.equal(app!.status.message, ready.message);
      const wide = await kube(['-n', s.ns, 'get', 'application', name, '-o', 'wide']);
      assert.match(wide, new RegExp(reason), 'kubectl get -o wide shows it');
    });
  }

  it('while the HPA owns the replica count, status and kubectl get say so, whatever spec.replicas says', async () => {
    await applyAsUser(appManifest(s.ns, 'hpa', { image: 'nginx:1.25', replicas: 5, autoscaling: { enabled: true, minReplicas: 2, maxReplicas: 4, targetCPU: 80 } }));
    const app = await waitForPhase(s.ns, 'hpa', 'Running');
    const deployment = await getDeployment(s.ns, 'hpa');
    assert.equal(app.status.desiredReplicas, deployment!.spec.replicas, 'desired comes from the Deployment the HPA scales, not from the spec');
    assert.notEqual(app.status.desiredReplicas, 5);
    const cond = app.status.conditions.find((c: Json) => c.type === 'Autoscaled');
    assert.equal(cond.status, 'True');
    assert.match(cond.message, /spec.replicas \(5\) is ignored and kubectl scale has no effect/);
    const row = (await kubeJson<Json>(['-n', s.ns, 'get', 'application', 'hpa'])).status;
    assert.equal(row.desiredReplicas, app.status.desiredReplicas);
    const table = await kube(['-n', s.ns, 'get', 'application', 'hpa']);
    assert.match(table.split('\n')[0]!, /DESIRED/);
  });

  it('every VirtualService written in this file summed to 100 and never routed to a canary without ready pods', async () => {
    const { seen, violations } = await s.routes.stop();
    assert.ok(seen >= 6, `observed ${seen} VirtualService versions`);
    assert.deepEqual(violations, []);
  });
});

describe('names another Application holds (web and web-canary, web and web-preview)', () => {
  const s = operatorSuite('names');
  const owner = (o: Json | null) => o?.metadata?.ownerReferences?.find((r: Json) => r.controller)?.name as string | undefined;

  it("a canary whose Deployment name is another Application's Deployment is refused at once, and that Deployment is untouched, even when its Application goes", async () => {
    await applyAsUser(meshApp(s.ns, 'nc-canary'));
    await applyAsUser(meshApp(s.ns, 'nc'));
    await waitForPhase(s.ns, 'nc-canary', 'Running');
    await waitForPhase(s.ns, 'nc', 'Running');
    const before = await getDeployment(s.ns, 'nc-canary');
    await applyAsUser(meshApp(s.ns, 'nc', { canaryVersion: 'v2', weight: 20 }));
    // Refused on the first try (it used to retry until the progress deadline, 30 min), and the other's Deployment kept.
    const app = await waitCanaryPhase(s.ns, 'nc', 'RolledBack', 30_000);
    assert.match(app.status.canary.message, /Deployment nc-canary belongs to Application nc-canary, not to Application nc/);
    let d = await getDeployment(s.ns, 'nc-canary');
    assert.equal(d?.metadata.uid, before!.metadata.uid, 'not deleted by the rollout that was refused');
    assert.equal(owner(d), 'nc-canary');
    assert.equal(d?.spec.template.spec.containers[0].image, 'nginx:1.25');
    // Deleting nc deletes every child it may have had after a rollout, by name: not the other's.
    await kube(['-n', s.ns, 'delete', 'application', 'nc', '--wait=true', '--timeout=60s']);
    d = await getDeployment(s.ns, 'nc-canary');
    assert.equal(d?.metadata.uid, before!.metadata.uid, 'not deleted with nc');
    assert.equal((await getApp(s.ns, 'nc-canary'))?.status?.phase, 'Running');
  });

  it("a blue-green preview Service named like another Application's Service is refused, and that Service keeps its selector and owner", async () => {
    const plain = (name: string, canary?: Json) => appManifest(s.ns, name, {
      image: 'nginx:1.25', replicas: 1, ...(canary ? { serviceMesh: { canary: { enabled: true, strategy: 'blueGreen', ...canary } } } : {}),
    });
    await applyAsUser(plain('nb-preview'));
    await applyAsUser(plain('nb'));
    await waitForPhase(s.ns, 'nb-preview', 'Running');
    await waitForPhase(s.ns, 'nb', 'Running');
    const before = await getObject('v1', 'Service', s.ns, 'nb-preview');
    await applyAsUser(plain('nb', { canaryVersion: 'v2' }));
    const app = await waitForObject('nb says which name is taken', () => getApp(s.ns, 'nb'),
      (a) => /Service nb-preview belongs to Application nb-preview, not to Application nb/.test(JSON.stringify(a?.status?.conditions ?? [])), 30_000);
    assert.ok(app);
    await sleep(3000);
    const svc = await getObject('v1', 'Service', s.ns, 'nb-preview');
    assert.equal(svc?.metadata.uid, before!.metadata.uid);
    assert.equal(owner(svc), 'nb-preview');
    assert.deepEqual(svc?.spec.selector, before!.spec.selector, "the other Application's traffic still goes to its own pods");
  });
});

describe('admission that rewrites what is applied (a registry mirror, a pinned digest, a minimum size, a sidecar put first, as a policy engine does)', () => {
  const digest = `sha256:${'0'.repeat(63)}1`;
  const sidecarImage = 'mirror.local/envoy:1.30';
  /** The image of the app's own container, wherever the sidecar policy put it. */
  const appImage = (d: Json | null): string | undefined => d?.spec?.template?.spec?.containers?.find((c: Json) => c.name === 'app')?.image;
  const sidecarFirst = (d: Json | null) => d?.spec?.template?.spec?.containers?.[0]?.image === sidecarImage;
  const policy = (ns: string) => {
    const rule = { apiGroups: ['apps'], apiVersions: ['v1'], operations: ['CREATE', 'UPDATE'], resources: ['deployments'] };
    const rewritten = `object.spec.template.spec.containers.filter(c, !c.image.startsWith('mirror.local/')).map(c, Object.spec.template.spec.containers{name: c.name, image: 'mirror.local/' + c.image + '@${digest}'})`;
    return [{
      apiVersion: 'admissionregistration.k8s.io/v1beta1', kind: 'MutatingAdmissionPolicy', metadata: { name: `mirror-${ns}` },
      spec: {
        matchConstraints: { namespaceSelector: { matchLabels: { 'kubernetes.io/metadata.name': ns } }, resourceRules: [rule] },
        matchConditions: [{ name: 'unmirrored', expression: "object.spec.template.spec.containers.exists(c, !c.image.startsWith('mirror.local/'))" }],
        failurePolicy: 'Fail', reinvocationPolicy: 'Never',
        mutations: [{ patchType: 'ApplyConfiguration', applyConfiguration: { expression: `Object{spec: Object.spec{template: Object.spec.template{spec: Object.spec.template.spec{containers: ${rewritten}}}}}` } }],
      },
    }, {
      apiVersion: 'admissionregistration.k8s.io/v1beta1', kind: 'MutatingAdmissionPolicyBinding', metadata: { name: `mirror-${ns}` }, spec: { policyName: `mirror-${ns}` },
    }, {
      // And a minimum size, as a policy for availability sets it.
      apiVersion: 'admissionregistration.k8s.io/v1beta1', kind: 'MutatingAdmissionPolicy', metadata: { name: `min-two-${ns}` },
      spec: {
        matchConstraints: { namespaceSelector: { matchLabels: { 'kubernetes.io/metadata.name': ns } }, resourceRules: [rule] },
        matchConditions: [{ name: 'below-two', expression: 'has(object.spec.replicas) && object.spec.replicas < 2' }],
        failurePolicy: 'Fail', reinvocationPolicy: 'Never',
        mutations: [{ patchType: 'ApplyConfiguration', applyConfiguration: { expression: 'Object{spec: Object.spec{replicas: 2}}' } }],
      },
    }, {
      apiVersion: 'admissionregistration.k8s.io/v1beta1', kind: 'MutatingAdmissionPolicyBinding', metadata: { name: `min-two-${ns}` }, spec: { policyName: `min-two-${ns}` },
    }, {
      // And a sidecar, put before the app's container (a JSON patch at index 0), as some injectors do.
      apiVersion: 'admissionregistration.k8s.io/v1beta1', kind: 'MutatingAdmissionPolicy', metadata: { name: `sidecar-${ns}` },
      spec: {
        matchConstraints: { namespaceSelector: { matchLabels: { 'kubernetes.io/metadata.name': ns } }, resourceRules: [rule] },
        matchConditions: [{ name: 'no-sidecar', expression: "!object.spec.template.spec.containers.exists(c, c.name == 'proxy')" }],
        failurePolicy: 'Fail', reinvocationPolicy: 'Never',
        mutations: [{ patchType: 'JSONPatch', jsonPatch: { expression: `[JSONPatch{op: "add", path: "/spec/template/spec/containers/0", value: Object.spec.template.spec.containers{name: "proxy", image: "${sidecarImage}"}}]` } }],
      },
    }, {
      apiVersion: 'admissionregistration.k8s.io/v1beta1', kind: 'MutatingAdmissionPolicyBinding', metadata: { name: `sidecar-${ns}` }, spec: { policyName: `sidecar-${ns}` },
    }];
  };
  let bound = '';
  const s = operatorSuite('mirror', {
    routes: true,
    setUp: async (ns) => {
      bound = ns;
      await kube(['apply', '-f', '-'], JSON.stringify({ apiVersion: 'v1', kind: 'List', items: policy(ns) }));
    },
    tearDown: async () => {
      if (bound) await kube(['delete', 'mutatingadmissionpolicybindings.v1beta1.admissionregistration.k8s.io,mutatingadmissionpolicies.v1beta1.admissionregistration.k8s.io', `mirror-${bound}`, `min-two-${bound}`, `sidecar-${bound}`, '--ignore-not-found']);
    },
  });

  it('a canary admitted as another image gets its traffic, is not taken for a hand edit, and its promote finishes', async () => {
    // The policy takes a moment to reach the API server's admission chain: wait until a Deployment is rewritten.
    await applyAsUser(meshApp(s.ns, 'mir'));
    await waitForObject('the policy rewrites the stable Deployment', () => getDeployment(s.ns, 'mir'),
      (d) => appImage(d) === `mirror.local/nginx:1.25@${digest}` && sidecarFirst(d), 30_000);
    await waitForPhase(s.ns, 'mir', 'Running');
    await applyAsUser(meshApp(s.ns, 'mir', { canaryVersion: 'v2', healthGates: { interval: '2s', failureThreshold: 2 }, steps: [{ setWeight: 30 }, { pause: { duration: '10s' } }] }));
    await waitWeights(s.ns, 'mir', 30, 60_000);
    const app = await waitCanaryPhase(s.ns, 'mir', 'Promoted', 90_000);
    assert.equal(app.spec.image, 'nginx:v2', 'the spec says what the user wrote, not what admission made of it');
    const stable = await getDeployment(s.ns, 'mir');
    assert.equal(appImage(stable), `mirror.local/nginx:v2@${digest}`);
    assert.ok(sidecarFirst(stable), 'the sidecar kept first');
    assert.equal(await getDeployment(s.ns, 'mir-canary'), null, 'the canary removed');
    await waitForPhase(s.ns, 'mir', 'Running');
    const repaired = await kubeJson<{ items: unknown[] }>(['-n', s.ns, 'get', 'events', '--field-selector', 'involvedObject.name=mir,reason=CanaryRepaired']);
    assert.deepEqual(repaired.items.map((e) => (e as { message?: string }).message), [], 'what admission wrote is not a hand edit');
  });

  it('a Release aborted under the policy puts back the Application it promoted, and ends', async () => {
    for (const name of ['rel-a', 'rel-b']) await applyAsUser(releaseApp(s.ns, name));
    await waitForPhase(s.ns, 'rel-a', 'Running');
    await applyAsUser(releaseManifest(s.ns, 'mirrored', {
      steps: [{ setWeight: 50 }, { pause: { duration: '1s' } }], pauseBetweenWaves: {},
      waves: [{ applications: [{ name: 'rel-a', canaryVersion: '2.0' }] }, { applications: [{ name: 'rel-b', canaryVersion: '2.0' }] }],
    }));
    await waitRelease(s.ns, 'mirrored', (r) => r.status?.phase === 'Paused', 'paused between waves', 120_000);
    assert.equal(appImage(await getDeployment(s.ns, 'rel-a')), `mirror.local/registry.example/rel-a:2.0@${digest}`);
    // What the stable Deployment's app container ran when claimed, not the sidecar before it.
    assert.equal((await getRelease(s.ns, 'mirrored'))!.status.applications[0].previousDeploymentImage, `mirror.local/registry.example/rel-a:1.0@${digest}`);
    await controlRelease(await temporalClient(), 'abort', s.ns, 'mirrored', 'change freeze');
    // Before, the revert waited for a Deployment running "registry.example/rel-a:1.0", which admission never stores.
    const aborted = await waitRelease(s.ns, 'mirrored', releasePhaseIs('Aborted'), 'Aborted', 60_000);
    assert.deepEqual(aborted.status.applications.map((a: Json) => `${a.name}:${a.phase}`), ['rel-a:Reverted', 'rel-b:Waiting']);
    const app = await getApp(s.ns, 'rel-a');
    assert.equal(app!.spec.image, 'registry.example/rel-a:1.0');
    assert.equal(appImage(await getDeployment(s.ns, 'rel-a')), `mirror.local/registry.example/rel-a:1.0@${digest}`);
  });

  it('a canary admitted at a size of the policy\'s is not taken for a hand edit at every gate check', async () => {
    // Already mirrored: only the size policy applies to it (an image rewrite would hide the size from the gate check).
    await applyAsUser(meshApp(s.ns, 'size', { canaryVersion: 'v2', healthGates: { interval: '2s', failureThreshold: 2 }, steps: [{ setWeight: 30 }, { pause: {} }] }, { image: 'mirror.local/nginx:1.25' }));
    await waitWeights(s.ns, 'size', 30, 60_000);
    const canary = await getDeployment(s.ns, 'size-canary');
    assert.deepEqual([canary!.spec.replicas, appImage(canary)], [2, 'mirror.local/nginx:v2'], 'the policy sized the canary, and only that');
    // Gate checks every 2 s: a size taken for a hand edit was put back at each of them, with a Warning each time.
    await sleep(7000);
    const repaired = await kubeJson<{ items: { message?: string }[] }>(['-n', s.ns, 'get', 'events', '--field-selector', 'involvedObject.name=size,reason=CanaryRepaired']);
    assert.deepEqual(repaired.items.map((e) => e.message), [], 'what admission wrote is not a hand edit');
    assert.equal((await getApp(s.ns, 'size'))?.status?.canary?.weight, 30);
    const { violations } = await s.routes.stop();
    assert.deepEqual(violations, []);
  });
});

describe('deleting a namespace with a canary in flight', () => {
  let op: OperatorProcess;
  let ns: { name: string; cleanup: () => Promise<void> };
  before(async () => {
    ns = await testNamespace('nsdel');
    op = await startOperator({ namespaces: [ns.name] });
  });
  after(async () => {
    await op?.stop();
    await closeTemporal();
    await ns?.cleanup();
  });

  it('finishes: the rollout is compensated, the finalizer released, the namespace gone', async () => {
    await applyAsUser(meshApp(ns.name, 'doomed', { canaryVersion: 'v2', weight: 30, healthGates: slowGates }));
    await waitCanaryPhase(ns.name, 'doomed', 'Paused');
    await waitWeights(ns.name, 'doomed', 30);
    await kube(['delete', 'namespace', ns.name, '--wait=false']);
    await eventually(`namespace ${ns.name} gone`, async () => {
      const out = await kube(['get', 'namespace', ns.name, '--ignore-not-found', '-o', 'name']);
      return out.trim() === '' ? true : undefined;
    }, { timeoutMs: 120_000, intervalMs: 1000 });
  });
});
