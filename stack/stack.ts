import { execFile } from 'node:child_process';
import { mkdir, readFile, rm, rmdir, stat, writeFile } from 'node:fs/promises';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { parseAllDocuments, stringify } from 'yaml';
import { searchAttributeFlags } from '../workflows/search-attributes.ts';
import { assertBuilt, exists as fileExists } from './build.ts';
import { addDataPlane, assertDataPlaneChoice, dataPlaneEnvLines, ensurePodNetwork, nodePodCapacity, startDataPlane, stopDataPlane, type DataPlaneInfo } from './dataplane.ts';
import { podsPerNodeDefault } from './pod-cidr.ts';
import { addTracing, startTracingBackend, stopTracingBackend, tracingEnvLines, type TracingInfo } from './tracing.ts';
import { ensurePki, type Pki } from './pki.ts';
import { writeWhole } from '../lib/files.ts';
import { httpGet, type HttpAnswer } from '../lib/http.ts';
import { assertPortFree, freePort } from '../lib/net.ts';
import { isOurs, startDetached, stopPid, waitFor, type ServerSpec } from './processes.ts';
import { setTimeout as sleep } from 'node:timers/promises';
import { artifactPaths, type ArtifactPaths } from './versions.ts';
import { addMemberClusters, stopMemberClusters } from './clusters.ts';

const exec = promisify(execFile);
const repoRoot = resolve(dirname(fileURLToPath(import.meta.url)), '..');

/** Ports of the stack's servers, all on 127.0.0.1. */
export interface StackPorts {
  etcd: number;
  etcdPeer: number;
  apiserver: number;
  scheduler: number;
  kwok: number;
  temporal: number;
  temporalUi: number;
  temporalHttp: number;
  temporalMetrics: number;
  prometheus: number;
}

/** The fixed ports of `npm run stack -- up` (tests take free ones instead). */
export const defaultPorts: StackPorts = {
  etcd: 23790, etcdPeer: 23800, apiserver: 26443, scheduler: 26459, kwok: 26470,
  temporal: 27233, temporalUi: 28233, temporalHttp: 27243, temporalMetrics: 27253, prometheus: 29090,
};

/** Start order; stop order is the reverse. */
export const serverNames = ['etcd', 'kube-apiserver', 'kube-controller-manager', 'kube-scheduler', 'kwok', 'temporal', 'prometheus'] as const;
export type ServerName = (typeof serverNames)[number];

/** The servers of a Kubernetes control plane, all a member cluster runs (stack/clusters.ts); in start order. */
export const controlPlaneServerNames = ['etcd', 'kube-apiserver', 'kube-controller-manager', 'kube-scheduler', 'kwok'] as const satisfies readonly ServerName[];
export type ControlPlaneServerName = (typeof controlPlaneServerNames)[number];

/** The ports of a control plane's servers. */
export type ControlPlanePorts = Pick<StackPorts, 'etcd' | 'etcdPeer' | 'apiserver' | 'scheduler' | 'kwok'>;

/**
 * What `up` writes to <stateDir>/stack.json, enough for any process to use or restart the stack. `S` is the servers
 * it runs: every one for the hub (the stack `up` starts), the control plane's for a member cluster (MemberStackInfo).
 */
export interface StackInfo<S extends ServerName = ServerName> {
  stateDir: string;
  kubeconfig: string;
  apiserverUrl: string;
  temporalAddress: string;
  temporalNamespace: string;
  temporalUiUrl: string;
  prometheusUrl: string;
  ports: StackPorts;
  headless: boolean;
  /** The codec server the Temporal UI sends payloads to, if any (`up --codec-endpoint`). */
  codecEndpoint?: string;
  servers: Record<S, ServerSpec & { pid?: number }>;
  /** Where the CA, serving and client certificates are, when not in <stateDir>/pki (a member shares its hub's). */
  pkiDir?: string;
  /** The hub's member clusters, by name (stack/clusters.ts): each has its own stack.json in <stateDir>/clusters/<name>/. */
  clusters?: string[];
  /** Set in a member cluster's stack.json only: its name, and the state folder of the hub it belongs to. */
  member?: { name: string; hubStateDir: string };
  /** The proxy, pod server and pod network, when the stack was created with them (stack/dataplane.ts). */
  dataPlane?: DataPlaneInfo;
  /** The trace backend (Jaeger) and the API server's and etcd's tracing, when the stack was created with it (stack/tracing.ts). */
  tracing?: TracingInfo;
}

export interface UpOptions {
  stateDir: string;
  ports?: StackPorts | 'free';
  nodes?: number;
  headless?: boolean;
  /** kwok's delay before a pod is scheduled/ready/deleted, in ms (upstream default is 1-6 s). */
  podDelayMs?: number;
  /**
   * Points the Temporal UI at this codec server (e.g. `application-operator codec-server`), for payloads the operator
   * encrypts; '' points it at none again. Left out, the stack keeps what it had (none for a new stack).
   */
  codecEndpoint?: string;
  /** Create the stack with its data plane (Traefik, the pod server, the pod network); a stack keeps what it was created with. */
  dataPlane?: boolean;
  /** Create the stack with its trace backend (Jaeger; the API server and etcd export their spans to it). */
  tracing?: boolean;
  /** Member clusters to have besides the hub (stack/clusters.ts), added if missing; those the stack has are started anyway. */
  clusters?: string[];
  print?: (line: string) => void;
  /** Stops the start under way (Ctrl-C, a test run's SIGTERM): up() rejects, and the caller stops what had started (down). */
  signal?: AbortSignal;
}

/** The image whose pods kwok keeps Running but never Ready (a bad canary in tests and demos). */
export const unreadyImage = 'registry.invalid/app:unready';

/** Images whose pods answer with errors or late on the data plane (stack/pod-behaviour.ts). */
export { servingImage, servingImages } from './pod-behaviour.ts';

const stateFile = (stateDir: string) => join(stateDir, 'stack.json');

/** Reads the state of a stack started by `up`, or null. */
export async function readStack(stateDir: string): Promise<StackInfo | null> {
  try {
    return JSON.parse(await readFile(stateFile(stateDir), 'utf8')) as StackInfo;
  } catch {
    return null;
  }
}

