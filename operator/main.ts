import { Runtime, Worker, makeTelemetryFilterString, type Logger as SdkLogger, type LogLevel, type LogMetadata } from '@temporalio/worker';
import type { Connection } from '@temporalio/client';
import proto from '@temporalio/proto';
import { readFile } from 'node:fs/promises';
import { setTimeout as sleep } from 'node:timers/promises';
import type { Server } from 'node:http';
import { fileURLToPath } from 'node:url';
import { createActivities } from '../activities/index.ts';
import { Kube } from '../kube/client.ts';
import { loadKubeconfig, NoCurrentCluster, type KubeCredentials } from '../kube/config.ts';
import { Watcher } from '../watcher/watcher.ts';
import { searchAttributeKeys } from '../workflows/search-attributes.ts';
import type { OperatorConfig } from './config.ts';
import { createLogger, type Logger } from './log.ts';
import { createMetrics } from './metrics.ts';
import { startHttpServer } from './server.ts';
import { electorFor, runWhileLeader } from './leader.ts';
import { connectClient, connectWorker, dataConverterFor } from './temporal.ts';
import { freePort } from '../lib/net.ts';
import { runtimeEnv, runtimeTuned, tuneHeap } from './runtime.ts';

/** A running operator: watcher and/or worker, and its HTTP endpoints. */
export interface RunningOperator {
  done: Promise<void>;
  stop(): Promise<void>;
  server: Server;
}

/** The kubeconfig, or an error that names the file and what to fix. */
export async function loadKubeConfig(cfg: Pick<OperatorConfig, 'kubeconfig'>): Promise<KubeCredentials> {
  const from = cfg.kubeconfig ? `kubeconfig ${cfg.kubeconfig}` : 'the default kubeconfig (KUBECONFIG, ~/.kube/config, or the in-cluster service account)';
  const fix = 'Point --kubeconfig (or KUBECONFIG) at a valid kubeconfig, or run in a cluster.';
  try {
    return await loadKubeconfig(cfg.kubeconfig);
  } catch (err) {
    if (err instanceof NoCurrentCluster) throw new Error(`${from} names no current cluster (current-context "${err.currentContext}"). ${fix}`, { cause: err });
    throw new Error(`could not load ${from}: ${(err as Error).message}. ${fix}`, { cause: err });
  }
}

/**
 * Connects to Temporal, trying again with backoff (1 s to 30 s) and a log line per failed attempt that names the
 * address and the cause, until it works or the operator stops. `waiting` tells /readyz what it waits for.
 */
async function connectWithRetry<T>(cfg: OperatorConfig, log: Logger, what: string, connect: () => Promise<T>, waiting: (s: string | undefined) => void, stopped: () => boolean): Promise<T> {
  for (let attempt = 1, delayMs = 1000; ; attempt++, delayMs = Math.min(delayMs * 2, 30_000)) {
    try {
      const out = await connect();
      waiting(undefined);
      if (attempt > 1) log.info({ address: cfg.temporalAddress, attempts: attempt }, `${what}: connected to Temporal`);
      return out;
    } catch (err) {
      if (stopped()) throw err;
      const cause = err instanceof Error ? err.message : String(err);
      const text = `${what}: cannot reach Temporal at ${cfg.temporalAddress} (namespace ${cfg.temporalNamespace}): ${cause}`;
      waiting(`${text} (attempt ${attempt})`);
      log.warn({ address: cfg.temporalAddress, namespace: cfg.temporalNamespace, attempt, retryInMs: delayMs, err: cause },
        `${text}; check --temporal-address, the TLS or API key settings, and that the frontend is reachable from here; trying again in ${delayMs / 1000} s`);
      await sleep(delayMs);
    }
  }
}

