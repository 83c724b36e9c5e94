// RBAC, proven both ways against the real API server (RBAC on): the operator runs the whole reconcile flow as a
// ServiceAccount bound to deploy/'s roles; and for every (resource, verb) those roles grant, a copy of them without
// just that permission makes a step of the flow fail, the step `needs` below names. A permission nothing needs would
// let its variant pass, and a permission without an entry in `needs` fails the test: the table is the role's
// justification, kept true by running it.
import { KubeConfig } from '@kubernetes/client-node';
import { Client } from '@temporalio/client';
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { after, before, describe, it } from 'node:test';
import { appManifest, closeTemporal, getApp, getDeployment, getObject, kubeApi, temporalClient, type Json, type KubeObject } from '../../testkit/apps.ts';
import { gatewayParentRef } from '../../testkit/dataplane.ts';
import { startOperator, type OperatorProcess } from '../../testkit/operator.ts';
import { createRbac, rbacPath, readRules, serviceAccountKubeconfig, type Rule } from '../../testkit/rbac.ts';
import { eventually } from '../../lib/poll.ts';
import { checkImages, testImages } from '../../stack/stack.ts';
import { deleteJobCheck, observeJobCheck, startJobCheck } from '../../activities/checks.ts';
import { sendNotification } from '../../activities/notify.ts';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { Kube } from '../../kube/client.ts';
import { childKinds, kinds, type ChildKind as ChildKindEntry } from '../../render/children.ts';

const clusterRules = readRules('clusterrole.yaml');
const leaderRules = readRules('leader-election-role.yaml');

// Every kind of child, from the table the operator itself uses (render/children.ts).
const children = childKinds;
type ChildKind = string;
const groupOf = (apiVersion: string) => (apiVersion.includes('/') ? apiVersion.slice(0, apiVersion.indexOf('/')) : 'core');

/** The reconcile flow, in order. */
const stepNames = [
  'ready', 'leader', 'apps Running', 'event', 'pod reason', 'prune', 'delete',
  ...children.filter((c) => c.watched).map((c) => `drift ${c.kind}`),
  'image', 'canary', 'promote', 'mirror', 'release', 'job check', 'notify', 'finalize', 'namespace deleted', 'split',
] as const;
type Step = (typeof stepNames)[number];

/** What a step builds on; a variant runs only the steps its expected failure needs, to keep the file fast. */
const prerequisites = (s: Step): Step[] => {
  if (s === 'ready' || s === 'split') return [];
  if (s === 'leader') return ['ready'];
  if (s === 'namespace deleted') return ['ready', 'leader'];
  if (s === 'apps Running' || s === 'pod reason') return ['ready', 'leader'];
  if (s === 'promote' || s === 'finalize') return ['ready', 'leader', 'apps Running', 'canary'];
  if (s === 'mirror') return ['ready', 'leader', 'apps Running'];
  if (s === 'release') return ['ready', 'leader', 'apps Running', 'canary', 'promote'];
  return ['ready', 'leader', 'apps Running'];
};

/**
 * Why each permission is granted: the steps of which one must be the first to fail without it. 'ready' is also
 * accepted for an informer's list and watch, since a watcher may rightly report an informer it cannot run as not ready.
 */
