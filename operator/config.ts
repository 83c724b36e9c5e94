import { Command, Option } from 'commander';
import { parseHostAllowlist, type HostPattern } from '../reconcile/checks.ts';
import { NOTIFICATION_FORMATS, type NotificationFormat } from '../api/application.ts';
import type { PlanNotification } from '../reconcile/notify.ts';
import { DEFAULT_CLUSTERS_NAMESPACE } from '../api/constants.ts';

/**
 * What a client of the operator's workflows needs (the CLI's promote, status, history...): the Temporal connection,
 * the payload keys, and the kubeconfig (who is asking, the default namespace).
 */
export type ClientConfig = Pick<OperatorConfig,
  'kubeconfig' | 'temporalAddress' | 'temporalNamespace' | 'temporalTlsCert' | 'temporalTlsKey' | 'temporalTlsCa' | 'temporalTlsServerName'
  | 'temporalApiKey' | 'payloadEncryptionKeyFile'>;

/** Everything the operator process is configured with (flags, each with an environment variable). */
export interface OperatorConfig {
  kubeconfig?: string;
  temporalAddress: string;
  temporalNamespace: string;
  taskQueue: string;
  temporalTlsCert?: string;
  temporalTlsKey?: string;
  temporalTlsCa?: string;
  temporalTlsServerName?: string;
  temporalApiKey?: string;
  temporalUiUrl?: string;
  namespaces: string[];
  mode: 'all' | 'watcher' | 'worker';
  workflowBundle?: string;
  metricsAddr: string;
  logLevel: string;
  maxConcurrentActivities: number;
  maxConcurrentWorkflowTasks: number;
  maxCachedWorkflows: number;
  /**
   * A call into workflow code running longer fails /healthz (operator/sandbox-calls.ts); 0: every call carries the
   * Temporal SDK's own deadline instead, a watchdog thread per call.
   */
  stuckWorkflowSeconds: number;
  /**
   * Keep a stack trace of every promise workflow code creates, for the `__stack_trace` query (the Temporal UI's
   * "Stack Trace" tab); off by default, a third of the workflow thread's CPU (operator/sandbox-calls.ts).
   */
  workflowStackTraces: boolean;
  progressRecheckSeconds: number;
  releasePollSeconds: number;
  resyncSeconds: number;
  refusedRetrySeconds: number;
  coalesceMs: number;
  /** How often the watcher checks Temporal for lost workflows and rollouts closed without finishing (0: never). */
  sweepSeconds: number;
  registerSearchAttributes: boolean;
  /** Run the watcher only while holding a coordination.k8s.io Lease (workers run on every replica). */
  leaderElect: boolean;
  leaseName: string;
  leaseNamespace: string;
  leaseDurationSeconds: number;
  leaseRenewDeadlineSeconds: number;
  leaseRetryPeriodSeconds: number;
  /** After SIGTERM or SIGINT, how long stopping may take before the process exits anyway (with code 1). */
  shutdownTimeoutSeconds: number;
  /** File of AES-256 keys for the payload codec, current key first (off when neither this nor PAYLOAD_ENCRYPTION_KEY is set). */
  payloadEncryptionKeyFile?: string;
  /** The Prometheus canary analysis asks, unless an Application names its own. */
  prometheusAddress?: string;
  /** The hosts HTTP checks and an Application's analysis.prometheusAddress may call; empty: any. */
  checkAllowedHosts: HostPattern[];
  /** The operator's default receiver of every rollout's notifications (--notify-url, --notify-format). */
  notifyDefault?: PlanNotification;
  /** An OTLP/HTTP endpoint for traces (else the OTEL_* variables decide; operator/tracing.ts). */
  otlpEndpoint?: string;
  /** Where member clusters are registered (Secrets labelled myapp.example.com/cluster; kube/clusters.ts). */
  clustersNamespace: string;
  /** How often the leader probes the member clusters and writes their health on their Secrets (0: never). */
  clusterProbeSeconds: number;
}

// Whole digits only: parseInt read "1e3" as 1 and "0.5" as 0, a flag quietly set to something else than was asked.
export const int = (v: string): number => {
  const n = Number(v.trim());
  if (!/^\d+$/.test(v.trim()) || !Number.isSafeInteger(n)) throw new Error(`not a non-negative integer: ${v}`);
  return n;
};

const bool = (v: string) => {
  if (/^(true|1|yes)$/i.test(v)) return true;
  if (/^(false|0|no)$/i.test(v)) return false;
  throw new Error(`not a boolean: ${v}`);
};