/** Writes a stack's state file whole (see updateStack to change one field of a file other processes may write too). */
export async function saveStack(info: Pick<StackInfo, 'stateDir'>): Promise<void> {
  await writeWhole(stateFile(info.stateDir), JSON.stringify(info, null, 2));
}

/** How long a lock on a state file may be held before another process takes it as left behind by a crash. */
const staleLockMs = 10_000;

/**
 * Reads a stack's state file, lets `change` edit it, and writes it back, holding a lock meanwhile: several processes
 * (test files adding member clusters, a test restarting a server) may change the same file at once, and each must
 * keep the others' changes. Returns the state as written, or null when there is no stack in stateDir.
 */
export async function updateStack(stateDir: string, change: (current: StackInfo) => void): Promise<StackInfo | null> {
  const lock = `${stateFile(stateDir)}.lock`;
  for (;;) {
    try {
      await mkdir(lock);
      break;
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err;
      const held = await stat(lock).then((s) => Date.now() - s.mtimeMs, () => 0);
      if (held > staleLockMs) await rmdir(lock).catch(() => {});
      else await sleep(10 + Math.random() * 20);
    }
  }
  try {
    const current = await readStack(stateDir);
    if (!current) return null;
    change(current);
    await saveStack(current);
    return current;
  } finally {
    await rmdir(lock).catch(() => {});
  }
}

async function allocatePorts(ports: UpOptions['ports']): Promise<StackPorts> {
  if (ports && ports !== 'free') return ports;
  if (!ports) return defaultPorts;
  const out = {} as Record<keyof StackPorts, number>;
  const taken = new Set<number>();
  for (const key of Object.keys(defaultPorts) as (keyof StackPorts)[]) {
    let p = await freePort();
    while (taken.has(p)) p = await freePort();
    taken.add(p);
    out[key] = p;
  }
  return out;
}

/**
 * How the dev server keeps its SQLite file: in write-ahead-log mode, synced at checkpoints rather than at every
 * commit (SQLite's defaults, a rollback journal created, synced and deleted per transaction, cost the server most of
 * its CPU under load). Committed work survives the server being killed (only a power loss could lose the last
 * transactions), which is what the stack and its restart tests need.
 */
export const TEMPORAL_SQLITE_FLAGS: readonly string[] = ['--sqlite-pragma', 'journal_mode=wal', '--sqlite-pragma', 'synchronous=normal'];

function serverSpecs(a: ArtifactPaths, pki: Pki, stateDir: string, ports: StackPorts, kubeconfig: string, headless: boolean): Record<ServerName, ServerSpec> {
  const logs = join(stateDir, 'logs');
  return {
    ...controlPlaneSpecs(a, pki, stateDir, ports, kubeconfig),
    temporal: {
      name: 'temporal', command: a.temporal, log: join(logs, 'temporal.log'),
      ports: [ports.temporal, ports.temporalUi, ports.temporalHttp, ports.temporalMetrics],
      args: [
        'server', 'start-dev', '--ip=127.0.0.1', `--port=${ports.temporal}`, '--ui-ip=127.0.0.1', `--ui-port=${ports.temporalUi}`,
        `--http-port=${ports.temporalHttp}`, `--metrics-port=${ports.temporalMetrics}`,
        `--db-filename=${join(stateDir, 'temporal.db')}`, ...TEMPORAL_SQLITE_FLAGS, '--namespace=default', '--log-level=warn',
        ...searchAttributeFlags(),
        ...(headless ? ['--headless'] : []),
      ],
    },
    prometheus: prometheusSpec(a, stateDir, ports.prometheus),
  };
}

/** A Kubernetes control plane's servers (the hub's, or a member cluster's), keeping their data and logs in stateDir. */
export function controlPlaneSpecs(a: ArtifactPaths, pki: Pki, stateDir: string, ports: ControlPlanePorts, kubeconfig: string): Record<ControlPlaneServerName, ServerSpec> {
  const logs = join(stateDir, 'logs');
  const etcdUrl = `http://127.0.0.1:${ports.etcd}`;
  const peerUrl = `http://127.0.0.1:${ports.etcdPeer}`;
  return {
    etcd: {
      name: 'etcd', command: a.etcd, log: join(logs, 'etcd.log'), ports: [ports.etcd, ports.etcdPeer],
      args: [
        '--name=local', `--data-dir=${join(stateDir, 'etcd')}`,
        `--listen-client-urls=${etcdUrl}`, `--advertise-client-urls=${etcdUrl}`,
        `--listen-peer-urls=${peerUrl}`, `--initial-advertise-peer-urls=${peerUrl}`, `--initial-cluster=local=${peerUrl}`,
        // A throwaway test store: skipping fsync is what envtest does and keeps a 2-core machine responsive.
        '--unsafe-no-fsync=true', '--quota-backend-bytes=8589934592', '--log-level=warn',
      ],
    },
    'kube-apiserver': {
      name: 'kube-apiserver', command: a.kubeApiserver, log: join(logs, 'kube-apiserver.log'), ports: [ports.apiserver],
      args: [
        `--etcd-servers=${etcdUrl}`, `--cert-dir=${join(stateDir, 'apiserver')}`,
        `--tls-cert-file=${pki.servingCert}`, `--tls-private-key-file=${pki.servingKey}`, `--client-ca-file=${pki.caCert}`,
        `--secure-port=${ports.apiserver}`, '--bind-address=127.0.0.1', '--advertise-address=127.0.0.1',
        '--service-cluster-ip-range=10.0.0.0/24', '--allow-privileged=true', '--authorization-mode=RBAC',
        '--service-account-issuer=https://kubernetes.default.svc.cluster.local',
        `--service-account-key-file=${pki.serviceAccountPub}`, `--service-account-signing-key-file=${pki.serviceAccountKey}`,
        // No kubelet mounts tokens here, and nothing would lift the not-ready taint from kwok's nodes.
        '--disable-admission-plugins=ServiceAccount,TaintNodesByCondition',
        '--max-requests-inflight=800', '--max-mutating-requests-inflight=400', '--profiling=false', '--v=0',
        // MutatingAdmissionPolicy is beta (off by default) in 1.35 and GA from 1.36: the chart's finalizer policy
        // (deploy/admission/) needs it.
        '--feature-gates=MutatingAdmissionPolicy=true', '--runtime-config=admissionregistration.k8s.io/v1beta1=true',
      ],
    },
    'kube-controller-manager': {
      name: 'kube-controller-manager', command: a.kubeControllerManager, log: join(logs, 'kube-controller-manager.log'), ports: [],
      args: [
        `--kubeconfig=${kubeconfig}`,
        '--controllers=deployment-controller,replicaset-controller,garbage-collector-controller,horizontal-pod-autoscaler-controller,job-controller,namespace-controller,persistentvolumeclaim-protection-controller,persistentvolume-protection-controller,persistentvolume-binder-controller,endpointslice-controller',
        '--use-service-account-credentials=false', '--leader-elect=false', '--secure-port=0',
        // Test-only dynamic provisioning on this machine's disk, so claims bind and are cleaned up like in a cluster.
        '--enable-hostpath-provisioner=true',
        '--kube-api-qps=200', '--kube-api-burst=400', '--concurrent-deployment-syncs=10', '--concurrent-replicaset-syncs=10',
        '--concurrent-gc-syncs=40', '--horizontal-pod-autoscaler-sync-period=5s', '--v=0',
      ],
    },
    'kube-scheduler': {
      name: 'kube-scheduler', command: a.kubeScheduler, log: join(logs, 'kube-scheduler.log'), ports: [ports.scheduler],
      args: [`--kubeconfig=${kubeconfig}`, '--leader-elect=false', '--bind-address=127.0.0.1', `--secure-port=${ports.scheduler}`,
        `--authentication-kubeconfig=${kubeconfig}`, `--authorization-kubeconfig=${kubeconfig}`, '--v=0'],
    },
    kwok: {
      name: 'kwok', command: a.kwok, log: join(logs, 'kwok.log'), ports: [ports.kwok],
      args: [`--kubeconfig=${kubeconfig}`, '--manage-all-nodes=true', `--config=${join(stateDir, 'kwok.yaml')}`,
        `--server-address=127.0.0.1:${ports.kwok}`, '--node-ip=10.1.0.1', '--cidr=10.244.0.0/16'],
    },
  };
}