const informer = (kind: ChildKind): Step[] => ['ready', `drift ${kind}`];
// get: status is read from the Deployment and the Service, unless the copy the watch delivered is current (so a
// pass on the way to Running may read neither): the canary's gate reads its Deployment, the Gateway API router its
// canary Service; the others are read back before a child the spec no longer wants is pruned; a kind the table
// says is never read gets no get.
// create: server-side apply of an object that does not exist yet is authorized as create too, not only patch.
// delete: finalizing deletes what the last apply recorded ('delete': plain's Deployment and Service), or every kind
// after a rollout ('finalize': full, deleted mid-rollout).
const statusReads: Partial<Record<string, Step[]>> = { [kinds.deployment.kind]: ['apps Running', 'canary'], [kinds.service.kind]: ['apps Running', 'mirror'] };
const child = (k: ChildKindEntry) => ({
  ...(k.read ? { get: statusReads[k.kind] ?? ['prune'] as Step[] } : {}),
  ...(k.watched ? { list: informer(k.kind), watch: informer(k.kind) } : {}),
  create: ['apps Running'] as Step[], patch: ['apps Running'] as Step[], delete: ['delete', 'finalize'] as Step[],
});
const needs: Record<string, Partial<Record<string, Step[]>>> = {
  // Read by a reconcile pass and by the rollout's activities unless the copy the watch delivered is current, which in
  // a process that runs the watcher it nearly always is: a worker of its own ('split') has no watch and reads every
  // time. Watched by the watcher, patched to add and release the finalizer.
  'myapp.example.com/applications': { get: ['apps Running', 'canary', 'split'], list: ['ready', 'apps Running'], watch: ['ready', 'apps Running'], patch: ['apps Running'] },
  'myapp.example.com/applications/status': { patch: ['apps Running'] },
  // A Release is read and given its finalizer (get, patch) and writes its status; the watcher lists and watches them.
  'myapp.example.com/releases': { get: ['release'], list: ['ready', 'release'], watch: ['ready', 'release'], patch: ['release'] },
  'myapp.example.com/releases/status': { patch: ['release'] },
  ...Object.fromEntries(children.map((k) => [`${groupOf(k.apiVersion)}/${k.plural}`, child(k)])),
  // The HTTPRoute is read back by the rollout's routing through the Gateway API (the prune step, which deletes a kind
  // earlier in the table first, cannot tell).
  'gateway.networking.k8s.io/httproutes': { ...child(kinds.httpRoute), get: ['mirror'] },
  // Traefik's mirroring service exists only while a rollout on Traefik mirrors: made, read back and removed then. A
  // finalizer deletes one only when it exists (it reads first: the name may be another's), so the mirror proves delete.
  'traefik.io/traefikservices': { get: ['prune', 'mirror'], create: ['mirror'], patch: ['mirror'], delete: ['mirror'] },
  // Listed by the watcher (the stable pods) and by the canary's gate; watched to say at once why a pod cannot start.
  'core/pods': { list: ['ready', 'canary'], watch: ['pod reason'] },
  'events.k8s.io/events': { create: ['event'] },
  // A rollout's Job check: its Job made, read while it runs and removed.
  'batch/jobs': { create: ['job check'], get: ['job check'], delete: ['job check'] },
  // A notification's URL from a Secret (spec.notifications[].urlFrom), read at every send.
  'core/secrets': { get: ['notify'] },
  'coordination.k8s.io/leases': { get: ['leader'], create: ['leader'], update: ['leader'] },
  // The watcher lists and watches namespaces: in one being deleted, it releases the finalizer of an Application with
  // no rollout in flight at once (without them, the operator never hears that the namespace is going and finalizes
  // through the workflow, deleting the children itself; a standby is ready before it lists anything, so the
  // leader's missing list shows in that step too).
  'core/namespaces': { list: ['ready', 'namespace deleted'], watch: ['namespace deleted'] },
};

/** How long a step that should fail is given to succeed anyway; the run with every permission must finish it within this. */
// 'pod reason' gets 20 s: a Deployment's pods to create and fail, yet well before the operator's timed re-check (30 s).
// 'finalize' aborts and compensates full's rollout before its children go.
const proofMs: Partial<Record<Step, number>> = {
  'apps Running': 15_000, 'split': 30_000, 'pod reason': 20_000, 'canary': 45_000, 'mirror': 45_000, 'release': 45_000, 'finalize': 30_000, 'namespace deleted': 45_000,
};
const proofWindow = (s: Step) => proofMs[s] ?? 12_000;
const PASS_MS = 60_000;

interface Permission {
  role: 'cluster' | 'leader';
  group: string;
  resource: string;
  verb: string;
}
const keyOf = (p: Pick<Permission, 'group' | 'resource'>) => `${p.group || 'core'}/${p.resource}`;
const describePermission = (p: Permission) => `${p.verb} ${p.resource}${p.group ? `.${p.group}` : ''}`;

/** Every (resource, verb) the roles grant, and the rules without exactly that one. */
function variantsOf(role: Permission['role'], rules: Rule[]): { missing: Permission; rules: Rule[] }[] {
  return rules.flatMap((rule, i) => rule.apiGroups.flatMap((group) => rule.resources.flatMap((resource) => rule.verbs.map((verb) => ({
    missing: { role, group, resource, verb },
    rules: rules.flatMap((r, j) => {
      if (j !== i) return [r];
      const rest: Rule[] = [];
      if (r.verbs.length > 1) rest.push({ ...r, apiGroups: [group], resources: [resource], verbs: r.verbs.filter((v) => v !== verb) });
      if (r.resources.length > 1) rest.push({ ...r, apiGroups: [group], resources: r.resources.filter((x) => x !== resource) });
      if (r.apiGroups.length > 1) rest.push({ ...r, apiGroups: r.apiGroups.filter((g) => g !== group) });
      return rest;
    }),
  })))));
}

