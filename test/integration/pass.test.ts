// A reconcile pass, and a rollout's status write, run on their own (no operator, no watcher) against the real API
// server, for what only a race between controllers or writers produces: a pass woken by the namespace controller
// deleting children, into a namespace that refuses every create; status writes whose compare-and-swap loses to
// another write made after the copy in hand; a gate check whose watch has not yet delivered the canary's readiness.
import { MockActivityEnvironment } from '@temporalio/testing';
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { observeCanary, writeCanaryStatus } from '../../activities/canary.ts';
import { reconcileApplication } from '../../activities/reconcile.ts';
import type { CanaryObservation, ReconcileResult } from '../../activities/types.ts';
import { API_VERSION, FINALIZER, KIND, LABEL_NAME, LABEL_VERSION, RolloutPhase } from '../../api/constants.ts';
import { KubeError, type KubeObject } from '../../kube/client.ts';
import { RecentObjects } from '../../kube/recent.ts';
import { eventually } from '../../lib/poll.ts';
import { noCanaryRoute } from '../../routing/route.ts';
import { appManifest, getApp, kube, kubeApi, kubeJson, testNamespace } from '../../testkit/apps.ts';

/** What a process whose watch last showed the object (an Application, a Deployment) as `held` has in hand. */
function holding(held: KubeObject): RecentObjects {
  const recent = new RecentObjects();
  recent.remember(held);
  recent.follow((ref) => (ref.kind === held.kind && ref.apiVersion === held.apiVersion && ref.name === held.metadata.name ? held.metadata.resourceVersion : undefined));
  return recent;
}

/** An activity's dependencies, reading through `recent`. */
const depsWith = async (recent: RecentObjects) => ({ kube: await kubeApi(), recent, temporalNamespace: 'default' });

describe('a reconcile pass on its own', () => {
  it('into a namespace being deleted: ends with the Application gone, instead of failing the apply again and again', async () => {
    const ns = await testNamespace('pass');
    try {
      // A ConfigMap with a finalizer of the test's keeps the namespace Terminating after everything else went.
      await kube(['-n', ns.name, 'create', 'configmap', 'hold']);
      await kube(['-n', ns.name, 'patch', 'configmap', 'hold', '--type=merge', '-p', JSON.stringify({ metadata: { finalizers: ['test.example.com/hold'] } })]);
      await kube(['apply', '--server-side', '--field-manager=test-user', '-f', '-'], JSON.stringify(appManifest(ns.name, 'late', { image: 'nginx:1.25' })));
      const seen = await getApp(ns.name, 'late');
      await kube(['delete', 'namespace', ns.name, '--wait=false']);
      await eventually('the Application gone with its namespace', async () => ((await getApp(ns.name, 'late')) === null ? true : undefined));

      // The pass holds the Application as a watch last showed it (ours, not being deleted): it applies, and is refused.
      const recent = holding({ ...seen, metadata: { ...seen!.metadata, finalizers: [FINALIZER] } } as KubeObject);
      const kubeClient = await kubeApi();
      const refused = await kubeClient.apply({ apiVersion: 'v1', kind: 'ConfigMap', metadata: { name: 'probe', namespace: ns.name } }, { fieldManager: 'test-user' })
        .then(() => undefined, (err: unknown) => err);
      assert.ok(refused instanceof KubeError && refused.namespaceTerminating, `the namespace refuses creates: ${String(refused)}`);

      const result: ReconcileResult = await new MockActivityEnvironment().run(reconcileApplication, { kube: kubeClient, recent, temporalNamespace: 'default' },
        { namespace: ns.name, name: 'late', workflowId: `application/${ns.name}/late`, apply: true });
      assert.equal(result.outcome, 'gone');
      assert.equal(recent.current({ apiVersion: API_VERSION, kind: KIND, namespace: ns.name, name: 'late' }), undefined, 'the stale copy dropped');
    } finally {
      await kube(['-n', ns.name, 'patch', 'configmap', 'hold', '--type=merge', '-p', JSON.stringify({ metadata: { finalizers: null } })]).catch(() => undefined);
    }
  });
});