const prometheusDir = (stateDir: string) => join(stateDir, 'prometheus');
const scrapeTargetsDir = (stateDir: string) => join(prometheusDir(stateDir), 'targets');

function prometheusSpec(a: ArtifactPaths, stateDir: string, port: number): ServerSpec {
  return {
    name: 'prometheus', command: a.prometheus, log: join(stateDir, 'logs', 'prometheus.log'), ports: [port],
    args: [
      `--config.file=${join(prometheusDir(stateDir), 'prometheus.yml')}`, `--web.listen-address=127.0.0.1:${port}`,
      `--storage.tsdb.path=${join(prometheusDir(stateDir), 'data')}`,
      // Tests and demos look back minutes, not weeks; a day bounds the disk a long-lived local stack uses.
      '--storage.tsdb.retention.time=1d',
      // POST /-/reload picks up an edited prometheus.yml without a restart (target files need no reload).
      '--web.enable-lifecycle',
      '--log.level=warn',
    ],
  };
}

/** Prometheus's config: it scrapes itself, and every target file in the targets folder (file-based service discovery). */
async function writePrometheusConfig(stateDir: string, port: number): Promise<void> {
  await mkdir(scrapeTargetsDir(stateDir), { recursive: true });
  const config = {
    // One-second scrapes and rule evaluations let a test see a change within a few seconds.
    global: { scrape_interval: '1s', scrape_timeout: '1s', evaluation_interval: '1s' },
    scrape_configs: [
      { job_name: 'prometheus', static_configs: [{ targets: [`127.0.0.1:${port}`] }] },
      {
        // A `job` label in a file's target group takes precedence over this job_name, so each file names its own job.
        job_name: 'file-sd',
        file_sd_configs: [{ files: [join(scrapeTargetsDir(stateDir), '*.json')], refresh_interval: '1s' }],
        // Prometheus 3 fails a scrape whose Content-Type is missing or unknown unless told what to assume.
        fallback_scrape_protocol: 'PrometheusText0.0.4',
      },
    ],
  };
  await writeWhole(join(prometheusDir(stateDir), 'prometheus.yml'), stringify(config));
}

/** A scrape job for the stack's Prometheus: its targets (host:port) and extra labels (e.g. `__metrics_path__`). */
export interface ScrapeTarget {
  job: string;
  targets: string[];
  labels?: Record<string, string>;
}

function scrapeTargetFile(info: Pick<StackInfo, 'stateDir'>, job: string): string {
  // The job names the file; keep it a plain file name (the `job` label itself may be anything).
  if (!/^[A-Za-z0-9_.-]+$/.test(job) || job.startsWith('.')) throw new Error(`scrape job ${JSON.stringify(job)}: use letters, digits, '_', '-' or '.'`);
  return join(scrapeTargetsDir(info.stateDir), `${job}.json`);
}

/** Makes the stack's Prometheus scrape targets as job `job`, replacing an earlier file for it; seen within ~6 s (discovery updates are batched every 5 s). */
export async function addScrapeTarget(info: Pick<StackInfo, 'stateDir'>, target: ScrapeTarget): Promise<void> {
  const file = scrapeTargetFile(info, target.job);
  const groups = [{ targets: target.targets, labels: { ...target.labels, job: target.job } }];
  await mkdir(dirname(file), { recursive: true });
  await writeWhole(file, `${JSON.stringify(groups, null, 2)}\n`);
}

/** Stops scraping job `job` (its series then go stale); a job that was never added is not an error. */
export async function removeScrapeTarget(info: Pick<StackInfo, 'stateDir'>, job: string): Promise<void> {
  await rm(scrapeTargetFile(info, job), { force: true });
}

/** A self-contained kubeconfig (credentials embedded) for the admin of the API server at `server`; `name` names its cluster and context. */
export function kubeconfigYaml(pki: { ca: string; cert: string; key: string }, server: string, name = 'local'): string {
  const b64 = (s: string) => Buffer.from(s).toString('base64');
  return stringify({
    apiVersion: 'v1', kind: 'Config', 'current-context': name,
    clusters: [{ name, cluster: { server, 'certificate-authority-data': b64(pki.ca) } }],
    users: [{ name: 'admin', user: { 'client-certificate-data': b64(pki.cert), 'client-key-data': b64(pki.key) } }],
    contexts: [{ name, context: { cluster: name, user: 'admin', namespace: 'default' } }],
  });
}