const variants = [...variantsOf('cluster', clusterRules), ...variantsOf('leader', leaderRules)];

interface FlowResult {
  passed: { step: Step; ms: number }[];
  failed?: { step: Step; error: string };
  /** Lines of the operator's log that mention a denied request, to say why a step failed. */
  forbidden: string[];
  /** What the flow's Applications said in their Degraded condition when a step failed. */
  degraded: string[];
  logFile: string;
}

const LEASE = 'application-operator-leader';
/** Whose Application a kind belongs to in the flow: the Gateway API's to `routed`, the rest to `full`. */
const ownerOf = (kind: string) => (kind === 'HTTPRoute' ? 'routed' : 'full');
const routedSpec = (gateway: { name: string; namespace: string }, canary?: Json) => ({
  image: 'nginx:1.25', replicas: 1,
  traffic: { router: 'gatewayAPI', gatewayAPI: { parentRefs: [gateway], implementation: 'traefik' } },
  serviceMesh: { enabled: false, ...(canary ? { canary } : {}) },
});
const fullSpec = (storage: boolean) => ({
  image: 'nginx:1.25', replicas: 1,
  service: { ports: [{ name: 'http', port: 80 }] },
  autoscaling: { enabled: true, minReplicas: 1, maxReplicas: 3, targetCPU: 70 },
  serviceMesh: { enabled: true },
  ...(storage ? { storage: { size: '1Gi' } } : {}),
});

// The admin side talks to the API server in-process: dozens of runs would otherwise spawn hundreds of kubectls.
const admin = () => kubeApi();
const applyAsUser = async (obj: Json) => (await admin()).apply(obj as KubeObject, { fieldManager: 'test-user' });
const appRef = (namespace: string, name: string) => ({ apiVersion: 'myapp.example.com/v1', kind: 'Application', namespace, name });

/**
 * Runs the flow with an operator that authenticates as a ServiceAccount holding exactly these rules. Stops at the
 * first step that fails. Without `expectFailure` every step runs; with it, only those steps and what they build on,
 * and they get only their proof window. Only runs that are about PVCs give the app storage: each bound claim takes a
 * volume from the cluster.
 */