/** Adds a client's options to a commander command: the Temporal connection, the payload keys, the kubeconfig. */
export function withClientOptions(cmd: Command): Command {
  const options = [
    new Option('--kubeconfig <path>', 'kubeconfig file (default: $KUBECONFIG, ~/.kube/config, then in-cluster)').env('KUBECONFIG'),
    new Option('--temporal-address <host:port>', 'Temporal frontend address').env('TEMPORAL_ADDRESS').default('localhost:7233'),
    new Option('--temporal-namespace <ns>', 'Temporal namespace').env('TEMPORAL_NAMESPACE').default('default'),
    new Option('--temporal-tls-cert <path>', 'client certificate for mTLS').env('TEMPORAL_TLS_CERT'),
    new Option('--temporal-tls-key <path>', 'client key for mTLS').env('TEMPORAL_TLS_KEY'),
    new Option('--temporal-tls-ca <path>', 'CA that signed the Temporal server certificate').env('TEMPORAL_TLS_CA'),
    new Option('--temporal-tls-server-name <name>', 'TLS server name override').env('TEMPORAL_TLS_SERVER_NAME'),
    new Option('--temporal-api-key <key>', 'API key (Temporal Cloud); implies TLS').env('TEMPORAL_API_KEY'),
    payloadKeyFileOption(),
  ];
  // Apart in --help: a client command's own flags come first.
  for (const o of options) cmd.addOption(o.helpGroup('Connection:'));
  return cmd;
}