interface KwokStage {
  metadata: { name: string };
  spec: {
    resourceRef: { kind: string };
    selector: { matchExpressions: { key: string; operator: string; values?: string[] }[] };
    delay?: Record<string, unknown>;
  };
}

/** Images whose pods kwok treats specially, so tests and demos can make canaries that misbehave. */
export const testImages = {
  /** Running but never Ready (a bad canary). */
  unready: unreadyImage,
  /** Ready only after slowReadyMs (a slow starter: a JVM, a cache to warm). */
  slow: 'registry.invalid/app:slow',
  /** Stuck Pending: ImagePullBackOff. */
  pullError: 'registry.invalid/app:pull-error',
  /** Stuck Pending: CreateContainerConfigError (a missing Secret). */
  configError: 'registry.invalid/app:config-error',
} as const;

/** How long pods of testImages.slow take to become Ready. */
export const slowReadyMs = 15_000;

/**
 * Images whose Job pods (a rollout's Job checks) end as the image says once Running: `pass` (and any image not
 * listed) succeeds with exit code 0, `fail` fails with exit code 1 and checkFailMessage, `slow` never ends.
 */
export const checkImages = {
  pass: 'registry.invalid/check:pass',
  fail: 'registry.invalid/check:fail',
  slow: 'registry.invalid/check:slow',
} as const;

/** The termination message of a Job pod of checkImages.fail. */
export const checkFailMessage = 'GET /health: 200\nPOST /cart: 500 Internal Server Error\nsmoke test failed: 1 of 2 requests failed';

type MatchExpressions = KwokStage['spec']['selector']['matchExpressions'];

/** A kwok Stage of pods matching `match` (and not being deleted), moved after `delayMs` to the status `status` writes. */
const stageOf = (name: string, match: MatchExpressions, delayMs: number, status: string[]) => ({
  apiVersion: 'kwok.x-k8s.io/v1alpha1', kind: 'Stage', metadata: { name },
  spec: {
    resourceRef: { apiGroup: 'v1', kind: 'Pod' },
    selector: { matchExpressions: [{ key: '.metadata.deletionTimestamp', operator: 'DoesNotExist' }, ...match] },
    delay: { durationMilliseconds: delayMs },
    next: { statusTemplate: ['{{ $now := Now }}', ...status].join('\n') },
  },
});

const podStage = (name: string, image: string, delayMs: number, status: string[], extra: MatchExpressions = []) => stageOf(name, [
  { key: '.status.phase', operator: 'In', values: ['Pending'] },
  { key: '.status.conditions.[] | select( .type == "Initialized" ) | .status', operator: 'In', values: ['True'] },
  { key: '.spec.containers.[].image', operator: 'In', values: [image] },
  ...extra,
], delayMs, status);

/** A transition of a Running, Ready pod of a Job whose container runs `image` (upstream's pod-complete, for one image). */
const jobPodStage = (name: string, image: string, delayMs: number, status: string[]) => stageOf(name, [
  { key: '.status.phase', operator: 'In', values: ['Running'] },
  { key: '.status.conditions.[] | select( .type == "Ready" ) | .status', operator: 'In', values: ['True'] },
  { key: '.metadata.ownerReferences.[].kind', operator: 'In', values: ['Job'] },
  { key: '.spec.containers.[].image', operator: 'In', values: [image] },
], delayMs, status);

/** Every container terminated with `exitCode`, `reason` and (for a failure) a termination message; the pod in `phase`. */
const terminated = (phase: 'Succeeded' | 'Failed', exitCode: number, reason: string, message?: string) => [
  'containerStatuses:',
  '{{ range .spec.containers }}',
  `- {name: {{ .name | Quote }}, image: {{ .image | Quote }}, ready: false, started: false, restartCount: 0, state: {terminated: {exitCode: ${exitCode}, reason: ${reason}, ${message ? `message: ${JSON.stringify(message)}, ` : ''}startedAt: {{ $now | Quote }}, finishedAt: {{ $now | Quote }}}}}`,
  '{{ end }}',
  `phase: ${phase}`,
];

const notReady = [
  'conditions:',
  '- {type: Ready, status: "False", reason: ContainersNotReady, lastTransitionTime: {{ $now | Quote }}}',
  '- {type: ContainersReady, status: "False", reason: ContainersNotReady, lastTransitionTime: {{ $now | Quote }}}',
];

/** A pod stuck before its container starts, waiting with `reason` and `message` (a Go template), as the kubelet reports it. */
const waitingStage = (name: string, image: string, reason: string, message: string, delayMs: number) => podStage(name, image, delayMs, [
  ...notReady,
  'containerStatuses:',
  '{{ range .spec.containers }}',
  `- {name: {{ .name | Quote }}, image: {{ .image | Quote }}, ready: false, started: false, restartCount: 0, state: {waiting: {reason: ${reason}, message: {{ ${message} | Quote }}}}}`,
  '{{ end }}',
  'phase: Pending',
], [{ key: '.status.containerStatuses.[].state.waiting.reason', operator: 'In', values: ['ContainerCreating'] }]);

