// Why a canary or a stable version cannot start, as a user finds it: pods that cannot pull their image or lack their
// config (kwok's stages for testImages.pullError and configError), against the real API server, Temporal and kwok.
// The operator re-checks a rolling-out Deployment only every 10 minutes here, so whatever status says within
// seconds came from watching the pods, not from the timer.
import assert from 'node:assert/strict';
import { setTimeout as sleep } from 'node:timers/promises';
import { describe, it } from 'node:test';
import { eventually } from '../../lib/poll.ts';
import { testImages } from '../../stack/stack.ts';
import { appManifest, applyAsUser, getApp, kube, kubeApi, waitForObject, type Json } from '../../testkit/apps.ts';
import { assertSteadyState, waitCanaryPhase } from '../../testkit/canary.ts';
import { testFlags } from '../../testkit/operator.ts';
import { operatorSuite } from '../../testkit/suite.ts';

/** The two problems kwok plays, with the kubelet's words for them (stack/stack.ts). */
const problems = [
  { image: testImages.pullError, reason: 'ImagePullBackOff', words: `Back-off pulling image "${testImages.pullError}": manifest unknown` },
  { image: testImages.configError, reason: 'CreateContainerConfigError', words: 'secret "app-secret" not found' },
] as const;

const escaped = (text: string) => text.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
const condition = (app: Json | null, type: string): Json | undefined => app?.status?.conditions?.find((c: Json) => c.type === type);

/** The Warning Events recorded on the Application. */
async function warnings(ns: string, name: string): Promise<Json[]> {
  const events = await (await kubeApi()).list<Json>({ apiVersion: 'events.k8s.io/v1', kind: 'Event', namespace: ns });
  return events.items.filter((e) => e.regarding?.kind === 'Application' && e.regarding?.name === name && e.type === 'Warning');
}

/** When a stable pod of `name` first shows `reason` (polled often: the lag after it is what is measured). */
async function podShows(ns: string, name: string, reason: string): Promise<{ at: number; pod: string }> {
  return eventually(`a pod of ${name} waiting with ${reason}`, async () => {
    const pods = await (await kubeApi()).list<Json>({ apiVersion: 'v1', kind: 'Pod', namespace: ns }, `app.kubernetes.io/name=${name},version=stable`);
    const pod = pods.items.find((p) => !p.metadata.deletionTimestamp && p.status?.containerStatuses?.some((c: Json) => c.state?.waiting?.reason === reason));
    return pod ? { at: Date.now(), pod: pod.metadata.name as string } : undefined;
  }, { timeoutMs: 30_000, intervalMs: 50 });
}

