// An operator whose role lacks a verb a child needs, against the real API server (RBAC on): the Application says so
// in its status and an Event, not only in the operator's log; nothing of the spec is left half-applied; and once an
// admin grants the verb, the children are applied with no change to the Application (the pass is retried with the
// activity's backoff, at most a minute apart). The table in rbac.test.ts checks the status words for every verb.
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { appManifest, closeTemporal, getApp, getDeployment, getObject, kubeApi, testNamespace, waitForObject, waitForPhase, type Json, type KubeObject } from '../../testkit/apps.ts';
import { startOperator, type OperatorProcess } from '../../testkit/operator.ts';
import { createRbac, rbacPath, readRules, serviceAccountKubeconfig, type Rule } from '../../testkit/rbac.ts';
import { eventually } from '../../lib/poll.ts';

const full = readRules('clusterrole.yaml');
/** The chart's role without some verbs on HorizontalPodAutoscalers (a role written for an older chart, say). */
const withoutHpa = (...missing: string[]): Rule[] => full.flatMap((r) => {
  if (!r.resources.includes('horizontalpodautoscalers')) return [r];
  const rest = r.resources.filter((x) => x !== 'horizontalpodautoscalers');
  const verbs = r.verbs.filter((v) => !missing.includes(v));
  return [...(rest.length ? [{ ...r, resources: rest }] : []), ...(verbs.length ? [{ ...r, resources: ['horizontalpodautoscalers'], verbs }] : [])];
});

const degraded = (a: Json | null): Json | undefined => a?.status?.conditions?.find((c: Json) => c.type === 'Degraded');
const scaled = (ns: string, name = 'scaled') => appManifest(ns, name, { image: 'nginx:1.25', replicas: 1, autoscaling: { enabled: true, minReplicas: 1, maxReplicas: 3, targetCPU: 70 } });

