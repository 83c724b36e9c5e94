// A reconcile pass run on its own (no operator, no watcher) against the real API server, for what only a race
// between controllers produces: a pass woken by the namespace controller deleting children, into a namespace that
// refuses every create.
import { MockActivityEnvironment } from '@temporalio/testing';
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { reconcileApplication } from '../../activities/reconcile.ts';
import type { ReconcileResult } from '../../activities/types.ts';
import { API_VERSION, FINALIZER, KIND } from '../../api/constants.ts';
import { KubeError, type KubeObject } from '../../kube/client.ts';
import { RecentObjects } from '../../kube/recent.ts';
import { eventually } from '../../lib/poll.ts';
import { appManifest, getApp, kube, kubeApi, testNamespace } from '../../testkit/apps.ts';

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
      const recent = new RecentObjects();
      const held = { ...seen, metadata: { ...seen!.metadata, finalizers: [FINALIZER] } } as KubeObject;
      recent.remember(held);
      recent.follow((ref) => (ref.kind === KIND && ref.apiVersion === API_VERSION && ref.name === 'late' ? held.metadata.resourceVersion : undefined));
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