/** Adds the operator's options to a commander command: a client's, and what the operator process alone needs. */
export function withOperatorOptions(cmd: Command): Command {
  return withClientOptions(cmd)
    .addOption(new Option('--task-queue <name>', 'Temporal task queue shared by watcher and workers').env('TASK_QUEUE').default('application-operator'))
    .addOption(new Option('--temporal-ui-url <url>', 'Temporal UI base URL, linked from each Application status').env('TEMPORAL_UI_URL'))
    .addOption(new Option('--namespaces <list>', 'comma-separated namespaces to watch (default: all)').env('WATCH_NAMESPACES').default(''))
    .addOption(new Option('--mode <mode>', 'run the watcher, a worker, or both').choices(['all', 'watcher', 'worker']).env('OPERATOR_MODE').default('all'))
    .addOption(new Option('--workflow-bundle <path>', 'prebuilt workflow bundle (default: bundle at start)').env('WORKFLOW_BUNDLE_PATH'))
    .addOption(new Option('--metrics-addr <host:port>', 'address of /metrics, /healthz and /readyz').env('METRICS_ADDR').default('127.0.0.1:9464'))
    .addOption(new Option('--log-level <level>', 'trace, debug, info, warn or error').env('LOG_LEVEL').default('info'))
    .addOption(new Option('--max-concurrent-activities <n>', 'reconciles running at once per worker').env('MAX_CONCURRENT_ACTIVITIES').argParser(int).default(10))
    .addOption(new Option('--max-concurrent-workflow-tasks <n>', 'workflow tasks at once per worker').env('MAX_CONCURRENT_WORKFLOW_TASKS').argParser(int).default(20))
    .addOption(new Option('--max-cached-workflows <n>', 'workflows kept in memory between tasks (memory bound; evicted ones replay their history)').env('MAX_CACHED_WORKFLOWS').argParser(int).default(200))
    .addOption(new Option('--stuck-workflow-seconds <s>', 'a call into workflow code still running after this long fails /healthz (an endless loop holds the workflow thread); 0: the Temporal SDK\'s own per-call deadline instead, which starts a watchdog thread for every call').env('STUCK_WORKFLOW_SECONDS').argParser(int).default(5))
    .addOption(new Option('--workflow-stack-traces [bool]', 'keep a stack trace of every promise in workflow code, so that the Temporal UI\'s Stack Trace tab (the __stack_trace query) shows where each workflow waits; costs about a third of the workflow thread\'s CPU').env('WORKFLOW_STACK_TRACES').argParser(bool).default(false))
    .addOption(new Option('--progress-recheck-seconds <s>', 're-check a rollout in progress this often besides events').env('PROGRESS_RECHECK_SECONDS').argParser(int).default(30))
    .addOption(new Option('--release-poll-seconds <s>', 'a running Release looks at its Applications this often besides the watcher\'s signals').env('RELEASE_POLL_SECONDS').argParser(int).default(30))
    .addOption(new Option('--resync-seconds <s>', 're-apply converged apps this often (0: only on events)').env('RESYNC_SECONDS').argParser(int).default(0))
    .addOption(new Option('--refused-retry-seconds <s>', 'apply a child the API server refused (admission, quota, missing CRD) again after this long, doubling to ten times as long (0: only on a change of the Application, which always tries at once)').env('REFUSED_RETRY_SECONDS').argParser(int).default(30))
    .addOption(new Option('--sweep-seconds <s>', 'check Temporal this often for Applications and Releases whose workflow is gone (restarted), workflows whose object is gone (told, so that they end) and rollouts whose workflow closed without finishing (rolled back); 0: never').env('SWEEP_SECONDS').argParser(int).default(30))
    .addOption(new Option('--coalesce-ms <ms>', 'an app\'s first event is signalled at once; later ones within this window of a signal become one more').env('COALESCE_MS').argParser(int).default(300))
    .addOption(new Option('--no-register-search-attributes', 'do not register the AppNamespace/AppName/AppPhase search attributes at start'))
    .addOption(new Option('--leader-elect [bool]', 'run the watcher only on the replica holding the Lease (workers run everywhere)').env('LEADER_ELECT').argParser(bool).default(false))
    .addOption(new Option('--lease-name <name>', 'name of the leader-election Lease').env('LEASE_NAME').default('application-operator-leader'))
    .addOption(new Option('--lease-namespace <ns>', 'namespace of the leader-election Lease (default: $POD_NAMESPACE, else default)').env('LEASE_NAMESPACE'))
    .addOption(new Option('--lease-duration-seconds <s>', 'how long a Lease holds without renewal before another replica may take it').env('LEASE_DURATION_SECONDS').argParser(int).default(15))
    .addOption(new Option('--lease-renew-deadline-seconds <s>', 'the leader gives up leading when it could not renew for this long').env('LEASE_RENEW_DEADLINE_SECONDS').argParser(int).default(10))
    .addOption(new Option('--lease-retry-period-seconds <s>', 'how often to try to acquire or renew the Lease').env('LEASE_RETRY_PERIOD_SECONDS').argParser(int).default(2))
    .addOption(new Option('--shutdown-timeout-seconds <s>', 'after SIGTERM or SIGINT, exit (with code 1) if stopping takes longer than this; keep it under the pod\'s terminationGracePeriodSeconds').env('SHUTDOWN_TIMEOUT_SECONDS').argParser(int).default(20))
    .addOption(new Option('--prometheus-address <url>', 'Prometheus that canary analysis queries (an Application may name its own in analysis.prometheusAddress)').env('PROMETHEUS_ADDRESS'))
    .addOption(new Option('--check-allowed-hosts <list>', 'comma-separated hosts (name, IP or *.suffix, optionally :port, or a CIDR range such as 10.0.0.0/8) that HTTP checks and an Application\'s analysis.prometheusAddress may call; empty: any').env('CHECK_ALLOWED_HOSTS').default(''))
    .addOption(new Option('--notify-url <url>', 'where every rollout\'s notifications also go (an Application adds its own in spec.notifications); --check-allowed-hosts applies').env('NOTIFY_URL'))
    .addOption(new Option('--notify-format <format>', 'what --notify-url receives: json, slack or teams').env('NOTIFY_FORMAT').choices(NOTIFICATION_FORMATS).default('json'))
    .addOption(new Option('--clusters-namespace <ns>', `namespace of the Secrets that register member clusters for fleet Releases (default: $POD_NAMESPACE, else ${DEFAULT_CLUSTERS_NAMESPACE})`).env('CLUSTERS_NAMESPACE'))
    .addOption(new Option('--cluster-probe-seconds <s>', 'probe the member clusters this often and write their health on their Secrets (0: never)').env('CLUSTER_PROBE_SECONDS').argParser(int).default(30))
    .addOption(new Option('--otlp-endpoint <url>', 'send traces over OTLP/HTTP to this base URL (e.g. http://jaeger:4318); the OTEL_* variables work too (OTEL_EXPORTER_OTLP_ENDPOINT, OTEL_SERVICE_NAME, OTEL_SDK_DISABLED...); off when neither is set'));
}

/** The payload codec's key file option, shared by every command that encrypts or decrypts payloads. */
export function payloadKeyFileOption(): Option {
  return new Option('--payload-encryption-key-file <path>', 'AES-256-GCM keys (base64, one per line, current first) that encrypt workflow payloads; or set PAYLOAD_ENCRYPTION_KEY').env('PAYLOAD_ENCRYPTION_KEY_FILE');
}

const stringOption = (opts: Record<string, unknown>, k: string) => (typeof opts[k] === 'string' && opts[k] !== '' ? (opts[k]) : undefined);