/** kwok's stages: upstream's node/pod lifecycle with our delays, plus the misbehaving images of testImages. */
async function writeKwokConfig(a: ArtifactPaths, stateDir: string, podDelayMs: number): Promise<void> {
  const { kwokStageFilesIn } = await import('./build.ts');
  const docs: unknown[] = [];
  for (const file of await kwokStageFilesIn(a.kwokStages)) {
    for (const doc of parseAllDocuments(await readFile(file, 'utf8'))) {
      const stage = doc.toJS() as KwokStage;
      if (stage.spec.resourceRef.kind === 'Pod') {
        // Upstream waits 1-6 s per pod transition and deletes pods only at their grace deadline; tests need seconds.
        stage.spec.delay = { durationMilliseconds: podDelayMs, jitterDurationMilliseconds: podDelayMs * 2 };
        // A Job's pod succeeds unless its image is the failing check's (its own stage, below) or the slow one's (never ends).
        if (stage.metadata.name === 'pod-complete') {
          stage.spec.selector.matchExpressions.push({ key: '.spec.containers.[].image', operator: 'NotIn', values: [checkImages.fail, checkImages.slow] });
        }
        if (stage.metadata.name === 'pod-ready') {
          stage.spec.selector.matchExpressions.push({ key: '.spec.containers.[].image', operator: 'NotIn', values: Object.values(testImages) });
          // The same transition, only late, for the slow starter.
          const slow = structuredClone(stage);
          slow.metadata.name = 'pod-ready-slow';
          slow.spec.selector.matchExpressions = slow.spec.selector.matchExpressions.filter((e) => e.key !== '.spec.containers.[].image');
          slow.spec.selector.matchExpressions.push({ key: '.spec.containers.[].image', operator: 'In', values: [testImages.slow] });
          slow.spec.delay = { durationMilliseconds: slowReadyMs };
          docs.push(slow);
        }
      }
      docs.push(stage);
    }
  }
  docs.push(podStage('pod-running-unready', testImages.unready, podDelayMs, [
    ...notReady,
    'containerStatuses:',
    '{{ range .spec.containers }}',
    '- {name: {{ .name | Quote }}, image: {{ .image | Quote }}, ready: false, started: true, restartCount: 0, state: {running: {startedAt: {{ $now | Quote }}}}}',
    '{{ end }}',
    'phase: Running',
    'startTime: {{ $now | Quote }}',
  ]));
  docs.push(waitingStage('pod-image-pull-backoff', testImages.pullError, 'ImagePullBackOff', 'printf `Back-off pulling image "%s": manifest unknown` .image', podDelayMs));
  docs.push(waitingStage('pod-create-container-config-error', testImages.configError, 'CreateContainerConfigError', '`secret "app-secret" not found`', podDelayMs));
  docs.push(jobPodStage('pod-check-fail', checkImages.fail, podDelayMs, terminated('Failed', 1, 'Error', checkFailMessage)));
  await writeFile(join(stateDir, 'kwok.yaml'), docs.map((d) => stringify(d)).join('---\n'));
}

/** A GET over https with the stack's CA and admin client certificate; with null, without checking the server (the scheduler's own certificate). */
function httpsGet(url: string, pki: PemPki | null): Promise<HttpAnswer> {
  return httpGet(url, { tls: pki ? { ca: pki.caCertPem, cert: pki.adminCertPem, key: pki.adminKeyPem } : { rejectUnauthorized: false } });
}

/** Runs the cached kubectl against the stack. */
export async function kubectl(info: Pick<StackInfo, 'kubeconfig'>, args: string[], input?: string, signal?: AbortSignal): Promise<string> {
  const a = artifactPaths();
  return new Promise((res, rej) => {
    const child = execFile(a.kubectl, [`--kubeconfig=${info.kubeconfig}`, ...args], { maxBuffer: 64 << 20, ...(signal ? { signal } : {}) }, (err, stdout, stderr) => {
      if (err) rej(new Error(`kubectl ${args.join(' ')}: ${stderr || err.message}`));
      else res(stdout);
    });
    if (input !== undefined) child.stdin?.end(input);
  });
}

export type PemPki = Pki & { caCertPem: string; adminCertPem: string; adminKeyPem: string };

/** The folder of a stack's PKI: its own, or for a member cluster its hub's. */
export function pkiDirOf(info: Pick<StackInfo, 'stateDir' | 'pkiDir'>): string {
  return info.pkiDir ?? join(info.stateDir, 'pki');
}

/** The stack's PKI (created in `dir` the first time), with the PEM texts a kubeconfig and an https client need. */
export async function loadPki(dir: string): Promise<PemPki> {
  const pki = await ensurePki(dir);
  return {
    ...pki,
    caCertPem: await readFile(pki.caCert, 'utf8'),
    adminCertPem: await readFile(pki.adminCert, 'utf8'),
    adminKeyPem: await readFile(pki.adminKey, 'utf8'),
  };
}

/**
 * Each server's health check, which throws saying why the server is not healthy, and how long a start may take
 * to pass it. The controller manager serves no port here (--secure-port=0): alive is all that can be told of it.
 */
const health: Record<ServerName, { startTimeoutMs: number; check?: (info: Omit<StackInfo, 'servers'>, pki: PemPki, spec: ServerSpec) => Promise<void> }> = {
  etcd: { startTimeoutMs: 60_000, check: (info) => expect(httpGet(`http://127.0.0.1:${info.ports.etcd}/health`), (r) => r.body.includes('"health":"true"')) },
  'kube-apiserver': { startTimeoutMs: 120_000, check: (info, pki) => expect(httpsGet(`${info.apiserverUrl}/readyz`, pki), (r) => r.status === 200) },
  'kube-controller-manager': { startTimeoutMs: 10_000 },
  'kube-scheduler': { startTimeoutMs: 60_000, check: (info) => expect(httpsGet(`https://127.0.0.1:${info.ports.scheduler}/healthz`, null), (r) => r.status === 200) },
  kwok: { startTimeoutMs: 10_000, check: (info) => expect(httpGet(`http://127.0.0.1:${info.ports.kwok}/healthz`), (r) => r.status === 200) },
  temporal: {
    startTimeoutMs: 120_000,
    check: async (info, _pki, spec) => {
      const { stdout } = await exec(spec.command, ['operator', 'cluster', 'health', `--address=${info.temporalAddress}`], { timeout: 5000 })
        .catch((err: unknown) => { throw new Error(`temporal operator cluster health --address=${info.temporalAddress}: ${firstLine(err)}`); });
      if (!stdout.includes('SERVING')) throw new Error(`temporal operator cluster health --address=${info.temporalAddress}: ${stdout.trim()}`);
    },
  },
  // Ready once its storage is open (after a restart: once the WAL is replayed), which is when queries work.
  prometheus: { startTimeoutMs: 60_000, check: (info) => expect(httpGet(`${info.prometheusUrl}/-/ready`), (r) => r.status === 200) },
};

/** Resolves when the answer is as wanted; else throws with the URL and what came back (or why nothing did). */
async function expect(answer: Promise<HttpAnswer>, ok: (r: HttpAnswer) => boolean): Promise<void> {
  const r = await answer;
  if (!ok(r)) throw new Error(`${r.url} answered ${r.status}: ${r.body.trim().split('\n')[0]?.slice(0, 200) ?? ''}`);
}

function firstLine(err: unknown): string {
  return (err instanceof Error ? err.message : String(err)).split('\n')[0] ?? '';
}