async function runFlow(label: string, cluster: Rule[], leader: Rule[], expectFailure: Step[] = [], storage = true): Promise<FlowResult> {
  const api = await admin();
  const ns = { name: `rbac-${randomBytes(3).toString('hex')}` };
  // A second namespace of the run's, deleted whole by the 'namespace deleted' step.
  const doomed = `${ns.name}-gone`;
  // And a third, watched by a watcher-only and a worker-only process of the run's in the 'split' step.
  const apart = `${ns.name}-split`;
  await api.request('POST', '/api/v1/namespaces', { body: { apiVersion: 'v1', kind: 'Namespace', metadata: { name: ns.name } } });
  const roleName = `rbac-test-${ns.name}`;
  const identity = `${label.replace(/[^a-z0-9]+/gi, '-').toLowerCase()}-${randomBytes(2).toString('hex')}`;
  let op: OperatorProcess | undefined;
  const split: OperatorProcess[] = [];
  const result: FlowResult = { passed: [], forbidden: [], degraded: [], logFile: '' };
  try {
    await createRbac(ns.name, roleName, cluster, leader);
    const saKubeconfig = await serviceAccountKubeconfig(ns.name);
    op = await startOperator({
      namespaces: [ns.name, doomed], kubeconfig: saKubeconfig, waitReady: false,
      // The default re-check of a rolling-out Deployment (30 s): past a step's proof window, so only the pod watch can
      // say in time why a pod cannot start; within PASS_MS, so a run without the Deployment watch still gets its apps Running.
      extraArgs: ['--log-level=info', '--progress-recheck-seconds=30', '--leader-elect', `--lease-namespace=${ns.name}`, `--lease-name=${LEASE}`, '--lease-duration-seconds=4', '--lease-renew-deadline-seconds=3', '--lease-retry-period-seconds=1'],
      extraEnv: { POD_NAME: identity },
    });
    result.logFile = op.logFile;
    const o = op;
    const n = ns.name;
    const { name: gwName, namespace: gwNamespace } = await gatewayParentRef();
    const gateway = { name: gwName, namespace: gwNamespace };
    const flow: Record<Step, (timeoutMs: number) => Promise<unknown>> = {
      'ready': (t) => until('readyz', async () => o.isReady(), t),
      'leader': (t) => until(`Lease held by ${identity} and renewed`, async () => {
        const lease = await getObject('coordination.k8s.io/v1', 'Lease', n, LEASE);
        return lease?.spec?.holderIdentity === identity && lease.spec.renewTime !== lease.spec.acquireTime;
      }, t),
      'apps Running': async (t) => {
        await applyAsUser(appManifest(n, 'full', fullSpec(storage)));
        await applyAsUser(appManifest(n, 'plain', { image: 'nginx:1.25' }));
        await applyAsUser(appManifest(n, 'routed', routedSpec(gateway)));
        await until('full, plain and routed Running with every child', async () => {
          const apps = await Promise.all([getApp(n, 'full'), getApp(n, 'plain'), getApp(n, 'routed')]);
          const running = (a: Json | null) => a?.status?.phase === 'Running' && a.status.observedGeneration === a.metadata.generation;
          if (!apps.every(running)) return false;
          const kinds = children.filter((c) => c.watched && (storage || c.kind !== 'PersistentVolumeClaim'));
          const stable = await getObject('v1', 'Service', n, 'routed-stable');
          return Boolean(stable) && (await Promise.all(kinds.map((c) => getObject(c.apiVersion, c.kind, n, ownerOf(c.kind))))).every(Boolean);
        }, t);
      },
      'event': (t) => until('an Event on the Application', async () => {
        const events = await (await kubeApi()).list<Json>({ apiVersion: 'events.k8s.io/v1', kind: 'Event', namespace: n });
        return events.items.some((e) => e.regarding?.kind === 'Application' && e.regarding?.name === 'full' && /application-operator/.test(e.reportingController ?? ''));
      }, t),
      'pod reason': async (t) => {
        await applyAsUser(appManifest(n, 'stuck', { image: testImages.pullError, replicas: 1 }));
        await until('stuck Degraded by ImagePullBackOff', async () => {
          const degraded = (await getApp(n, 'stuck'))?.status?.conditions?.find((c: Json) => c.type === 'Degraded');
          return degraded?.status === 'True' && degraded.reason === 'ImagePullBackOff';
        }, t);
      },
      'prune': async (t) => {
        const extras = children.filter((c) => ['HorizontalPodAutoscaler', 'VirtualService', 'DestinationRule'].includes(c.kind));
        const present = async () => Promise.all(extras.map(async (c) => (await getObject(c.apiVersion, c.kind, n, 'plain')) !== null));
        await applyAsUser(appManifest(n, 'plain', { image: 'nginx:1.25', autoscaling: { enabled: true, minReplicas: 1, maxReplicas: 2, targetCPU: 80 }, serviceMesh: { enabled: true } }));
        await until('plain gained an HPA and Istio routes', async () => (await present()).every(Boolean), t);
        await applyAsUser(appManifest(n, 'plain', { image: 'nginx:1.25' }));
        await until('plain\'s HPA and Istio routes pruned', async () => !(await present()).some(Boolean), t);
      },
      'delete': async (t) => {
        await api.delete(appRef(n, 'plain'));
        await until('plain deleted (finalizer released) with its children', async () => (await getApp(n, 'plain')) === null && (await getDeployment(n, 'plain')) === null, t);
      },
      ...Object.fromEntries(children.filter((c) => c.watched).map((c) => [`drift ${c.kind}`, async (t: number) => {
        const owner = ownerOf(c.kind);
        const was = await getObject(c.apiVersion, c.kind, n, owner);
        if (!was) throw new Error(`${c.kind} ${owner} is missing before the drift step`);
        const ref = { apiVersion: c.apiVersion, kind: c.kind, namespace: n, name: owner };
        await api.delete(ref);
        // A PVC in use stays Terminating behind kubernetes.io/pvc-protection; let it go so the operator sees it deleted.
        if (c.kind === 'PersistentVolumeClaim') await api.mergePatch(ref, { metadata: { finalizers: null } }).catch(() => null);
        await until(`${c.kind} ${owner} put back`, async () => {
          const now = await getObject(c.apiVersion, c.kind, n, owner);
          return Boolean(now && now.metadata.uid !== was.metadata.uid && !now.metadata.deletionTimestamp);
        }, t);
      }])) as Record<`drift ${string}`, (t: number) => Promise<void>>,
      'image': async (t) => {
        await api.mergePatch(appRef(n, 'full'), { spec: { image: 'nginx:1.27' } });
        await until('image rolled out', async () => (await getDeployment(n, 'full'))?.spec.template.spec.containers[0].image === 'nginx:1.27', t);
      },
      // Traffic reaches the canary only after a health gate has seen its pods ready.
      'canary': async (t) => {
        await applyAsUser(appManifest(n, 'full', {
          ...fullSpec(storage), image: 'nginx:1.27',
          serviceMesh: { enabled: true, canary: { enabled: true, canaryVersion: 'v2', healthGates: { interval: '1s', failureThreshold: 3, initialDelay: '2s' }, steps: [{ setWeight: 50 }, { pause: { duration: '3s' } }] } },
        }));
        await until('50% of traffic on the canary', async () => {
          const routes: Json[] = (await getObject('networking.istio.io/v1', 'VirtualService', n, 'full'))?.spec?.http?.[0]?.route ?? [];
          return routes.some((r) => r.destination?.subset === 'canary' && r.weight === 50);
        }, t);
      },
      'promote': (t) => until('canary promoted and removed', async () => (await getApp(n, 'full'))?.status?.canary?.phase === 'Promoted' && (await getDeployment(n, 'full-canary')) === null, t),
      // On Traefik a mirror is its mirroring service: made while the mirror is set, gone once promoted.
      'mirror': async (t) => {
        await applyAsUser(appManifest(n, 'routed', routedSpec(gateway, {
          enabled: true, canaryVersion: 'v2', healthGates: { interval: '1s', failureThreshold: 3, initialDelay: '2s' }, steps: [{ setMirrorRoute: { percentage: 20 } }, { pause: { duration: '2s' } }],
        })));
        await until('the mirroring service made, then removed with the promotion', async () => {
          const app = await getApp(n, 'routed');
          return app?.status?.canary?.phase === 'Promoted' && (await getObject('traefik.io/v1alpha1', 'TraefikService', n, 'routed-mirror')) === null;
        }, t);
        // The status write and its Event are two requests of one activity, in that order: the Event may follow the
        // Promoted phase by a moment (CI once listed the Events in between).
        await until('a CanaryPromoted Event for routed', async () => (await api.list<Json>({ apiVersion: 'events.k8s.io/v1', kind: 'Event', namespace: n })).items
          .some((e) => e.regarding?.name === 'routed' && e.reason === 'CanaryPromoted'), 10_000);
      },
      'release': async (t) => {
        await applyAsUser({
          apiVersion: 'myapp.example.com/v1', kind: 'Release', metadata: { name: 'rel', namespace: n },
          spec: { steps: [{ setWeight: 50 }, { pause: { duration: '1s' } }], waves: [{ applications: [{ name: 'full', canaryVersion: 'v3' }] }] },
        });
        await until('the release promoted', async () => (await getObject('myapp.example.com/v1', 'Release', n, 'rel'))?.status?.phase === 'Promoted', t);
      },
      // The activities a rollout's Job check runs, as the ServiceAccount: the workflow that calls them is not
      // wired yet, so the step calls them as the worker would.
      'job check': async (t) => {
        const kc = new KubeConfig();
        kc.loadFromFile(saKubeconfig);
        const deps = { kube: new Kube(kc) };
        const check = { name: 'smoke', job: { template: { containers: [{ name: 'smoke', image: checkImages.slow }] }, timeoutSeconds: 60 } };
        const context = { application: 'full', namespace: n, version: 'v2', image: 'nginx:1.27', phase: 'beforeStart' as const };
        const attempt = async <T>(what: string, fn: () => Promise<T>) => eventually(what, fn, { timeoutMs: t, intervalMs: 300 });
        const { jobName } = await attempt('the check\'s Job made', () => startJobCheck(deps, { namespace: n, name: 'full', check, context }));
        await attempt('the check\'s Job read', () => observeJobCheck(deps, { namespace: n, jobName }));
        await attempt('the check\'s Job removed', () => deleteJobCheck(deps, { namespace: n, jobName }));
        await until('the check\'s Job gone', async () => (await getObject('batch/v1', 'Job', n, jobName)) === null, t);
      },
      // The notification activity as the ServiceAccount, its URL in a Secret, its receiver this test on 127.0.0.1.
      'notify': async (t) => {
        const kc = new KubeConfig();
        kc.loadFromFile(saKubeconfig);
        const got: string[] = [];
        const server = createServer((req, res) => {
          got.push(String(req.headers['idempotency-key']));
          req.resume();
          res.writeHead(204).end();
        });
        await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
        try {
          const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/hook`;
          await applyAsUser({ apiVersion: 'v1', kind: 'Secret', metadata: { name: 'hooks', namespace: n }, stringData: { url } });
          const message = {
            id: `rbac/${n}/1-started`, seq: 1, application: 'full', namespace: n, version: 'v2', image: 'nginx:1.27', event: 'started' as const,
            phase: 'Progressing', message: 'rbac probe', step: 0, weight: 0, at: new Date().toISOString(),
          };
          await eventually('the notification sent', () => sendNotification({ kube: new Kube(kc) }, {
            namespace: n, message, receiver: { name: 'hook', urlFrom: { secretKeyRef: { name: 'hooks', key: 'url' } }, format: 'json' },
          }), { timeoutMs: t, intervalMs: 300 });
          if (!got.includes(message.id)) throw new Error('the receiver got nothing');
        } finally {
          await new Promise<void>((resolve) => server.close(() => resolve()));
        }
      },
      'finalize': async (t) => {
        await api.delete(appRef(n, 'full'));
        await until('full deleted', async () => (await getApp(n, 'full')) === null, t);
      },
      // Deleting a namespace: the operator releases the finalizer and leaves the children to the namespace controller.
      'namespace deleted': async (t) => {
        await api.request('POST', '/api/v1/namespaces', { body: { apiVersion: 'v1', kind: 'Namespace', metadata: { name: doomed } } });
        await applyAsUser(appManifest(doomed, 'gone', { image: 'nginx:1.25' }));
        await until('gone Running', async () => (await getApp(doomed, 'gone'))?.status?.phase === 'Running', t);
        const deleting = Date.now();
        await api.request('DELETE', `/api/v1/namespaces/${doomed}`);
        await until('its Application\'s finalizer released by the watcher', async () => (await o.logs()).split('\n')
          .some((l) => l.includes('"msg":"released the finalizer: the namespace is being deleted') && l.includes(`"namespace":"${doomed}"`)), t);
        const proved = Date.now() - deleting;
        // The namespace controller's own pace (it backs off while content remains; slow on a loaded machine) is not
        // what the permission proves: it gets the passing time, and the step is timed up to the release.
        await until('the namespace gone', async () => (await api.request('GET', `/api/v1/namespaces/${doomed}`, { allowNotFound: true })) === null, PASS_MS);
        return { provedMs: proved };
      },
      // The watcher and the worker as processes of their own (--mode watcher, --mode worker), as the ServiceAccount:
      // without a watch in the worker, nothing it reads is in hand, so its pass reads the Application from the API
      // server. Timed from the apply; the processes' start is not what the permissions decide.
      'split': async (t) => {
        await api.request('POST', '/api/v1/namespaces', { body: { apiVersion: 'v1', kind: 'Namespace', metadata: { name: apart } } });
        const taskQueue = `${o.taskQueue}-split`;
        for (const mode of ['worker', 'watcher'] as const) {
          split.push(await startOperator({ namespaces: [apart], kubeconfig: saKubeconfig, waitReady: false, taskQueue, mode, logName: mode, extraArgs: ['--log-level=info'] }));
        }
        await until('the watcher-only process ready', async () => split[1]!.isReady(), PASS_MS);
        const applied = Date.now();
        await applyAsUser(appManifest(apart, 'apart', { image: 'nginx:1.25' }));
        await until('apart Running, reconciled by the worker-only process', async () => {
          const app = await getApp(apart, 'apart');
          return app?.status?.phase === 'Running' && app.status.observedGeneration === app.metadata.generation;
        }, t);
        return { provedMs: Date.now() - applied };
      },
    };
    const wanted = new Set(expectFailure.length ? expectFailure.flatMap((s) => [...prerequisites(s), s]) : stepNames);
    for (const step of stepNames.filter((s) => wanted.has(s))) {
      const started = Date.now();
      try {
        const run = flow[step];
        if (!run) throw new Error(`the flow has no step ${step}`);
        const out = await run(expectFailure.includes(step) ? proofWindow(step) : PASS_MS);
        // A step may time only the part its permissions decide (see 'namespace deleted').
        const provedMs = (out as { provedMs?: number } | undefined)?.provedMs;
        result.passed.push({ step, ms: provedMs ?? Date.now() - started });
      } catch (err) {
        result.failed = { step, error: err instanceof Error ? err.message : String(err) };
        const apps = await Promise.all(['full', 'plain', 'routed'].map((a) => getApp(n, a).catch(() => null)));
        result.degraded = apps.map((a) => a?.status?.conditions?.find((c: Json) => c.type === 'Degraded' && c.status === 'True')?.message).filter((m): m is string => !!m);
        break;
      }
    }
    result.forbidden = (await Promise.all([o, ...split].map((p) => p.logs()))).join('\n').split('\n').filter((l) => /forbidden/i.test(l)).map((l) => {
      try {
        const j = JSON.parse(l) as Json;
        return `${j.msg ?? ''}: ${String(j.err ?? j.error?.message ?? JSON.stringify(j.error ?? '')).slice(0, 240)}`;
      } catch {
        return l.slice(0, 240);
      }
    }).filter((l, i, all) => all.indexOf(l) === i).slice(0, 4);
    return result;
  } finally {
    for (const p of [op, ...split]) await p?.stop('SIGKILL');
    for (const p of [op, split[0]]) if (p) await terminateWorkflows(p.taskQueue);
    // Nothing will release the finalizers now; without this the namespace could never go away.
    for (const app of ['full', 'plain', 'stuck', 'routed']) await api.mergePatch(appRef(ns.name, app), { metadata: { finalizers: null } }).catch(() => null);
    await api.mergePatch(appRef(doomed, 'gone'), { metadata: { finalizers: null } }).catch(() => null);
    await api.mergePatch(appRef(apart, 'apart'), { metadata: { finalizers: null } }).catch(() => null);
    for (const gone of [doomed, apart]) await api.request('DELETE', `/api/v1/namespaces/${gone}`, { allowNotFound: true }).catch(() => null);
    for (const plural of ['clusterrolebindings', 'clusterroles']) await api.request('DELETE', rbacPath(plural, roleName), { allowNotFound: true }).catch(() => null);
    await api.request('DELETE', `/api/v1/namespaces/${ns.name}`, { allowNotFound: true }).catch(() => null);
  }
}

function until(what: string, ok: () => Promise<boolean>, timeoutMs: number): Promise<true> {
  return eventually(what, async () => ((await ok()) ? true : undefined), { timeoutMs, intervalMs: 300 });
}

async function terminateWorkflows(taskQueue: string): Promise<void> {
  const client: Client = await temporalClient();
  for await (const wf of client.workflow.list({ query: `TaskQueue = '${taskQueue}' AND ExecutionStatus = 'Running'` })) {
    await client.workflow.getHandle(wf.workflowId, wf.runId).terminate('rbac test finished').catch(() => undefined);
  }
}

/** Runs fns with at most `limit` at once. */
function pool<T>(limit: number, fns: (() => Promise<T>)[]): Promise<T>[] {
  let active = 0;
  const queue: (() => void)[] = [];
  return fns.map((fn) => new Promise<T>((resolve, reject) => {
    const run = () => {
      active++;
      fn().then(resolve, reject).finally(() => {
        active--;
        queue.shift()?.();
      });
    };
    if (active < limit) run();
    else queue.push(run);
  }));
}

const show = (r: FlowResult) => [
  `passed: ${r.passed.map((p) => `${p.step} (${(p.ms / 1000).toFixed(1)} s)`).join(', ') || 'nothing'}`,
  r.failed ? `failed: ${r.failed.step}: ${r.failed.error}` : 'failed: nothing',
  `denied requests in the operator log (${r.logFile}): ${r.forbidden.join(' | ') || 'none'}`,
].join('\n');

/** The flow without one permission of a variant. */
const runVariant = (v: (typeof variants)[number]) => runFlow(
  `no-${v.missing.verb}-${v.missing.resource}`,
  v.missing.role === 'cluster' ? v.rules : clusterRules,
  v.missing.role === 'leader' ? v.rules : leaderRules,
  needs[keyOf(v.missing)]?.[v.missing.verb] ?? [],
  v.missing.resource === 'persistentvolumeclaims',
);

/**
 * Whether a failed flow shows a permission missing rather than a slow or broken stack: the API server denied the
 * operator something, or (for best-effort writes such as Events, whose denial is swallowed) the same run reconciled
 * Applications fine up to the failing step.
 */
const proves = (r: FlowResult) => r.forbidden.length > 0 || r.passed.some((p) => p.step === 'apps Running');

describe('RBAC of deploy/ (least privilege, proven)', () => {
  let baseline: Promise<FlowResult>;
  let results: Promise<FlowResult>[];

  before(() => {
    // The full role first, then one variant per permission; RBAC_TEST_CONCURRENCY trades speed for load.
    const runs = pool(Number(process.env['RBAC_TEST_CONCURRENCY'] ?? 6), [
      () => runFlow('full', clusterRules, leaderRules),
      ...variants.map((v) => () => runVariant(v)),
    ]);
    // Every run settles on its own; a rejection is reported by the test that awaits it.
    for (const r of runs) r.catch(() => undefined);
    baseline = runs[0]!;
    results = runs.slice(1);
  });
  after(async () => closeTemporal());

  it('grants no wildcard and nothing outside the operator\'s API groups', () => {
    const groups = new Set(['myapp.example.com', 'apps', '', 'autoscaling', 'batch', 'networking.istio.io', 'gateway.networking.k8s.io', 'traefik.io', 'events.k8s.io', 'coordination.k8s.io']);
    for (const r of [...clusterRules, ...leaderRules]) {
      for (const field of [r.apiGroups, r.resources, r.verbs]) assert.ok(!field.includes('*'), `wildcard in ${JSON.stringify(r)}`);
      for (const g of r.apiGroups) assert.ok(groups.has(g), `unexpected API group ${g}`);
    }
    for (const v of variants) assert.ok(needs[keyOf(v.missing)]?.[v.missing.verb], `no probe for ${describePermission(v.missing)}: add to \`needs\` the step that fails without it, or drop it from the role`);
  });

  it('the operator runs the whole flow as the ServiceAccount, with no request denied', async (t) => {
    const r = await baseline;
    t.diagnostic(show(r));
    assert.equal(r.failed, undefined, show(r));
    assert.deepEqual(r.forbidden, [], show(r));
    // A variant's failure only proves something if the full role gets through the same step within its window.
    const probed = new Set(Object.values(needs).flatMap((byVerb) => Object.values(byVerb).flat()));
    for (const p of r.passed.filter((x) => probed.has(x.step))) {
      assert.ok(p.ms < proofWindow(p.step), `${p.step} took ${p.ms} ms with every permission, longer than its ${proofWindow(p.step)} ms proof window\n${show(r)}`);
    }
  });

  for (const [i, v] of variants.entries()) {
    const expected = needs[keyOf(v.missing)]?.[v.missing.verb] ?? [];
    it(`without ${describePermission(v.missing)}, ${expected.join(' or ') || '(no probe)'} fails`, async (t) => {
      let r = await results[i]!;
      if (r.failed && !proves(r)) {
        // Inconclusive, not wrong: on a loaded machine, with the other flows beside it, the step's window ran out
        // before the operator asked for anything. Once more, with fewer flows running by now.
        t.diagnostic(`${r.failed.step} failed with nothing denied and nothing reconciled: run again`);
        r = await runVariant(v);
      }
      t.diagnostic(`${r.failed ? `${r.failed.step} failed` : 'nothing failed'}; denied: ${r.forbidden[0] ?? 'nothing logged'}`);
      assert.ok(r.failed, `the flow passed without ${describePermission(v.missing)}: the operator does not need it\n${show(r)}`);
      assert.ok(expected.length > 0, `without ${describePermission(v.missing)} ${r.failed.step} failed, but \`needs\` names no step for it\n${show(r)}`);
      assert.ok(expected.includes(r.failed.step), `expected ${expected.join(' or ')} to fail first\n${show(r)}`);
      // Not a slow or broken stack (proves).
      assert.ok(proves(r), `no request was denied and nothing was reconciled: the failure proves nothing\n${show(r)}`);
      // A child the role may not apply is said in the Application's status, not only retried in the operator's log.
      const appliedChild = ['create', 'patch'].includes(v.missing.verb) && children.some((k) => `${groupOf(k.apiVersion)}/${k.plural}` === keyOf(v.missing));
      if (appliedChild && r.failed.step === 'apps Running') {
        const words = `cannot ${v.missing.verb} resource "${v.missing.resource}"`;
        assert.ok(r.degraded.some((m) => m.includes(words) && m.includes('the operator\'s role does not grant this')), `no Application says "${words}" in its Degraded condition: ${JSON.stringify(r.degraded)}\n${show(r)}`);
      }
      // The job check's activities run in the test, not the operator: their own error says what was denied.
      if (r.failed.step === 'job check' || r.failed.step === 'notify') assert.match(r.failed.error, /403 Forbidden/, show(r));
    });
  }
});