/** The parsed options of a command built with withClientOptions. */
export function clientConfig(opts: Record<string, unknown>): ClientConfig {
  const cfg: ClientConfig = {
    temporalAddress: stringOption(opts, 'temporalAddress') ?? 'localhost:7233',
    temporalNamespace: stringOption(opts, 'temporalNamespace') ?? 'default',
  };
  for (const k of ['kubeconfig', 'temporalTlsCert', 'temporalTlsKey', 'temporalTlsCa', 'temporalTlsServerName', 'temporalApiKey', 'payloadEncryptionKeyFile'] as const) {
    const v = stringOption(opts, k);
    if (v) cfg[k] = v;
  }
  if (Boolean(cfg.temporalTlsCert) !== Boolean(cfg.temporalTlsKey)) throw new Error('--temporal-tls-cert and --temporal-tls-key go together');
  return cfg;
}

/** The parsed options of a command built with withOperatorOptions. */
export function operatorConfig(opts: Record<string, unknown>): OperatorConfig {
  const str = (k: string) => stringOption(opts, k);
  const cfg: OperatorConfig = {
    ...clientConfig(opts),
    taskQueue: str('taskQueue') ?? 'application-operator',
    namespaces: (str('namespaces') ?? '').split(',').map((s) => s.trim()).filter(Boolean),
    mode: (str('mode') ?? 'all') as OperatorConfig['mode'],
    metricsAddr: str('metricsAddr') ?? '127.0.0.1:9464',
    logLevel: str('logLevel') ?? 'info',
    maxConcurrentActivities: opts['maxConcurrentActivities'] as number,
    maxConcurrentWorkflowTasks: opts['maxConcurrentWorkflowTasks'] as number,
    maxCachedWorkflows: (opts['maxCachedWorkflows'] as number | undefined) ?? 200,
    stuckWorkflowSeconds: (opts['stuckWorkflowSeconds'] as number | undefined) ?? 5,
    workflowStackTraces: opts['workflowStackTraces'] === true,
    progressRecheckSeconds: opts['progressRecheckSeconds'] as number,
    releasePollSeconds: (opts['releasePollSeconds'] as number | undefined) ?? 30,
    resyncSeconds: opts['resyncSeconds'] as number,
    refusedRetrySeconds: (opts['refusedRetrySeconds'] as number | undefined) ?? 30,
    coalesceMs: opts['coalesceMs'] as number,
    sweepSeconds: (opts['sweepSeconds'] as number | undefined) ?? 30,
    registerSearchAttributes: opts['registerSearchAttributes'] !== false,
    leaderElect: opts['leaderElect'] === true,
    leaseName: str('leaseName') ?? 'application-operator-leader',
    leaseNamespace: str('leaseNamespace') ?? (process.env['POD_NAMESPACE'] || 'default'),
    leaseDurationSeconds: (opts['leaseDurationSeconds'] as number | undefined) ?? 15,
    leaseRenewDeadlineSeconds: (opts['leaseRenewDeadlineSeconds'] as number | undefined) ?? 10,
    leaseRetryPeriodSeconds: (opts['leaseRetryPeriodSeconds'] as number | undefined) ?? 2,
    shutdownTimeoutSeconds: (opts['shutdownTimeoutSeconds'] as number | undefined) ?? 20,
    checkAllowedHosts: parseHostAllowlist(str('checkAllowedHosts') ?? ''),
    clustersNamespace: str('clustersNamespace') ?? (process.env['POD_NAMESPACE'] || DEFAULT_CLUSTERS_NAMESPACE),
    clusterProbeSeconds: (opts['clusterProbeSeconds'] as number | undefined) ?? 30,
  };
  const notifyUrl = str('notifyUrl');
  if (notifyUrl) {
    if (!/^https?:\/\/[^/\s]+(\/[^\s]*)?$/.test(notifyUrl)) throw new Error(`--notify-url must be an http or https URL: ${notifyUrl}`);
    cfg.notifyDefault = { name: 'operator-default', url: notifyUrl, format: (str('notifyFormat') ?? 'json') as NotificationFormat };
  }
  for (const k of ['temporalUiUrl', 'workflowBundle', 'prometheusAddress', 'otlpEndpoint'] as const) {
    const v = str(k);
    if (v) cfg[k] = v;
  }
  // As in client-go: the leader must give up before its Lease can expire, and retry several times before that.
  if (cfg.leaderElect && !(cfg.leaseRetryPeriodSeconds < cfg.leaseRenewDeadlineSeconds && cfg.leaseRenewDeadlineSeconds < cfg.leaseDurationSeconds)) {
    throw new Error('leader election needs --lease-retry-period-seconds < --lease-renew-deadline-seconds < --lease-duration-seconds');
  }
  return cfg;
}