/** Routes the Temporal SDK's own logs through our JSON logger. */
function sdkLogger(log: Logger): SdkLogger {
  const at = (level: 'trace' | 'debug' | 'info' | 'warn' | 'error') => (message: string, meta?: LogMetadata) => log[level](meta ?? {}, message);
  return {
    log: (level: LogLevel, message: string, meta?: LogMetadata) => log[level.toLowerCase() as 'info'](meta ?? {}, message),
    trace: at('trace'), debug: at('debug'), info: at('info'), warn: at('warn'), error: at('error'),
  };
}

async function registerSearchAttributes(cfg: OperatorConfig, log: Logger, connection: Connection): Promise<void> {
  try {
    const { customAttributes } = await connection.operatorService.listSearchAttributes({ namespace: cfg.temporalNamespace });
    const missing = searchAttributeKeys.filter((k) => !(k.name in (customAttributes ?? {})));
    if (missing.length === 0) return;
    await connection.operatorService.addSearchAttributes({
      namespace: cfg.temporalNamespace,
      searchAttributes: Object.fromEntries(missing.map((k) => [k.name, proto.temporal.api.enums.v1.IndexedValueType.INDEXED_VALUE_TYPE_KEYWORD])),
    });
    log.info({ added: missing.map((k) => k.name) }, 'registered search attributes');
  } catch (err) {
    // Temporal Cloud registers them through its own control plane; say what to do and carry on.
    log.warn({ err: (err as Error).message }, 'could not register search attributes AppNamespace/AppName/AppPhase (Keyword); register them on the namespace, or the UI cannot filter by them');
  }
}