/** Why a running server is not healthy, or undefined when it answers its health check (or has none). */
async function unhealthy<S extends ServerName>(info: StackInfo<S>, name: S, pki: PemPki): Promise<string | undefined> {
  const check = health[name].check;
  if (!check) return undefined;
  return check(info, pki, info.servers[name]).then(() => undefined, (err: unknown) => firstLine(err));
}

/** How long `up` waits for a server that runs but does not answer (one shutting down, or still starting). */
const lingerTimeoutMs = 60_000;

/**
 * Starts one server of a stack (if not already running and healthy) and waits until it serves. A process of ours
 * that runs but fails its health check is waited for until it answers (it was starting) or exits (it was shutting
 * down, e.g. killed a moment ago), saying so, then started again.
 */
export async function startServer<S extends ServerName>(info: StackInfo<S>, name: NoInfer<S>, print: (l: string) => void = () => {}, signal?: AbortSignal): Promise<void> {
  const spec = info.servers[name];
  const pki = await loadPki(pkiDirOf(info));
  if (spec.pid && isOurs(spec.pid, spec.command)) {
    const why = await unhealthy(info, name, pki);
    if (!why) return;
    const pid = spec.pid;
    print(`  ${name} (pid ${pid}) runs but is not healthy (${why}): waiting up to ${lingerTimeoutMs / 1000} s for it to exit (shutting down?) or to answer (starting?)`);
    const deadline = Date.now() + lingerTimeoutMs;
    for (;;) {
      signal?.throwIfAborted();
      if (!isOurs(pid, spec.command)) {
        print(`  ${name} (pid ${pid}) exited; starting it again`);
        break;
      }
      // A server shutting down may answer once more as it goes: it counts as up only if it still runs and answers a
      // second later.
      if (!(await unhealthy(info, name, pki))) {
        await sleep(1000);
        if (isOurs(pid, spec.command) && !(await unhealthy(info, name, pki))) {
          print(`  ${name} (pid ${pid}) answers now`);
          return;
        }
        continue;
      }
      if (Date.now() > deadline) {
        throw new Error(`${name} (pid ${pid}) neither answers its health check nor exits after ${lingerTimeoutMs / 1000} s (${why}); see ${spec.log}, or replace it: npm run stack -- restart ${name}`);
      }
      await sleep(250);
    }
  }
  // A server just killed may hold its ports for a moment while the kernel tears its sockets down.
  for (const port of spec.ports) {
    const free = await assertPortFree(port, name).then(() => true, () => false);
    if (free) continue;
    print(`  waiting for port ${port} to be free for ${name}`);
    await waitFor(`port ${port} free for ${name}`, () => assertPortFree(port, name).then(() => true), { timeoutMs: 15_000, signal });
  }
  const t0 = Date.now();
  const pid = startDetached(spec);
  spec.pid = pid;
  await saveServerPid(info, name, pid);
  const { check, startTimeoutMs } = health[name];
  // Without a health check, surviving its first second is what "started" means.
  const started = check ? () => check(info, pki, spec).then(() => true) : () => Promise.resolve(Date.now() - t0 > 1000);
  await waitFor(name, started, { pid, log: spec.log, timeoutMs: startTimeoutMs, signal });
  print(`  ${name} up (pid ${pid}) in ${((Date.now() - t0) / 1000).toFixed(1)} s`);
}

/** Stops one server by the pid we recorded (SIGKILL simulates a crash). */
export async function stopServer<S extends ServerName>(info: StackInfo<S>, name: NoInfer<S>, signal: NodeJS.Signals = 'SIGTERM'): Promise<void> {
  const spec = info.servers[name];
  if (spec.pid) await stopPid(spec.pid, spec.command, signal);
  delete spec.pid;
  await saveServerPid(info, name, undefined);
}

/**
 * Stops one server (with `signal`: SIGTERM by default, SIGKILL for a crash), leaves it down for `downMs`, then
 * starts it again on the same ports and waits until it is healthy: a fault drill in one command.
 */
export async function restartServer<S extends ServerName>(info: StackInfo<S>, name: NoInfer<S>, opts: { signal?: NodeJS.Signals; downMs?: number; print?: (l: string) => void } = {}): Promise<void> {
  const print = opts.print ?? (() => {});
  const pid = info.servers[name].pid;
  await stopServer(info, name, opts.signal ?? 'SIGTERM');
  print(`  ${name} stopped${pid ? ` (pid ${pid}, ${opts.signal ?? 'SIGTERM'})` : ' (was not running)'}`);
  if (opts.downMs) await sleep(opts.downMs);
  await startServer(info, name, print);
}

/**
 * Records one server's pid in the state file, leaving the rest of the file as it is now: another process (a test
 * that restarts another server) may have changed it since `info` was read.
 */
async function saveServerPid<S extends ServerName>(info: StackInfo<S>, name: S, pid: number | undefined): Promise<void> {
  const set = (spec: ServerSpec & { pid?: number }) => {
    if (pid === undefined) delete spec.pid;
    else spec.pid = pid;
  };
  const saved = await updateStack(info.stateDir, (current) => set((current as unknown as StackInfo<S>).servers[name]));
  if (!saved) {
    set(info.servers[name]);
    await saveStack(info);
  }
}

/** The default StorageClass: the controller manager's hostPath provisioner creates (and on release deletes) a volume per claim. */
const storageClassManifest = {
  apiVersion: 'storage.k8s.io/v1', kind: 'StorageClass',
  metadata: { name: 'standard', annotations: { 'storageclass.kubernetes.io/is-default-class': 'true' } },
  provisioner: 'kubernetes.io/host-path',
  reclaimPolicy: 'Delete',
  volumeBindingMode: 'Immediate',
};

function nodeManifest(i: number, pods: number) {
  const capacity = { cpu: '256', memory: '1Ti', pods: String(pods) };
  return {
    apiVersion: 'v1', kind: 'Node',
    metadata: {
      name: `kwok-node-${i}`,
      annotations: { 'kwok.x-k8s.io/node': 'fake', 'node.alpha.kubernetes.io/ttl': '0' },
      labels: { type: 'kwok', 'kubernetes.io/hostname': `kwok-node-${i}`, 'kubernetes.io/os': 'linux', 'kubernetes.io/arch': 'amd64' },
    },
    status: { allocatable: capacity, capacity },
  };
}

