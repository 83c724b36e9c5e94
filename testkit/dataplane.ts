// The data plane as tests use it: the Gateway to attach HTTPRoutes to, requests through the proxy counted by the
// version that answered, the pod server's per-pod counts, and small manifests for an app's versions.
import { eventually } from '../lib/poll.ts';
import { sendRequests, summarize, type SendOptions, type TrafficSummary, type TrafficTarget } from '../lib/traffic.ts';
import type { DataPlaneInfo } from '../stack/dataplane.ts';
import type { PodServerReport } from '../stack/pod-server.ts';
import { applyAsUser, kubeJson, type Json } from './apps.ts';
import { testEnv } from './env.ts';

/** The run's data plane; fails saying how to get one when the stack has none. */
export async function dataPlane(): Promise<DataPlaneInfo> {
  const dp = (await testEnv()).stack?.dataPlane;
  if (!dp) throw new Error('this test needs the data plane: run it with `npm test` (its stack has one), or reuse a stack from `npm run stack -- up --data-plane` (STACK_STATE_DIR)');
  return dp;
}

/** A parentRef to the stack's Gateway, for an HTTPRoute's spec.parentRefs. */
export async function gatewayParentRef(): Promise<{ group: string; kind: string; name: string; namespace: string }> {
  const dp = await dataPlane();
  return { group: 'gateway.networking.k8s.io', kind: 'Gateway', name: dp.gateway.name, namespace: dp.gateway.namespace };
}

/** Sends requests through the proxy to `host` and returns the answers' summary. */
export async function sendThroughGateway(target: Omit<TrafficTarget, 'url'>, opts: SendOptions): Promise<TrafficSummary & { answers: Awaited<ReturnType<typeof sendRequests>> }> {
  const dp = await dataPlane();
  const answers = await sendRequests({ ...target, url: dp.gatewayUrl }, opts);
  return { ...summarize(answers), answers };
}

/** What the pod server answered per pod of a namespace (pods deleted since are included). */
export async function podRequests(namespace: string): Promise<PodServerReport> {
  const dp = await dataPlane();
  const res = await fetch(`${dp.podServerUrl}/pods?namespace=${encodeURIComponent(namespace)}`);
  if (!res.ok) throw new Error(`pod server: HTTP ${res.status}`);
  return await res.json() as PodServerReport;
}

/** Requests the pod server answered per version label in a namespace. */
export async function requestsByVersion(namespace: string): Promise<Record<string, number>> {
  const out: Record<string, number> = {};
  for (const p of (await podRequests(namespace)).pods) out[p.version] = (out[p.version] ?? 0) + p.requests;
  return out;
}

/**
 * Requests per version once the counts have stopped changing for `quietMs`: copies a proxy mirrors arrive after the
 * answers to the client, so a count read right after a burst may still grow.
 */
export async function settledRequestsByVersion(namespace: string, quietMs = 750): Promise<Record<string, number>> {
  let last = JSON.stringify(await requestsByVersion(namespace));
  let since = Date.now();
  return eventually(`request counts in ${namespace} settled`, async () => {
    const now = JSON.stringify(await requestsByVersion(namespace));
    if (now !== last) {
      last = now;
      since = Date.now();
    }
    return Date.now() - since >= quietMs ? JSON.parse(now) as Record<string, number> : undefined;
  }, { timeoutMs: 30_000, intervalMs: 100 });
}

/**
 * Waits until requests to `host` are answered by pods of exactly the versions given (each request of a probe round):
 * the proxy learns routes and endpoints a moment after they are written.
 */
export async function waitForVersions(target: Omit<TrafficTarget, 'url'>, versions: string[], timeoutMs = 60_000): Promise<void> {
  const want = [...versions].sort().join(',');
  await eventually(`requests to ${target.host ?? '(any host)'}${target.path ?? '/'} answered by ${want}`, async () => {
    const s = await sendThroughGateway(target, { count: 20, concurrency: 4 });
    const got = Object.keys(s.byVersion).sort().join(',');
    if (got !== want) throw new Error(`answered by ${got} (statuses ${JSON.stringify(s.byStatus)})`);
    return true;
  }, { timeoutMs, intervalMs: 500 });
}

/** A Deployment `<app>-<version>` of pods labelled with the app and version, serving HTTP on 8080 with the given image. */
export function versionDeployment(namespace: string, app: string, version: string, image: string, replicas = 1): Json {
  const labels = { 'app.kubernetes.io/name': app, version };
  return {
    apiVersion: 'apps/v1', kind: 'Deployment', metadata: { name: `${app}-${version}`, namespace, labels },
    spec: {
      replicas, selector: { matchLabels: labels },
      template: { metadata: { labels }, spec: { containers: [{ name: 'app', image, ports: [{ name: 'http', containerPort: 8080 }] }] } },
    },
  };
}

/** A Service `<app>-<version>` on port 80 in front of that version's pods. */
export function versionService(namespace: string, app: string, version: string): Json {
  return {
    apiVersion: 'v1', kind: 'Service', metadata: { name: `${app}-${version}`, namespace },
    spec: { selector: { 'app.kubernetes.io/name': app, version }, ports: [{ name: 'http', port: 80, targetPort: 'http' }] },
  };
}

/** Applies a version's Deployment and Service and waits until its pods are available and the pod server knows them. */
export async function deployVersion(namespace: string, app: string, version: string, image: string, replicas = 1): Promise<void> {
  await applyAsUser(versionDeployment(namespace, app, version, image, replicas));
  await applyAsUser(versionService(namespace, app, version));
  await eventually(`${namespace}/${app}-${version} available`, async () => {
    const d = await kubeJson(['-n', namespace, 'get', 'deployment', `${app}-${version}`]);
    return d.status?.availableReplicas === replicas ? true : undefined;
  }, { timeoutMs: 90_000 });
  await eventually(`the pod server serves ${namespace}/${app}-${version}`, async () => {
    const known = (await podRequests(namespace)).pods.filter((p) => p.present && p.app === app && p.version === version);
    return known.length === replicas ? true : undefined;
  });
}