describe('why a canary or a stable version cannot start', () => {
  const s = operatorSuite('podprob', { operator: { flags: [...testFlags, '--progress-recheck-seconds=600'] } });

  for (const p of problems) {
    it(`a canary whose pods fail with ${p.reason} is rolled back, and status, its condition and a Warning Event say which container and why`, async () => {
      const name = `canary-${p.reason.toLowerCase().slice(0, 12)}`;
      await applyAsUser(appManifest(s.ns, name, {
        image: 'nginx:1.25', replicas: 1,
        serviceMesh: { enabled: true, canary: { enabled: true, canaryVersion: 'v2', image: p.image, steps: [{ setWeight: 20 }], healthGates: { interval: '1s', failureThreshold: 2, initialDelay: '0s' } } },
      }));
      const app = await waitCanaryPhase(s.ns, name, 'RolledBack', 60_000);
      const cause = new RegExp(`pod ${name}-canary-[a-z0-9]+-[a-z0-9]+: container app: ${p.reason}: ${escaped(p.words)}`);
      assert.equal(app.status.canary.reason, 'HealthGateFailed');
      assert.match(app.status.canary.message, /health gate failed 2 times in a row: 0\/1 canary replicas ready \(at least 1 required\): pod /);
      assert.match(app.status.canary.message, cause);
      const cond = condition(app, 'CanaryProgressing')!;
      assert.deepEqual([cond.status, cond.reason], ['False', 'HealthGateFailed']);
      assert.match(cond.message, cause);
      const rolledBack = await eventually('the rollback\'s Warning Event', async () => (await warnings(s.ns, name)).find((e) => cause.test(e.note)), { timeoutMs: 10_000 });
      assert.match(rolledBack.note, /^canary v2: /);
      // The pods that showed the cause are gone with the rollback: the message is what is left of it.
      await assertSteadyState(s.ns, name);
    });
  }

  it('a stable version whose pods cannot pull their image: Degraded within seconds, the reason kept past the progress deadline, one Warning Event', async (t) => {
    const name = 'nopull';
    const { image, reason, words } = problems[0];
    await applyAsUser(appManifest(s.ns, name, { image, replicas: 2 }));
    const shown = await podShows(s.ns, name, reason);
    const cause = new RegExp(`pod ${name}-[a-z0-9]+-[a-z0-9]+: container app: ${reason}: ${escaped(words)}$`);
    const degraded = (a: Json | null) => condition(a, 'Degraded')?.status === 'True' && condition(a, 'Degraded')?.reason === reason;
    // Within seconds (about 0.3 s on an idle machine), where the timed re-check alone would take 10 minutes here.
    const app = await waitForObject(`${name} Degraded by ${reason}`, () => getApp(s.ns, name), degraded, 10_000);
    t.diagnostic(`Degraded=True ${Date.now() - shown.at} ms after a pod showed ${reason}`);
    assert.equal(app!.status.phase, 'Pending');
    assert.match(condition(app, 'Degraded')!.message, new RegExp(`^0/2 replicas available; ${cause.source}`));
    assert.equal(condition(app, 'Ready')!.message, app!.status.message);

    // The Deployment controller gives up (a progress deadline of 1 s, set by hand: the operator leaves the field alone).
    await kube(['-n', s.ns, 'patch', 'deployment', name, '--type=merge', '-p', JSON.stringify({ spec: { progressDeadlineSeconds: 1 } })]);
    const failed = await waitForObject(`${name} Failed past its progress deadline`, () => getApp(s.ns, name), (a) => a?.status?.phase === 'Failed', 30_000);
    assert.match(failed!.status.message, new RegExp(`^ReplicaSet "${name}-[a-z0-9]+" has timed out progressing; ${cause.source}`));
    assert.equal(condition(failed, 'Ready')!.reason, 'ProgressDeadlineExceeded');
    assert.deepEqual([condition(failed, 'Degraded')!.status, condition(failed, 'Degraded')!.reason, condition(failed, 'Degraded')!.message], ['True', reason, failed!.status.message]);

    // A new version that fails the same way: a new ReplicaSet, new pods, new status writes, the same cause.
    await kube(['-n', s.ns, 'patch', 'application', name, '--type=merge', '-p', JSON.stringify({ spec: { env: [{ name: 'ATTEMPT', value: '2' }] } })]);
    await waitForObject(`${name} says its new ReplicaSet cannot start either`, () => getApp(s.ns, name), (a) => {
      const msg = String(condition(a, 'Degraded')?.message ?? '');
      return a?.status?.observedGeneration === a?.metadata.generation && degraded(a) && cause.test(msg) && msg !== failed!.status.message;
    }, 30_000);
    await sleep(2_000);
    const events = await warnings(s.ns, name);
    assert.deepEqual(events.map((e) => e.reason), [reason], `one Warning Event for one cause, got ${JSON.stringify(events.map((e) => `${e.reason}: ${e.note}`))}`);
    assert.match(events[0]!.note, cause);
  });

  it('a stable version whose pods lack their config: Degraded within seconds, naming the container and the missing Secret', async (t) => {
    const name = 'noconfig';
    const { image, reason, words } = problems[1];
    await applyAsUser(appManifest(s.ns, name, { image, replicas: 1 }));
    const shown = await podShows(s.ns, name, reason);
    const app = await waitForObject(`${name} Degraded by ${reason}`, () => getApp(s.ns, name), (a) => condition(a, 'Degraded')?.reason === reason, 10_000);
    t.diagnostic(`Degraded=True ${Date.now() - shown.at} ms after a pod showed ${reason}`);
    assert.equal(condition(app, 'Degraded')!.status, 'True');
    assert.match(condition(app, 'Degraded')!.message, new RegExp(`container app: ${reason}: ${escaped(words)}$`));
    const events = await eventually('its Warning Event', async () => {
      const found = await warnings(s.ns, name);
      return found.length ? found : undefined;
    }, { timeoutMs: 10_000 });
    assert.deepEqual(events.map((e) => e.reason), [reason]);
  });

  it('a pod that fails before its Deployment\'s status counts it (the controller-manager behind, under load): Degraded at once, not at the re-check', async (t) => {
    // The Deployment controller's status writes for this one app held back by a policy: the race a loaded
    // controller-manager runs, frozen. Its pods fail at once (kwok), its status stays as created (no replicas).
    const name = 'unreported';
    const policy = `hold-status-${s.ns}`;
    await kube(['apply', '-f', '-'], JSON.stringify({
      apiVersion: 'v1', kind: 'List', items: [{
        apiVersion: 'admissionregistration.k8s.io/v1', kind: 'ValidatingAdmissionPolicy', metadata: { name: policy },
        spec: {
          failurePolicy: 'Fail',
          matchConstraints: {
            namespaceSelector: { matchLabels: { 'kubernetes.io/metadata.name': s.ns } },
            resourceRules: [{ apiGroups: ['apps'], apiVersions: ['v1'], operations: ['UPDATE'], resources: ['deployments/status'] }],
          },
          matchConditions: [{ name: 'this-app', expression: `object.metadata.name == '${name}'` }],
          validations: [{ expression: 'false', message: 'status held back by the test', reason: 'Forbidden' }],
        },
      }, {
        apiVersion: 'admissionregistration.k8s.io/v1', kind: 'ValidatingAdmissionPolicyBinding', metadata: { name: policy },
        spec: { policyName: policy, validationActions: ['Deny'] },
      }],
    }));
    try {
      // The policy is in force once a status write of a Deployment here is refused (admission loads policies a moment later).
      await eventually('the policy in force', async () => {
        await kube(['-n', s.ns, 'create', 'deployment', name, '--image=nginx:1.25']).catch(() => undefined);
        const refused = await kube(['-n', s.ns, 'patch', 'deployment', name, '--subresource=status', '--type=merge', '-p', '{"status":{"replicas":0}}']).then(() => false, () => true);
        return refused || undefined;
      }, { timeoutMs: 15_000 });
      await kube(['-n', s.ns, 'delete', 'deployment', name, '--wait=true']);
      const { image, reason, words } = problems[0];
      await applyAsUser(appManifest(s.ns, name, { image, replicas: 2 }));
      const shown = await podShows(s.ns, name, reason);
      const unreported = await (await kubeApi()).get<Json>({ apiVersion: 'apps/v1', kind: 'Deployment', namespace: s.ns, name });
      assert.equal(unreported?.status?.replicas ?? 0, 0, 'the Deployment\'s status does not count the failing pods');
      // Before, the pass the pod woke read no pods (the Deployment said there were none), and nothing woke the next
      // one: the problem was said at the timed re-check (10 minutes here; 30 s by default).
      const app = await waitForObject(`${name} Degraded by ${reason}`, () => getApp(s.ns, name), (a) => condition(a, 'Degraded')?.reason === reason, 10_000);
      t.diagnostic(`Degraded=True ${Date.now() - shown.at} ms after a pod showed ${reason}`);
      assert.equal(condition(app, 'Degraded')!.status, 'True');
      assert.equal(app!.status.phase, 'Pending');
      assert.match(condition(app, 'Degraded')!.message, new RegExp(`^0/2 replicas available; pod ${name}-[a-z0-9]+-[a-z0-9]+: container app: ${reason}: ${escaped(words)}$`));
    } finally {
      await kube(['delete', 'validatingadmissionpolicybindings,validatingadmissionpolicies', policy, '--ignore-not-found']);
    }
  });
});