/** Brings up the whole local stack (idempotent: servers already running are left alone). */
export async function up(opts: UpOptions): Promise<StackInfo> {
  const print = opts.print ?? ((l: string) => console.log(l));
  const stateDir = resolve(opts.stateDir);
  const existing = await readStack(stateDir);
  await assertBuilt([...(opts.dataPlane || existing?.dataPlane ? ['data-plane' as const] : []), ...(opts.tracing || existing?.tracing ? ['tracing' as const] : [])]);
  await mkdir(join(stateDir, 'logs'), { recursive: true });
  const a = artifactPaths();
  let info: StackInfo;
  if (existing) {
    info = existing;
    assertDataPlaneChoice(info, opts.dataPlane);
    if (opts.tracing && !info.tracing) {
      throw new Error(`the stack in ${info.stateDir} was created without tracing (its API server and etcd export no spans); start it afresh with it: npm run stack -- down --purge && npm run stack -- up --tracing`);
    }
    if (!info.servers.prometheus) await addPrometheus(info);
  } else {
    const ports = await allocatePorts(opts.ports);
    const pki = await loadPki(join(stateDir, 'pki'));
    const kubeconfig = join(stateDir, 'kubeconfig');
    const apiserverUrl = `https://127.0.0.1:${ports.apiserver}`;
    await writeFile(kubeconfig, kubeconfigYaml({ ca: pki.caCertPem, cert: pki.adminCertPem, key: pki.adminKeyPem }, apiserverUrl), { mode: 0o600 });
    const headless = opts.headless ?? false;
    info = {
      stateDir, kubeconfig, apiserverUrl, ports, headless,
      temporalAddress: `127.0.0.1:${ports.temporal}`, temporalNamespace: 'default',
      temporalUiUrl: `http://127.0.0.1:${ports.temporalUi}`,
      prometheusUrl: `http://127.0.0.1:${ports.prometheus}`,
      servers: serverSpecs(a, pki, stateDir, ports, kubeconfig, headless),
    };
    if (opts.dataPlane) await addDataPlane(info, { freePorts: opts.ports !== undefined });
    if (opts.tracing) await addTracing(info, { freePorts: opts.ports !== undefined });
    await writeKwokConfig(a, stateDir, opts.podDelayMs ?? 300);
    await saveStack(info);
  }
  if (opts.codecEndpoint !== undefined) await pointUiAtCodecServer(info, opts.codecEndpoint, print);
  await writePrometheusConfig(stateDir, info.ports.prometheus);
  const t0 = Date.now();
  const signal = opts.signal;
  // The pod network comes first: the proxy must never run while pod addresses are unrouted.
  await ensurePodNetwork(info, print);
  // The trace backend before the servers that export to it.
  await startTracingBackend(info, print, signal);
  for (const name of serverNames) {
    // The demo starts before Prometheus is built (it builds it after its app runs); up adds it once it is.
    if (name === 'prometheus' && !(await fileExists(info.servers.prometheus.command))) {
      print(`  prometheus: not built yet, left out (npm run stack -- build; then up starts it)`);
      continue;
    }
    await startServer(info, name, print, signal);
  }

  const nodes = opts.nodes ?? 2;
  await prepareCluster(info, { nodes, podsPerNode: info.dataPlane ? nodePodCapacity(info.dataPlane, nodes) : podsPerNodeDefault, signal });
  await startDataPlane(info, print, signal);
  // Members after the hub: each registers with the hub's API server and its Temporal.
  const members = [...new Set([...((await readStack(stateDir))?.clusters ?? []), ...(opts.clusters ?? [])])];
  if (members.length) await addMemberClusters(info, members, { print, ...(signal ? { signal } : {}) });
  print(`stack up in ${((Date.now() - t0) / 1000).toFixed(1)} s`);
  return info;
}

/**
 * What a fresh control plane gets once its servers run: `nodes` kwok nodes (waited on until Ready), the default
 * StorageClass, and Istio's and the project's CRDs.
 */
export async function prepareCluster(info: Pick<StackInfo, 'kubeconfig'>, opts: { nodes: number; podsPerNode?: number; signal?: AbortSignal | undefined }): Promise<void> {
  const { nodes, signal } = opts;
  const podsPerNode = opts.podsPerNode ?? podsPerNodeDefault;
  await kubectl(info, ['apply', '--server-side', '--force-conflicts', '-f', '-'], Array.from({ length: nodes }, (_, i) => stringify(nodeManifest(i, podsPerNode))).join('---\n'), signal);
  await kubectl(info, ['wait', '--for=condition=Ready', 'node', '--all', '--timeout=120s'], undefined, signal);
  await kubectl(info, ['apply', '--server-side', '--force-conflicts', '-f', '-'], JSON.stringify(storageClassManifest), signal);
  await installCrds(info, signal);
  await installFinalizerPolicy(info, signal);
}

/**
 * The label of the namespaces where the stack's binding of the chart's finalizer policy applies (the policy puts the
 * operator's finalizer on Applications and Releases as they are created). Not every namespace: most tests start an
 * operator that watches only its own namespace, and some create Applications no operator ever watches, whose
 * deletion a finalizer would hold.
 */
export const finalizerPolicyLabel = { key: 'application-operator.test/finalizer-policy', value: 'bound' } as const;

/**
 * The chart's finalizer policy (deploy/admission/finalizer-policy.yaml, in the v1beta1 this Kubernetes serves) and a
 * binding of the stack's own, to the namespaces labelled finalizerPolicyLabel.
 */
export async function installFinalizerPolicy(info: Pick<StackInfo, 'kubeconfig'>, signal?: AbortSignal): Promise<void> {
  const apiVersion = 'admissionregistration.k8s.io/v1beta1';
  const [policy] = parseAllDocuments(await readFile(join(repoRoot, 'deploy', 'admission', 'finalizer-policy.yaml'), 'utf8')).map((d) => d.toJS() as { metadata: { name: string } });
  if (!policy) throw new Error('deploy/admission/finalizer-policy.yaml holds no policy');
  const binding = {
    apiVersion, kind: 'MutatingAdmissionPolicyBinding', metadata: { name: policy.metadata.name },
    spec: { policyName: policy.metadata.name, matchResources: { namespaceSelector: { matchLabels: { [finalizerPolicyLabel.key]: finalizerPolicyLabel.value } } } },
  };
  await kubectl(info, ['apply', '--server-side', '--force-conflicts', '-f', '-'], [{ ...policy, apiVersion }, binding].map((d) => stringify(d)).join('---\n'), signal);
}