/** Starts the operator as configured; resolves once it is running. */
export async function runOperator(cfg: OperatorConfig): Promise<RunningOperator> {
  const log = createLogger(cfg.logLevel);
  tuneHeap();
  if (!runtimeTuned()) {
    log.warn({ want: runtimeEnv }, 'started without the memory settings the container image uses (NODE_OPTIONS, MALLOC_ARENA_MAX): expect a higher peak memory than docs/benchmark.md reports');
  }
  const metrics = createMetrics();
  const kc = await loadKubeConfig(cfg);
  // One client (one connection pool) for the activities, the watcher and leader election.
  const kube = new Kube(kc);
  const stops: (() => Promise<void>)[] = [];
  const runs: Promise<void>[] = [];
  let watcher: Watcher | undefined;
  let worker: Worker | undefined;
  /** What start-up still waits for (Temporal unreachable...), for /readyz. */
  let waitingFor: string | undefined;
  /** A replica waiting for the Lease: its watcher is not needed to be ready. */
  let standby = false;
  let stopping: Promise<void> | undefined;
  metrics.readWatcher(() => watcher);
  const retrying = <T>(what: string, connect: () => Promise<T>) =>
    connectWithRetry(cfg, log, what, connect, (w) => { waitingFor = w; }, () => stopping !== undefined);

  let workerMetricsUrl: string | undefined;
  if (cfg.mode !== 'watcher') {
    const port = await freePort();
    workerMetricsUrl = `http://127.0.0.1:${port}/metrics`;
    Runtime.install({
      logger: sdkLogger(log.child({ module: 'temporal-sdk' })),
      telemetryOptions: {
        logging: { filter: makeTelemetryFilterString({ core: 'WARN' }), forward: {} },
        metrics: { prometheus: { bindAddress: `127.0.0.1:${port}` } },
      },
    });
  }

  const server = await startHttpServer(cfg.metricsAddr, metrics.registry, {
    healthz: () => ({ ok: true, detail: 'ok' }),
    readyz: () => {
      const problems: string[] = waitingFor ? [waitingFor] : [];
      // A standby replica (not the leader) is ready: its worker serves, its watcher waits for the Lease.
      if (cfg.mode !== 'worker' && !standby && !watcher?.synced) problems.push('watcher not synced');
      if (worker && worker.getState() !== 'RUNNING') problems.push(`worker ${worker.getState()}`);
      return { ok: problems.length === 0, detail: problems.join(', ') || 'ready' };
    },
  }, workerMetricsUrl);
  log.info({ addr: cfg.metricsAddr }, 'serving /metrics, /healthz, /readyz');

  if (cfg.registerSearchAttributes) {
    const { connection } = await retrying('registering search attributes', () => connectClient(cfg));
    await registerSearchAttributes(cfg, log, connection).finally(() => connection.close());
  }

  if (cfg.mode !== 'watcher') {
    const connection = await retrying('worker', () => connectWorker(cfg));
    const activities = createActivities({
      kube, temporalNamespace: cfg.temporalNamespace, metrics, log,
      ...(cfg.temporalUiUrl ? { temporalUiUrl: cfg.temporalUiUrl } : {}),
      ...(cfg.prometheusAddress ? { prometheusAddress: cfg.prometheusAddress } : {}),
    });
    const workflowSource = cfg.workflowBundle
      ? { workflowBundle: { code: await readFile(cfg.workflowBundle, 'utf8') } }
      : { workflowsPath: fileURLToPath(new URL('../workflows/index.ts', import.meta.url)) };
    worker = await Worker.create({
      connection, namespace: cfg.temporalNamespace, taskQueue: cfg.taskQueue, activities, ...workflowSource,
      maxConcurrentActivityTaskExecutions: cfg.maxConcurrentActivities,
      maxConcurrentWorkflowTaskExecutions: cfg.maxConcurrentWorkflowTasks,
      dataConverter: await dataConverterFor(cfg),
      maxCachedWorkflows: cfg.maxCachedWorkflows,
      shutdownGraceTime: '10s',
    });
    const w = worker;
    runs.push(w.run().finally(() => connection.close()));
    stops.push(async () => {
      if (w.getState() === 'RUNNING') w.shutdown();
      await runs[0]?.catch(() => undefined);
    });
    log.info({ taskQueue: cfg.taskQueue, namespace: cfg.temporalNamespace }, 'worker started');
  }

  const startWatcher = async (): Promise<() => Promise<void>> => {
    const { client, connection } = await retrying('watcher', () => connectClient(cfg));
    const wt = new Watcher({
      kube, temporal: client, taskQueue: cfg.taskQueue, namespaces: cfg.namespaces, log: log.child({ module: 'watcher' }),
      coalesceMs: cfg.coalesceMs,
      loopOptions: { progressRecheckSeconds: cfg.progressRecheckSeconds, resyncSeconds: cfg.resyncSeconds },
      releaseOptions: { pollSeconds: cfg.releasePollSeconds },
      onSignal: (reason, ok) => metrics.signals.inc({ reason, result: ok ? 'ok' : 'error' }),
      sweepSeconds: cfg.sweepSeconds,
      onSweep: (found) => {
        metrics.sweepFindings.inc({ kind: 'missing-workflow' }, found.missing.length);
        metrics.sweepFindings.inc({ kind: 'ended-rollout' }, found.endedRollouts);
      },
    });
    watcher = wt;
    await wt.start();
    log.info({ namespaces: cfg.namespaces.length ? cfg.namespaces : 'all' }, 'watcher started');
    return async () => {
      await wt.stop();
      await connection.close();
      if (watcher === wt) watcher = undefined;
      log.info('watcher stopped');
    };
  };

  if (cfg.mode !== 'worker') {
    if (cfg.leaderElect) {
      // Every replica runs a worker; only the Lease holder watches, so each event becomes one signal.
      standby = true;
      const elector = electorFor(cfg, kube, log.child({ module: 'leader-election' }));
      const leading = runWhileLeader(elector, async () => {
        const stop = await startWatcher();
        standby = false;
        return async () => {
          standby = true;
          await stop();
        };
      }, log);
      stops.push(() => leading.stop());
    } else {
      const stop = await startWatcher();
      stops.push(stop);
    }
  }


  const stop = () => {
    stopping ??= (async () => {
      for (const s of stops.reverse()) await s();
      await new Promise<void>((r) => server.close(() => r()));
    })();
    return stopping;
  };
  const done = Promise.all(runs).then(() => undefined);
  return { done, stop, server };
}