describe('status writes that lose their compare-and-swap', () => {
  /**
   * An Application with our finalizer, and a RecentObjects holding it as a watch showed it then, after which `change`
   * makes the API server's copy newer: the first write over the copy in hand conflicts (409).
   */
  async function heldThen(ns: string, name: string, change: string[]): Promise<RecentObjects> {
    await kube(['apply', '--server-side', '--field-manager=test-user', '-f', '-'], JSON.stringify(appManifest(ns, name, { image: 'nginx:1.25' })));
    await kube(['-n', ns, 'patch', 'application', name, '--type=merge', '-p', JSON.stringify({ metadata: { finalizers: [FINALIZER] } })]);
    const held = (await getApp(ns, name)) as KubeObject;
    await kube(['-n', ns, ...change]);
    return holding(held);
  }
  const pass = async (recent: RecentObjects, ns: string, name: string, acceptsSuperseded = true): Promise<ReconcileResult> => new MockActivityEnvironment().run(reconcileApplication,
    await depsWith(recent), { namespace: ns, name, workflowId: `application/${ns}/${name}`, apply: true, acceptsSuperseded });

  it('a pass\'s status write that crosses another write (a label, the rollout\'s status) is derived again and written, not failed', async () => {
    const ns = await testNamespace('pass-crossed');
    try {
      const recent = await heldThen(ns.name, 'crossed', ['label', 'application', 'crossed', 'team=checkout']);
      const result = await pass(recent, ns.name, 'crossed');
      assert.equal(result.statusWritten, true);
      const app = await getApp(ns.name, 'crossed');
      assert.equal(app?.status?.observedGeneration, app?.metadata.generation, 'status written for the spec the pass applied');
      assert.equal(app?.metadata.labels?.['team'], 'checkout', 'the other write stands');
    } finally {
      await ns.cleanup();
    }
  });

  // A promote changes the spec while the Application's own pass runs: that pass used to fail with the 409 (an
  // "Activity failed" warning per promote, and a retry after a backoff); it now ends superseded, and its workflow
  // passes again (test/workflows/application.test.ts).
  it('a pass\'s status write that crosses a spec change writes nothing and ends superseded, not failed', async () => {
    const ns = await testNamespace('pass-respec');
    try {
      const recent = await heldThen(ns.name, 'respec', ['patch', 'application', 'respec', '--type=merge', '-p', JSON.stringify({ spec: { image: 'nginx:1.26' } })]);
      const result = await pass(recent, ns.name, 'respec');
      assert.equal(result.outcome, 'superseded');
      assert.equal(result.statusWritten, undefined);
      assert.equal((await getApp(ns.name, 'respec'))?.status?.observedGeneration, undefined, 'no status for a spec the pass did not apply');
      // A workflow of a release before (no acceptsSuperseded) would take the outcome for a deletion: it gets the 409.
      const older = await heldThen(ns.name, 'respec2', ['patch', 'application', 'respec2', '--type=merge', '-p', JSON.stringify({ spec: { image: 'nginx:1.26' } })]);
      const failed = await pass(older, ns.name, 'respec2', false).then(() => undefined, (err: unknown) => err);
      assert.ok(failed instanceof KubeError && failed.status === 409, `the conflict, as before: ${String(failed)}`);
      assert.equal((await getApp(ns.name, 'respec2'))?.status?.observedGeneration, undefined);
    } finally {
      await ns.cleanup();
    }
  });

  it('a rollout\'s status write that crosses the pass\'s is written again over the Application as it is now', async () => {
    const ns = await testNamespace('canary-crossed');
    try {
      const recent = await heldThen(ns.name, 'rolling', ['label', 'application', 'rolling', 'team=checkout']);
      const status = { phase: RolloutPhase.Progressing, step: 1, totalSteps: 2, weight: 20, message: 'step 1/2: 20% to the canary', version: 'v2', image: 'nginx:1.26', startedAt: new Date().toISOString() };
      await new MockActivityEnvironment().run(writeCanaryStatus, await depsWith(recent), { namespace: ns.name, name: 'rolling', status });
      const app = await getApp(ns.name, 'rolling');
      assert.equal(app?.status?.canary?.phase, RolloutPhase.Progressing);
      assert.equal(app?.status?.canary?.weight, 20);
      assert.ok(app?.status?.conditions?.some((c: { type: string }) => c.type === 'CanaryProgressing'), JSON.stringify(app?.status?.conditions));
    } finally {
      await ns.cleanup();
    }
  });
});

describe('a gate check on its own', () => {
  // The copy in hand is as new as the watch's last delivery, and a watch lags behind a loaded API server: a gate check
  // that took the copy's "0 ready" for the truth counted failures against a canary that was ready (release.test's
  // canary rolled back by its health gate in a loaded CI run).
  it('whose copy in hand says the canary is not ready yet asks the API server before it judges', async () => {
    const ns = await testNamespace('gate-late-watch');
    try {
      const labels = { [LABEL_NAME]: 'late', [LABEL_VERSION]: 'v2' };
      const canary = {
        apiVersion: 'apps/v1', kind: 'Deployment', metadata: { name: 'late-canary', namespace: ns.name, labels },
        spec: { replicas: 1, selector: { matchLabels: labels }, template: { metadata: { labels }, spec: { containers: [{ name: 'app', image: 'registry.example/late:2' }] } } },
      };
      const created = JSON.parse(await kube(['create', '-o', 'json', '-f', '-'], JSON.stringify(canary))) as KubeObject & { status?: { readyReplicas?: number } };
      assert.equal(created.status?.readyReplicas, undefined, 'held as first created: no replica ready');
      await eventually('the canary ready', async () => ((await kubeJson(['-n', ns.name, 'get', 'deployment', 'late-canary'])).status?.readyReplicas === 1 ? true : undefined));

      const recent = holding(created);
      const seen: CanaryObservation = await new MockActivityEnvironment().run(observeCanary, await depsWith(recent),
        { namespace: ns.name, name: 'late', version: 'v2', route: noCanaryRoute });
      assert.equal(seen.health.readyReplicas, 1, `judged on the API server's copy, not the late watch's: ${JSON.stringify(seen.health)}`);
      assert.equal(seen.health.exists, true);
    } finally {
      await ns.cleanup();
    }
  });
});
