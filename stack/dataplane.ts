// The local stack's data plane: real HTTP requests through a real Gateway API proxy (Traefik) to the pods kwok
// pretends to run, answered by the pod server inside the stack's own network namespace. On only when asked
// (`stack up --data-plane`, and always for `npm test`), and then for the life of the state folder. stack/stack.ts
// calls in here at a few points of up() and down(); docs/local-stack.md describes the whole.
import { mkdir, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { stringify } from 'yaml';
import { assertPortFree, freePortsBesides } from '../lib/net.ts';
import { ensurePki } from './pki.ts';
import { podsPerNode, sliceLayout } from './pod-cidr.ts';
import { createPodNetwork, podNetworkNames, podNetworkProblem, removePodNetwork, type PodNetwork } from './pod-network.ts';
import { isOurs, startDetached, stopPid, waitFor, type ServerSpec } from './processes.ts';
import { addScrapeTarget, kubectl, readStack, type StackInfo } from './stack.ts';
import { artifactPaths } from './versions.ts';

/** The Gateway every stack with a data plane has, served by Traefik; HTTPRoutes in any namespace may attach to it. */
export const localGateway = { namespace: 'gateway-system', name: 'local', listener: 'http' } as const;
/** The GatewayClass of Traefik's Kubernetes Gateway provider (the controller name is Traefik's own). */
export const gatewayClass = { name: 'traefik', controllerName: 'traefik.io/gateway-controller' } as const;

/** The data plane's processes, in start order (stop order is the reverse). */
export const dataPlaneServerNames = ['pod-server', 'traefik'] as const;
export type DataPlaneServerName = (typeof dataPlaneServerNames)[number];

/** Ports of the data plane, all on 127.0.0.1. */
export interface DataPlanePorts {
  /** Traefik's HTTP entrypoint, which is also the Gateway's listener port (Traefik matches them by number). */
  gateway: number;
  /** Traefik's /metrics (Prometheus) and /ping. */
  traefikMetrics: number;
  /** The pod server's control endpoint: /healthz and per-pod request counts at /pods. */
  podServer: number;
}

/** The fixed ports of `stack up --data-plane` (tests take free ones). */
export const defaultDataPlanePorts: DataPlanePorts = { gateway: 28080, traefikMetrics: 28082, podServer: 28090 };

/** What stack.json records of the data plane. */
export interface DataPlaneInfo extends PodNetwork {
  nodeIp: string;
  serviceCidr: string;
  ports: DataPlanePorts;
  /** Where to send requests: http://127.0.0.1:<gateway port>. */
  gatewayUrl: string;
  /** The pod server's control endpoint. */
  podServerUrl: string;
  /** Traefik's metrics, as Prometheus scrapes them (job `traefik`). */
  traefikMetricsUrl: string;
  gateway: { namespace: string; name: string };
  servers: Record<DataPlaneServerName, ServerSpec & { pid?: number }>;
}

const traefikDir = (stateDir: string) => join(stateDir, 'traefik');
const tokenFile = (stateDir: string) => join(traefikDir(stateDir), 'token');

/** Replaces (or adds) `--flag=value` in a server's arguments. */
export function withFlag(args: string[], flag: string, value: string): string[] {
  return [...args.filter((a) => !a.startsWith(`${flag}=`)), `${flag}=${value}`];
}

/**
 * Gives a new stack its data plane: creates its network namespace and claims its pod slice, points kwok (pod and node
 * addresses) and the API server (ClusterIPs) into the slice, and records the ports and servers. Mutates `info`.
 */
export async function addDataPlane(info: StackInfo, opts: { freePorts: boolean }): Promise<DataPlaneInfo> {
  const net = await createPodNetwork(podNetworkNames(info.stateDir), undefined);
  const layout = sliceLayout(net.podCidr);
  const ports = opts.freePorts ? await freeDataPlanePorts(Object.values<number>({ ...info.ports })) : defaultDataPlanePorts;
  const kwok = info.servers.kwok;
  kwok.args = withFlag(withFlag(kwok.args, '--cidr', layout.podCidr), '--node-ip', layout.nodeIp);
  const apiserver = info.servers['kube-apiserver'];
  apiserver.args = withFlag(apiserver.args, '--service-cluster-ip-range', layout.serviceCidr);
  const pki = await ensurePki(join(info.stateDir, 'pki'));
  const logs = join(info.stateDir, 'logs');
  const dp: DataPlaneInfo = {
    ...net, nodeIp: layout.nodeIp, serviceCidr: layout.serviceCidr, ports,
    gatewayUrl: `http://127.0.0.1:${ports.gateway}`,
    podServerUrl: `http://127.0.0.1:${ports.podServer}`,
    traefikMetricsUrl: `http://127.0.0.1:${ports.traefikMetrics}/metrics`,
    gateway: { namespace: localGateway.namespace, name: localGateway.name },
    servers: {
      'pod-server': {
        name: 'pod-server', command: process.execPath, log: join(logs, 'pod-server.log'), ports: [ports.podServer],
        args: [join(import.meta.dirname, 'pod-server.ts'), `--kubeconfig=${info.kubeconfig}`, `--netns=${net.netns}`, `--port=${ports.podServer}`],
      },
      traefik: {
        name: 'traefik', command: artifactPaths().traefik, log: join(logs, 'traefik.log'), ports: [ports.gateway, ports.traefikMetrics],
        args: traefikArgs(info.apiserverUrl, tokenFile(info.stateDir), pki.caCert, ports),
      },
    },
  };
  info.dataPlane = dp;
  return dp;
}

async function freeDataPlanePorts(taken: number[]): Promise<DataPlanePorts> {
  const [gateway, traefikMetrics, podServer] = (await freePortsBesides(taken, 3)) as [number, number, number];
  return { gateway, traefikMetrics, podServer };
}

/** Traefik's static configuration, as flags. */
export function traefikArgs(apiserverUrl: string, token: string, caCert: string, ports: DataPlanePorts): string[] {
  const cluster = (provider: string) => [
    `--providers.${provider}=true`, `--providers.${provider}.endpoint=${apiserverUrl}`,
    // A path: Traefik reads the token from the file (its FileOrContent type).
    `--providers.${provider}.token=${token}`, `--providers.${provider}.certauthfilepath=${caCert}`,
  ];
  return [
    // Traefik asks the internet for new versions unless told not to; nothing here may leave the machine.
    '--global.checknewversion=false', '--global.sendanonymoususage=false',
    `--entrypoints.web.address=127.0.0.1:${ports.gateway}`,
    `--entrypoints.metrics.address=127.0.0.1:${ports.traefikMetrics}`,
    // Ping and metrics default to an entrypoint "traefik" on :8080 of every interface; keep them on ours.
    '--ping=true', '--ping.entrypoint=metrics',
    '--metrics.prometheus=true', '--metrics.prometheus.entrypoint=metrics',
    '--metrics.prometheus.addentrypointslabels=true', '--metrics.prometheus.addrouterslabels=true', '--metrics.prometheus.addserviceslabels=true',
    // Traefik's default buckets (0.1, 0.3, 1.2, 5 s) cannot tell a 20 ms answer from a 90 ms one; a latency gate must.
    '--metrics.prometheus.buckets=0.005,0.01,0.025,0.05,0.1,0.25,0.5,1,2.5,5,10',
    ...cluster('kubernetesgateway'),
    // The Gateway's status.addresses: where its listener really is.
    '--providers.kubernetesgateway.statusaddress.ip=127.0.0.1',
    // Traefik's own CRDs: HTTPRoutes may name a TraefikService (e.g. a mirroring one) as a backend.
    ...cluster('kubernetescrd'),
    '--log.level=INFO', '--log.nocolor=true',
  ];
}

/** Refuses to add a data plane to a stack created without one: its pods already have addresses outside any slice. */
export function assertDataPlaneChoice(info: StackInfo, wanted: boolean | undefined): void {
  if (wanted && !info.dataPlane) {
    throw new Error(`the stack in ${info.stateDir} was created without the data plane, and its pods have addresses no namespace of ours holds; start it afresh with it: npm run stack -- down --purge && npm run stack -- up --data-plane`);
  }
}

/** The kwok nodes' pod capacity in a stack with this data plane (kwok would hand out addresses beyond the slice). */
export function nodePodCapacity(dp: DataPlaneInfo, nodes: number): number {
  return podsPerNode(sliceLayout(dp.podCidr), nodes);
}

/**
 * Makes sure the namespace, veth and routes are in place before anything starts; when a part is missing (after a
 * reboot, or removed by hand) the proxy and pod server are stopped first, so the proxy never runs while the slice is
 * unrouted (its requests would follow the default route), then the network is made again with the same slice.
 */
export async function ensurePodNetwork(info: StackInfo, print: (l: string) => void): Promise<void> {
  const dp = info.dataPlane;
  if (!dp) return;
  const problem = await podNetworkProblem(dp);
  if (!problem) return;
  print(`  pod network: ${problem}; making it again`);
  await stopDataPlaneServers(info);
  await createPodNetwork(dp, dp.podCidr);
}

/** Whether a data-plane server runs (by the pid recorded for it). */
function running(spec: ServerSpec & { pid?: number }): boolean {
  return isOurs(spec.pid, spec.command);
}

/** Records one data-plane server's pid in stack.json, leaving the rest of the file as it is now. */
async function savePid(stateDir: string, name: DataPlaneServerName, pid: number | undefined): Promise<void> {
  const current = await readStack(stateDir);
  const spec = current?.dataPlane?.servers[name];
  if (!current || !spec) return;
  if (pid === undefined) delete spec.pid;
  else spec.pid = pid;
  await writeFile(join(stateDir, 'stack.json'), JSON.stringify(current, null, 2));
}

/** Installs the Gateway API and Traefik CRDs, Traefik's RBAC and token, the GatewayClass and Gateway; starts pod server and Traefik. */
export async function startDataPlane(info: StackInfo, print: (l: string) => void, signal?: AbortSignal): Promise<void> {
  const dp = info.dataPlane;
  if (!dp) return;
  const t0 = Date.now();
  await installDataPlaneCrds(info, signal);
  await kubectl(info, ['apply', '--server-side', '--force-conflicts', '-f', '-'], dataPlaneManifests(dp).map((m) => stringify(m)).join('---\n'), signal);
  if (!running(dp.servers.traefik)) await writeTraefikToken(info, signal);
  for (const name of dataPlaneServerNames) await startDataPlaneServer(info, name, print, signal);
  await waitFor(`Gateway ${dp.gateway.namespace}/${dp.gateway.name} Programmed by Traefik`, async () => {
    const gw = JSON.parse(await kubectl(info, ['get', 'gateway.gateway.networking.k8s.io', '-n', dp.gateway.namespace, dp.gateway.name, '-o', 'json'], undefined, signal)) as { status?: { conditions?: { type: string; status: string }[] } };
    return gw.status?.conditions?.some((c) => c.type === 'Programmed' && c.status === 'True') ?? false;
  }, { timeoutMs: 60_000, log: dp.servers.traefik.log, signal });
  await addScrapeTarget(info, { job: 'traefik', targets: [`127.0.0.1:${dp.ports.traefikMetrics}`] });
  print(`  data plane up in ${((Date.now() - t0) / 1000).toFixed(1)} s: Gateway ${dp.gateway.namespace}/${dp.gateway.name} at ${dp.gatewayUrl}, pods in ${dp.podCidr} (namespace ${dp.netns})`);
}

async function installDataPlaneCrds(info: StackInfo, signal: AbortSignal | undefined): Promise<void> {
  const a = artifactPaths();
  const out = await kubectl(info, ['apply', '--server-side', '--force-conflicts', '-f', a.gatewayApiCrds, '-f', a.traefikCrds, '-o', 'name'], undefined, signal);
  const crds = out.split('\n').map((l) => l.trim()).filter((l) => l.startsWith('customresourcedefinition'));
  await waitFor('Gateway API and Traefik CRDs Established', async () => {
    const list = JSON.parse(await kubectl(info, ['get', ...crds, '-o', 'json'], undefined, signal)) as { items: { status?: { conditions?: { type: string; status: string }[] } }[] };
    return list.items.every((c) => c.status?.conditions?.some((x) => x.type === 'Established' && x.status === 'True'));
  }, { timeoutMs: 120_000, signal });
}

/** Traefik's identity: a ServiceAccount with read access to what its two providers watch, and status writes for Gateway API. */
function dataPlaneManifests(dp: DataPlaneInfo): object[] {
  const read = ['get', 'list', 'watch'];
  const gatewayKinds = ['gatewayclasses', 'gateways', 'httproutes', 'grpcroutes', 'tcproutes', 'tlsroutes', 'referencegrants', 'backendtlspolicies'];
  const traefikKinds = ['middlewares', 'middlewaretcps', 'ingressroutes', 'traefikservices', 'ingressroutetcps', 'ingressrouteudps', 'tlsoptions', 'tlsstores', 'serverstransports', 'serverstransporttcps'];
  const ns = dp.gateway.namespace;
  return [
    { apiVersion: 'v1', kind: 'Namespace', metadata: { name: ns } },
    { apiVersion: 'v1', kind: 'ServiceAccount', metadata: { name: 'traefik', namespace: ns } },
    {
      apiVersion: 'rbac.authorization.k8s.io/v1', kind: 'ClusterRole', metadata: { name: 'local-stack-traefik' },
      rules: [
        { apiGroups: [''], resources: ['namespaces'], verbs: ['list', 'watch'] },
        { apiGroups: [''], resources: ['services', 'secrets', 'configmaps', 'nodes'], verbs: read },
        { apiGroups: ['discovery.k8s.io'], resources: ['endpointslices'], verbs: ['list', 'watch'] },
        { apiGroups: ['gateway.networking.k8s.io'], resources: gatewayKinds, verbs: read },
        { apiGroups: ['gateway.networking.k8s.io'], resources: gatewayKinds.map((k) => `${k}/status`), verbs: ['update'] },
        { apiGroups: ['traefik.io'], resources: traefikKinds, verbs: read },
      ],
    },
    {
      apiVersion: 'rbac.authorization.k8s.io/v1', kind: 'ClusterRoleBinding', metadata: { name: 'local-stack-traefik' },
      roleRef: { apiGroup: 'rbac.authorization.k8s.io', kind: 'ClusterRole', name: 'local-stack-traefik' },
      subjects: [{ kind: 'ServiceAccount', name: 'traefik', namespace: ns }],
    },
    { apiVersion: 'gateway.networking.k8s.io/v1', kind: 'GatewayClass', metadata: { name: gatewayClass.name }, spec: { controllerName: gatewayClass.controllerName } },
    {
      apiVersion: 'gateway.networking.k8s.io/v1', kind: 'Gateway', metadata: { name: dp.gateway.name, namespace: ns },
      spec: {
        gatewayClassName: gatewayClass.name,
        listeners: [{ name: localGateway.listener, protocol: 'HTTP', port: dp.ports.gateway, allowedRoutes: { namespaces: { from: 'All' } } }],
      },
    },
  ];
}

/** A token of Traefik's ServiceAccount, in a file only root reads; a year is longer than any local stack lives. */
async function writeTraefikToken(info: StackInfo, signal: AbortSignal | undefined): Promise<void> {
  const token = (await kubectl(info, ['create', 'token', 'traefik', '-n', localGateway.namespace, '--duration=8760h'], undefined, signal)).trim();
  await mkdir(traefikDir(info.stateDir), { recursive: true });
  await writeFile(tokenFile(info.stateDir), token, { mode: 0o600 });
}

const health: Record<DataPlaneServerName, (dp: DataPlaneInfo) => Promise<boolean>> = {
  'pod-server': async (dp) => (await fetch(`${dp.podServerUrl}/healthz`, { signal: AbortSignal.timeout(3000) })).status === 200,
  traefik: async (dp) => (await fetch(`http://127.0.0.1:${dp.ports.traefikMetrics}/ping`, { signal: AbortSignal.timeout(3000) })).status === 200,
};

/** Starts one data-plane server (unless it runs) and waits until it answers its health check. */
async function startDataPlaneServer(info: StackInfo, name: DataPlaneServerName, print: (l: string) => void, signal: AbortSignal | undefined): Promise<void> {
  const dp = info.dataPlane!;
  const spec = dp.servers[name];
  if (running(spec)) return;
  // A server just stopped may hold its ports for a moment; one we did not start there gets a clear error.
  for (const port of spec.ports) {
    await waitFor(`port ${port} free for ${name}`, () => assertPortFree(port, name).then(() => true), { timeoutMs: 15_000, signal });
  }
  const t0 = Date.now();
  const pid = startDetached(spec);
  spec.pid = pid;
  await savePid(info.stateDir, name, pid);
  await waitFor(name, () => health[name](dp), { pid, log: spec.log, timeoutMs: 60_000, signal });
  print(`  ${name} up (pid ${pid}) in ${((Date.now() - t0) / 1000).toFixed(1)} s`);
}

async function stopDataPlaneServers(info: StackInfo): Promise<void> {
  const dp = info.dataPlane;
  if (!dp) return;
  for (const name of [...dataPlaneServerNames].reverse()) {
    const spec = dp.servers[name];
    if (spec.pid) await stopPid(spec.pid, spec.command);
    delete spec.pid;
    await savePid(info.stateDir, name, undefined);
  }
}

/** Stops Traefik, then the pod server, then removes the namespace, veth and route (the proxy never outlives the route). */
export async function stopDataPlane(info: StackInfo): Promise<void> {
  if (!info.dataPlane) return;
  await stopDataPlaneServers(info);
  await removePodNetwork(info.dataPlane);
}

/** Each data-plane server's pid, ports and whether it answers its health check, for `stack status`. */
export async function dataPlaneStatus(info: StackInfo): Promise<{ name: DataPlaneServerName; pid?: number; ports: number[]; state: 'up' | 'unhealthy' | 'stopped'; detail?: string }[]> {
  const dp = info.dataPlane;
  if (!dp) return [];
  return Promise.all(dataPlaneServerNames.map(async (name) => {
    const s = dp.servers[name];
    const row = { name, ports: s.ports, ...(s.pid ? { pid: s.pid } : {}) };
    if (!running(s)) return { ...row, state: 'stopped' as const };
    const healthy = await health[name](dp).catch(() => false);
    return healthy ? { ...row, state: 'up' as const } : { ...row, state: 'unhealthy' as const, detail: unhealthyDetail[name](dp) };
  }));
}

const unhealthyDetail: Record<DataPlaneServerName, (dp: DataPlaneInfo) => string> = {
  'pod-server': (dp) => `${dp.podServerUrl}/healthz does not answer 200 (pods not listed, or the server inside ${dp.netns} not in step)`,
  traefik: (dp) => `http://127.0.0.1:${dp.ports.traefikMetrics}/ping does not answer 200`,
};

/** Lines for `stack env`: where the Gateway and the pod server are. */
export function dataPlaneEnvLines(info: StackInfo): string[] {
  const dp = info.dataPlane;
  if (!dp) return [];
  return [
    `export GATEWAY_ADDRESS=127.0.0.1:${dp.ports.gateway}`,
    `export GATEWAY_URL=${dp.gatewayUrl}`,
    `export POD_SERVER_URL=${dp.podServerUrl}`,
  ];
}