/** The Temporal dev server's arguments with the UI pointed at a codec server ('' for none) instead of any earlier one. */
export function withUiCodecEndpoint(args: string[], endpoint: string): string[] {
  return [...args.filter((a) => !a.startsWith('--ui-codec-endpoint=')), ...(endpoint ? [`--ui-codec-endpoint=${endpoint}`] : [])];
}

/** Records the UI's codec endpoint; a running Temporal is stopped so that up() starts it again with it (same ports and database). */
async function pointUiAtCodecServer(info: StackInfo, endpoint: string, print: (l: string) => void): Promise<void> {
  const spec = info.servers.temporal;
  const args = withUiCodecEndpoint(spec.args, endpoint);
  if (args.join('\0') === spec.args.join('\0')) return;
  spec.args = args;
  if (endpoint) info.codecEndpoint = endpoint;
  else delete info.codecEndpoint;
  await saveStack(info);
  if (isOurs(spec.pid, spec.command)) {
    print(`  restarting temporal: the UI's codec endpoint is now ${endpoint || 'none'}`);
    await stopServer(info, 'temporal');
  }
}

/** A stack started before Prometheus joined it gets one, on the default port or (for a stack on free ports) a free one. */
async function addPrometheus(info: StackInfo): Promise<void> {
  info.ports.prometheus = info.ports.apiserver === defaultPorts.apiserver ? defaultPorts.prometheus : await freePort();
  info.prometheusUrl = `http://127.0.0.1:${info.ports.prometheus}`;
  info.servers.prometheus = prometheusSpec(artifactPaths(), info.stateDir, info.ports.prometheus);
  await saveStack(info);
}

/** Installs Istio's networking CRDs and the project's CRDs, and waits until they are Established. */
export async function installCrds(info: Pick<StackInfo, 'kubeconfig'>, signal?: AbortSignal): Promise<void> {
  const a = artifactPaths();
  // Istio's CRDs are too large for client-side apply's last-applied annotation.
  const out = await kubectl(info, ['apply', '--server-side', '--force-conflicts', '-f', a.istioCrds, '-f', join(repoRoot, 'crds'), '-o', 'name'], undefined, signal);
  const names = out.split('\n').map((l) => l.trim()).filter(Boolean);
  // `kubectl wait` fails outright on a CRD whose status is not written yet, so poll instead.
  await waitFor('CRDs Established', async () => {
    const list = JSON.parse(await kubectl(info, ['get', ...names, '-o', 'json'], undefined, signal)) as { items: { status?: { conditions?: { type: string; status: string }[] } }[] };
    return list.items.every((c) => c.status?.conditions?.some((x) => x.type === 'Established' && x.status === 'True'));
  }, { timeoutMs: 120_000, signal });
}

/** Stops every server this stack started, by pid, in reverse order. */
export async function down(stateDir: string, opts: { purge?: boolean } = {}): Promise<void> {
  const info = await readStack(resolve(stateDir));
  if (!info) return;
  // Members first: their servers live in this state folder too, and nothing of the hub's depends on them.
  await stopMemberClusters(info);
  await stopDataPlane(info);
  // A state file written before a server joined the stack has no entry for it.
  for (const name of [...serverNames].reverse()) if (info.servers[name]) await stopServer(info, name);
  await stopTracingBackend(info);
  if (opts.purge) await rm(resolve(stateDir), { recursive: true, force: true });
}

/** A server as `status` sees it: up (running and answering its health check), unhealthy (running, not answering: why), or stopped. */
export interface ServerStatus {
  name: ServerName;
  pid?: number;
  ports: number[];
  state: 'up' | 'unhealthy' | 'stopped';
  /** Why it is unhealthy, or that only its process could be checked. */
  detail?: string;
}

/** Each server's pid, ports and state: a running process is only `up` when it answers its health check. */
export async function status(stateDir: string): Promise<ServerStatus[] | null> {
  const info = await readStack(resolve(stateDir));
  if (!info) return null;
  const pki = await loadPki(pkiDirOf(info));
  // A member runs its control plane only; the hub lists every server, also one its state file has no entry for yet.
  const names: readonly ServerName[] = info.member ? controlPlaneServerNames : serverNames;
  return Promise.all(names.map(async (name): Promise<ServerStatus> => {
    const s = info.servers[name] as (typeof info.servers)[ServerName] | undefined;
    if (!s) return { name, ports: [], state: 'stopped' };
    const row = { name, ports: s.ports, ...(s.pid ? { pid: s.pid } : {}) };
    if (!isOurs(s.pid, s.command)) return { ...row, state: 'stopped' };
    if (!health[name].check) return { ...row, state: 'up', detail: 'no health endpoint: process alive' };
    const why = await unhealthy(info, name, pki);
    return why ? { ...row, state: 'unhealthy', detail: why } : { ...row, state: 'up' };
  }));
}

/** Shell lines to export so kubectl, the operator and the tests use this stack. */
export function envLines(info: StackInfo): string {
  return [
    `export KUBECONFIG=${info.kubeconfig}`,
    `export TEMPORAL_ADDRESS=${info.temporalAddress}`,
    `export TEMPORAL_NAMESPACE=${info.temporalNamespace}`,
    `export TEMPORAL_UI_URL=${info.temporalUiUrl}`,
    `export PROMETHEUS_ADDRESS=${info.prometheusUrl}`,
    `export STACK_STATE_DIR=${info.stateDir}`,
    ...dataPlaneEnvLines(info),
    ...tracingEnvLines(info),
    // kubectl, the temporal CLI, helm, and the kubectl-app plugin, so the README's commands work in a fresh shell.
    `export PATH="${toolDirs().join(':')}:$PATH"`,
  ].join('\n');
}

/** The folders of the cached client tools and of the project's own commands. */
export function toolDirs(): string[] {
  const a = artifactPaths();
  return [dirname(a.kubectl), dirname(a.temporal), dirname(a.helm), join(repoRoot, 'bin')];
}