describe('a role that lacks a verb a child needs, granted later', () => {
  let ns: Awaited<ReturnType<typeof testNamespace>>;
  let op: OperatorProcess;
  const roleName = () => `rbac-grant-${ns.name}`;

  before(async () => {
    ns = await testNamespace('rbacgrant');
    await createRbac(ns.name, roleName(), withoutHpa('create', 'patch'), readRules('leader-election-role.yaml'));
    op = await startOperator({ namespaces: [ns.name], kubeconfig: await serviceAccountKubeconfig(ns.name) });
  });
  after(async () => {
    const api = await kubeApi();
    // Whatever failed, the finalizer must not keep the namespace.
    for (const name of ['scaled', 'shrunk']) await api.mergePatch({ apiVersion: 'myapp.example.com/v1', kind: 'Application', namespace: ns.name, name }, { metadata: { finalizers: null } }).catch(() => null);
    await op?.stop();
    await closeTemporal();
    for (const plural of ['clusterrolebindings', 'clusterroles']) await api.request('DELETE', rbacPath(plural, roleName()), { allowNotFound: true }).catch(() => null);
    await ns?.cleanup();
  });

  const grant = async (rules: Rule[]) => (await kubeApi()).request('PUT', rbacPath('clusterroles', roleName()), {
    body: { apiVersion: 'rbac.authorization.k8s.io/v1', kind: 'ClusterRole', metadata: { name: roleName() }, rules },
  });

  it('says in status which verb is missing, leaves nothing half-applied, and applies the children once the verb is granted', async () => {
    const api = await kubeApi();
    await api.apply(scaled(ns.name) as KubeObject, { fieldManager: 'test-user' });
    // Before, the pass was retried with backoff while status said nothing (or Running, on a later change).
    const app = await waitForObject('the missing verb in status', () => getApp(ns.name, 'scaled'), (a) => degraded(a)?.status === 'True', 20_000);
    assert.equal(app!.status.phase, 'Failed');
    assert.equal(degraded(app)!.reason, 'ApplyFailed');
    assert.match(degraded(app)!.message, /horizontalpodautoscalers\.autoscaling "scaled" is forbidden: User "system:serviceaccount:[a-z0-9-]+:application-operator" cannot (patch|create) resource "horizontalpodautoscalers" in API group "autoscaling" .*: the operator's role does not grant this; the pass is tried again until it does/);
    const events = await eventually('a Warning Event that says so', async () => {
      const list = await api.list<Json>({ apiVersion: 'events.k8s.io/v1', kind: 'Event', namespace: ns.name });
      const found = list.items.filter((e) => e.regarding?.name === 'scaled' && e.type === 'Warning' && /cannot (patch|create) resource "horizontalpodautoscalers"/.test(e.note));
      return found.length ? found : undefined;
    }, { timeoutMs: 10_000 });
    assert.equal(events[0]!.reason, 'ApplyFailed');
    // The first apply took back what it had created before the refusal; the retries since dry-run the rest first.
    await eventually('nothing half-applied', async () => ((await getDeployment(ns.name, 'scaled')) === null && (await getObject('v1', 'Service', ns.name, 'scaled')) === null) || undefined, { timeoutMs: 10_000 });
    const generation = app!.metadata.generation;

    // The admin grants the chart's whole role: no change to the Application, and the next retry of the pass applies.
    await grant(full);
    const running = await waitForPhase(ns.name, 'scaled', 'Running', 90_000);
    assert.equal(running.metadata.generation, generation, 'applied with no change to the Application');
    assert.equal(degraded(running)!.status, 'False');
    assert.ok(await getObject('autoscaling/v2', 'HorizontalPodAutoscaler', ns.name, 'scaled'), 'the HorizontalPodAutoscaler applied');
    assert.ok(await getDeployment(ns.name, 'scaled'));

    // Deleted while the operator runs: the finalizer released, the children gone with it.
    await api.delete({ apiVersion: 'myapp.example.com/v1', kind: 'Application', namespace: ns.name, name: 'scaled' });
    await eventually('the Application deleted', async () => ((await getApp(ns.name, 'scaled')) === null) || undefined, { timeoutMs: 30_000 });
  });

  it('a child the role may not delete, when the spec no longer wants it: said in status, pruned once granted', async () => {
    const api = await kubeApi();
    await grant(withoutHpa('delete'));
    await api.apply(scaled(ns.name, 'shrunk') as KubeObject, { fieldManager: 'test-user' });
    await waitForPhase(ns.name, 'shrunk', 'Running');
    assert.ok(await getObject('autoscaling/v2', 'HorizontalPodAutoscaler', ns.name, 'shrunk'));
    // Autoscaling off: the HorizontalPodAutoscaler is to go, which the role does not allow.
    await api.apply(appManifest(ns.name, 'shrunk', { image: 'nginx:1.25', replicas: 2 }) as KubeObject, { fieldManager: 'test-user' });
    const app = await waitForObject('the missing delete in status', () => getApp(ns.name, 'shrunk'), (a) => degraded(a)?.status === 'True', 20_000);
    assert.match(degraded(app)!.message, /cannot delete resource "horizontalpodautoscalers" .*: the operator's role does not grant this; the pass is tried again until it does/);
    assert.equal((await getDeployment(ns.name, 'shrunk'))!.spec.replicas, 2, 'the rest of the spec applied');
    await grant(full);
    await waitForObject('the HorizontalPodAutoscaler pruned', () => getObject('autoscaling/v2', 'HorizontalPodAutoscaler', ns.name, 'shrunk'), (h) => h === null, 90_000);
    const running = await waitForPhase(ns.name, 'shrunk', 'Running', 30_000);
    assert.equal(degraded(running)!.status, 'False');
    await api.delete({ apiVersion: 'myapp.example.com/v1', kind: 'Application', namespace: ns.name, name: 'shrunk' });
    await eventually('the Application deleted', async () => ((await getApp(ns.name, 'shrunk')) === null) || undefined, { timeoutMs: 30_000 });
  });
});
