import { Runtime, Worker, makeTelemetryFilterString, type Logger as SdkLogger, type LogLevel, type LogMetadata, type NativeConnection } from '@temporalio/worker';
import type { Connection } from '@temporalio/client';
import proto from '@temporalio/proto';
import { readFile } from 'node:fs/promises';
import { setTimeout as sleep } from 'node:timers/promises';
import type { Server } from 'node:http';
import { fileURLToPath } from 'node:url';
import { createActivities } from '../activities/index.ts';
import { keptKinds } from '../activities/objects.ts';
import { Kube } from '../kube/client.ts';
import { MemberClusters } from '../kube/clusters.ts';
import { RecentObjects } from '../kube/recent.ts';
import { loadKubeconfig, NoCurrentCluster, type KubeCredentials } from '../kube/config.ts';
import { Watcher } from '../watcher/watcher.ts';
import { searchAttributeKeys } from '../workflows/search-attributes.ts';
import type { OperatorConfig } from './config.ts';
import { createLogger, type Logger } from './log.ts';
import { createMetrics } from './metrics.ts';
import { startHttpServer } from './server.ts';
import { electorFor, runWhileLeader } from './leader.ts';
import { clientOver, connectClient, connectWorker, dataConverterFor } from './temporal.ts';
import { probeLoop, temporalSignaller } from './fleet.ts';
import { startTracing, tracingConfig } from './tracing.ts';
import { freePort } from '../lib/net.ts';
import { runtimeEnv, runtimeTuned, tuneHeap } from './runtime.ts';
import { skipPromiseStacks, watchCalls } from './sandbox-calls.ts';
import { bundleWorkflows, sharedWorkflowModules, workflowsIndex } from './workflow-bundle.ts';

/** A running operator: watcher and/or worker, and its HTTP endpoints. */
export interface RunningOperator {
  /** Resolves once the operator has stopped; rejects when its worker failed on its own (the rest is stopped first). */
  done: Promise<void>;
  stop(): Promise<void>;
  server: Server;
}

/** Thrown by runOperator when it was told to stop before it had finished starting. */
export class StoppedWhileStarting extends Error {
  constructor(what: string) {
    super(`stopped while ${what}`);
    this.name = 'StoppedWhileStarting';
  }
}

/** What the operator is stopping right now, for the log line of a stop that outlasts its deadline. */
export interface StopProgress {
  step?: string;
}

export interface RunOptions {
  /** Stops the operator, in any phase: while it connects, while it waits for the Lease, while it runs. */
  signal?: AbortSignal;
  progress?: StopProgress;
  log?: Logger;
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
 * address and the cause, until it works or `signal` stops the operator: then at once, even while an attempt hangs
 * (a connection that comes too late is closed). `waiting` tells /readyz what it waits for.
 */
async function connectWithRetry<T>(
  cfg: OperatorConfig, log: Logger, what: string, connect: () => Promise<T>, discard: (late: T) => Promise<unknown>,
  waiting: (s: string | undefined) => void, signal: AbortSignal,
): Promise<T> {
  waiting(`${what}: connecting to Temporal at ${cfg.temporalAddress}`);
  for (let attempt = 1, delayMs = 1000; ; attempt++, delayMs = Math.min(delayMs * 2, 30_000)) {
    try {
      const out = await unlessAborted(connect(), signal, discard, `${what}: connecting to Temporal`);
      waiting(undefined);
      if (attempt > 1) log.info({ address: cfg.temporalAddress, attempts: attempt }, `${what}: connected to Temporal`);
      return out;
    } catch (err) {
      if (signal.aborted) throw err instanceof StoppedWhileStarting ? err : new StoppedWhileStarting(`${what}: connecting to Temporal`);
      const cause = err instanceof Error ? err.message : String(err);
      const text = `${what}: cannot reach Temporal at ${cfg.temporalAddress} (namespace ${cfg.temporalNamespace}): ${cause}`;
      waiting(`${text} (attempt ${attempt})`);
      log.warn({ address: cfg.temporalAddress, namespace: cfg.temporalNamespace, attempt, retryInMs: delayMs, err: cause },
        `${text}; check --temporal-address, the TLS or API key settings, and that the frontend is reachable from here; trying again in ${delayMs / 1000} s`);
      await sleep(delayMs, undefined, { signal }).catch(() => undefined);
    }
  }
}

/**
 * The promise's value, unless `signal` aborts first: then a StoppedWhileStarting at once, and the value, should it
 * still come, goes to `discard` (a connection attempt cannot be cancelled, only closed once it succeeds).
 */
function unlessAborted<T>(promise: Promise<T>, signal: AbortSignal, discard: (late: T) => Promise<unknown>, what: string): Promise<T> {
  return new Promise<T>((resolve, reject) => {
    const onAbort = () => {
      promise.then(discard).catch(() => undefined);
      reject(new StoppedWhileStarting(what));
    };
    if (signal.aborted) {
      onAbort();
      return;
    }
    signal.addEventListener('abort', onAbort, { once: true });
    promise.then((v) => {
      signal.removeEventListener('abort', onAbort);
      resolve(v);
    }, (err: unknown) => {
      signal.removeEventListener('abort', onAbort);
      reject(err instanceof Error ? err : new Error(String(err)));
    });
  });
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

/**
 * Starts the operator as configured; resolves once it is running. Aborting `opts.signal` stops it in any phase:
 * before it runs, runOperator then stops what it had started and rejects with StoppedWhileStarting.
 */
export async function runOperator(cfg: OperatorConfig, opts: RunOptions = {}): Promise<RunningOperator> {
  const log = opts.log ?? createLogger(cfg.logLevel);
  const progress = opts.progress ?? {};
  tuneHeap();
  if (!runtimeTuned()) {
    log.warn({ want: runtimeEnv }, 'started without the memory settings the container image uses (NODE_OPTIONS, MALLOC_ARENA_MAX): expect a higher peak memory than docs/benchmark.md reports');
  }
  const metrics = createMetrics();
  // Set up before the Temporal worker starts its workflow thread, which finds it there (operator/sandbox-calls.ts).
  const calls = cfg.mode !== 'watcher' && cfg.stuckWorkflowSeconds > 0 ? watchCalls(cfg.stuckWorkflowSeconds * 1000) : undefined;
  const stacks = cfg.mode !== 'watcher' && !cfg.workflowStackTraces ? skipPromiseStacks() : undefined;
  let stuckSaid = false;
  /** A call into workflow code past its deadline, said in the log once per call. */
  const stuck = (): string | undefined => {
    const detail = calls?.stuck();
    if (detail && !stuckSaid) log.error({ stuckWorkflowSeconds: cfg.stuckWorkflowSeconds }, detail);
    stuckSaid = detail !== undefined;
    return detail;
  };
  // Tracing first, so every span of start-up on has a provider; off unless configured (operator/tracing.ts).
  const tracingCfg = tracingConfig(process.env, cfg.otlpEndpoint);
  const tracing = tracingCfg ? await startTracing(tracingCfg) : undefined;
  if (tracing) log.info({ service: tracingCfg!.serviceName, endpoint: cfg.otlpEndpoint ?? process.env['OTEL_EXPORTER_OTLP_TRACES_ENDPOINT'] ?? process.env['OTEL_EXPORTER_OTLP_ENDPOINT'] ?? 'default' }, 'tracing on: OTLP/HTTP');
  const clientInterceptors = tracing ? { workflow: [tracing.clientInterceptor] } : undefined;
  const kc = await loadKubeConfig(cfg);
  const apiServer = kc.getCurrentCluster()?.server ?? '?';
  // One client (one connection pool) for the activities, the watcher and leader election.
  const kube = new Kube(kc);
  // What the watcher's watches and this process's reads and writes brought, read by passes and rollouts instead of
  // a GET while current (activities/objects.ts).
  const recent = new RecentObjects(undefined, keptKinds);
  kube.onWrite = (ref, answer) => recent.wrote(ref, answer);
  /** What to undo at stop, in the order it was started (stopped in reverse). */
  const started: { what: string; stop: () => Promise<void> }[] = [];
  // Fleet Releases reach member clusters through their Secrets (kube/clusters.ts), and steer their canaries through
  // the members' Temporal namespaces on the same server (one connection, opened when first needed).
  const memberClusters = new MemberClusters(kube, cfg.clustersNamespace);
  const memberSignals = temporalSignaller(cfg);
  started.push({ what: 'the connection to member clusters\' Temporal namespaces', stop: () => memberSignals.close() });
  // Stopped last: the spans of stopping are flushed too.
  if (tracing) started.push({ what: 'tracing (flushing spans)', stop: () => tracing.shutdown() });
  let watcher: Watcher | undefined;
  let worker: Worker | undefined;
  /** What start-up still waits for (Temporal unreachable...), for /readyz. */
  let waitingFor: string | undefined;
  /** A replica waiting for the Lease: its watcher is not needed to be ready. */
  let standby = false;
  /** Aborted when the operator stops, from the caller's signal or stop(): ends every wait of start-up at once. */
  const stopping = new AbortController();
  let stopped: Promise<void> | undefined;
  /** The worker's failure, when it stopped on its own. */
  let failure: Error | undefined;
  metrics.readWatcher(() => watcher);
  const retrying = <T>(what: string, connect: () => Promise<T>, discard: (late: T) => Promise<unknown>) =>
    connectWithRetry(cfg, log, what, connect, discard, (w) => { waitingFor = w; }, stopping.signal);
  const closeClient = ({ connection }: { connection: Connection }) => connection.close();

  /** Stops what was started, last first; what a start-up step adds after a stop began is stopped by the next call. */
  const drain = async () => {
    for (let s = started.pop(); s; s = started.pop()) {
      progress.step = s.what;
      log.info(`stopping ${s.what}`);
      await s.stop().catch((err: unknown) => log.error({ err: err instanceof Error ? err.message : String(err) }, `stopping ${s.what} failed`));
    }
    progress.step = undefined;
  };
  const stop = (): Promise<void> => {
    stopping.abort();
    stopped ??= drain().then(() => log.info('stopped'));
    return stopped;
  };
  opts.signal?.addEventListener('abort', () => void stop(), { once: true });
  if (opts.signal?.aborted) void stop();
  const startedYet = (what: string) => {
    if (stopping.signal.aborted) throw new StoppedWhileStarting(what);
  };

  try {
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
        // The SDK would take SIGTERM and SIGINT for itself and, with no worker running yet, do nothing: this
        // process handles them (runOperatorProcess), in every phase.
        shutdownSignals: [],
      });
    }

    const server = await startHttpServer(cfg.metricsAddr, metrics.registry, {
      healthz: () => {
        const detail = stuck();
        return detail ? { ok: false, detail } : { ok: true, detail: 'ok' };
      },
      readyz: () => {
        if (stopping.signal.aborted) return { ok: false, detail: 'stopping' };
        const problems: string[] = waitingFor ? [waitingFor] : [];
        // A standby replica (not the leader) is ready: its worker serves, its watcher waits for the Lease.
        if (cfg.mode !== 'worker' && !standby && !watcher?.synced) problems.push(watcherNotSynced(watcher, apiServer));
        if (worker && worker.getState() !== 'RUNNING') problems.push(`worker ${worker.getState()}`);
        return { ok: problems.length === 0, detail: problems.join(', ') || 'ready' };
      },
    }, workerMetricsUrl);
    started.push({ what: 'the HTTP server', stop: () => closeServer(server) });
    log.info({ addr: cfg.metricsAddr }, 'serving /metrics, /healthz, /readyz');

    if (cfg.registerSearchAttributes) {
      const { connection } = await retrying('registering search attributes', () => connectClient(cfg), closeClient);
      await registerSearchAttributes(cfg, log, connection).finally(() => connection.close());
    }

    /** The worker's connection, which the watcher of the same process shares (to start workflows eagerly). */
    let workerConnection: NativeConnection | undefined;
    if (cfg.mode !== 'watcher') {
      const connection = await retrying('worker', () => connectWorker(cfg), (c) => c.close());
      const activities = createActivities({
        kube, recent, temporalNamespace: cfg.temporalNamespace, metrics, log, checkAllowedHosts: cfg.checkAllowedHosts,
        clusters: memberClusters, signalWorkflow: memberSignals.send,
        ...(cfg.temporalUiUrl ? { temporalUiUrl: cfg.temporalUiUrl } : {}),
        ...(cfg.prometheusAddress ? { prometheusAddress: cfg.prometheusAddress } : {}),
        ...(cfg.notifyDefault ? { notifyDefault: cfg.notifyDefault } : {}),
      });
      // A prebuilt bundle has no tracing interceptors in it: with tracing on, the SDK bundles the workflows at start with
      // them (its plugin adds them); without, we bundle at start as the image's build does (operator/workflow-bundle.ts).
      const workflowSource = tracing
        ? { workflowsPath: workflowsIndex, bundlerOptions: { preloadModules: sharedWorkflowModules({ tracing: true }) } }
        : { workflowBundle: { code: cfg.workflowBundle ? await readFile(cfg.workflowBundle, 'utf8') : await bundleWorkflows() } };
      const w = await Worker.create({
        connection, namespace: cfg.temporalNamespace, taskQueue: cfg.taskQueue, activities, ...workflowSource,
        maxConcurrentActivityTaskExecutions: cfg.maxConcurrentActivities,
        maxConcurrentWorkflowTaskExecutions: cfg.maxConcurrentWorkflowTasks,
        dataConverter: await dataConverterFor(cfg),
        maxCachedWorkflows: cfg.maxCachedWorkflows,
        shutdownGraceTime: '10s',
        // With tracing, the workflows' log lines carry the trace id too (workflows/kit/trace-log.ts).
        ...(tracing ? { plugins: [tracing.plugin], interceptors: { workflowModules: [fileURLToPath(new URL('../workflows/kit/trace-log.ts', import.meta.url))] } } : {}),
      }).catch(async (err: unknown) => {
        await connection.close();
        throw err;
      });
      if (stopping.signal.aborted) await connection.close();
      startedYet('creating the worker');
      worker = w;
      workerConnection = connection;
      if (calls && !calls.active) {
        log.warn('started without operator/sandbox-calls.ts preloaded (node --import, operator/runtime.ts PRELOAD): every call into workflow code starts a watchdog thread, the Temporal SDK\'s own deadline (expect more CPU than docs/benchmark.md reports)');
      } else if (calls) {
        log.info({ stuckWorkflowSeconds: cfg.stuckWorkflowSeconds }, 'calls into workflow code run without a watchdog thread each (operator/sandbox-calls.ts): one still running after stuckWorkflowSeconds fails /healthz');
        const timer = setInterval(stuck, 1000);
        timer.unref();
        started.push({ what: 'the stuck-workflow check', stop: () => Promise.resolve(clearInterval(timer)) });
      }
      if (calls) started.push({ what: 'the watch of calls into workflow code', stop: () => Promise.resolve(calls.close()) });
      if (stacks && !stacks.skipped) {
        log.warn('the workflow thread keeps a stack trace per promise of workflow code: operator/sandbox-calls.ts was not preloaded there (node --import, operator/runtime.ts PRELOAD), or this Temporal SDK has no promise hook where it looks (expect more CPU than docs/benchmark.md reports)');
      } else if (stacks) {
        log.info('workflow promises keep no stack trace each (operator/sandbox-calls.ts): the __stack_trace query says they are off; --workflow-stack-traces keeps them');
      }
      if (stacks) started.push({ what: 'the workflow thread\'s promise stacks setting', stop: () => Promise.resolve(stacks.close()) });
      const running = w.run().finally(() => connection.close());
      running.catch((err: unknown) => {
        if (stopping.signal.aborted) return;
        failure = err instanceof Error ? err : new Error(String(err));
        log.error({ err: err instanceof Error ? err.message : String(err) }, 'the worker failed; stopping');
        void stop();
      });
      started.push({
        what: 'the worker', stop: async () => {
          if (w.getState() === 'RUNNING') w.shutdown();
          await running.catch(() => undefined);
        },
      });
      log.info({ taskQueue: cfg.taskQueue, namespace: cfg.temporalNamespace }, 'worker started');
    }

    const startWatcher = async (): Promise<() => Promise<void>> => {
      // Over the worker's connection when this process runs one: Temporal can then hand a new workflow's first task
      // to that worker in the start's answer. The connection is the worker's to close.
      const shared = workerConnection;
      const { client, close } = shared
        ? { client: await clientOver(shared, cfg, clientInterceptors), close: () => Promise.resolve() }
        : await retrying('watcher', () => connectClient(cfg, clientInterceptors), closeClient).then(({ client, connection }) => ({ client, close: () => connection.close() }));
      const wt = new Watcher({
        kube, recent, temporal: client, taskQueue: cfg.taskQueue, eagerStart: shared !== undefined, namespaces: cfg.namespaces, log: log.child({ module: 'watcher' }),
        coalesceMs: cfg.coalesceMs,
        loopOptions: { progressRecheckSeconds: cfg.progressRecheckSeconds, resyncSeconds: cfg.resyncSeconds, refusedRetrySeconds: cfg.refusedRetrySeconds },
        releaseOptions: { pollSeconds: cfg.releasePollSeconds },
        onSignal: (reason, ok) => metrics.signals.inc({ reason, result: ok ? 'ok' : 'error' }),
        onStart: (how) => metrics.starts.inc({ first_task: how }),
        sweepSeconds: cfg.sweepSeconds,
        onSweep: (found) => {
          metrics.sweepFindings.inc({ kind: 'missing-workflow' }, found.missing.length);
          metrics.sweepFindings.inc({ kind: 'ended-rollout' }, found.endedRollouts);
          metrics.sweepFindings.inc({ kind: 'orphan-workflow' }, found.orphans.length);
        },
      });
      watcher = wt;
      const probing = cfg.clusterProbeSeconds > 0 ? probeLoop(memberClusters, kube, cfg.clusterProbeSeconds, log.child({ module: 'clusters' })) : undefined;
      const stopWatcher = async () => {
        await probing?.stop();
        await wt.stop();
        await close();
        if (watcher === wt) watcher = undefined;
        log.info('watcher stopped');
      };
      try {
        // The first list may hang on an API server that does not answer: a stop does not wait for it.
        await unlessAborted(wt.start(), stopping.signal, async () => {}, 'starting the watcher');
      } catch (err) {
        await stopWatcher();
        throw err;
      }
      log.info({ namespaces: cfg.namespaces.length ? cfg.namespaces : 'all' }, 'watcher started');
      return stopWatcher;
    };

    if (cfg.mode !== 'worker') {
      if (cfg.leaderElect) {
        // Every replica runs a worker; only the Lease holder watches, so each event becomes one signal.
        standby = true;
        const elector = electorFor(cfg, kube, log.child({ module: 'leader-election' }));
        const leading = runWhileLeader(elector, async () => {
          // Stopped while connecting: nothing to start, and no reason to resign.
          const stopWatcher = await startWatcher().catch((err: unknown) => {
            if (err instanceof StoppedWhileStarting) return async () => {};
            throw err;
          });
          standby = false;
          return async () => {
            standby = true;
            await stopWatcher();
          };
        }, log);
        started.push({ what: 'leader election and the watcher', stop: () => leading.stop() });
      } else {
        const stopWatcher = await startWatcher();
        started.push({ what: 'the watcher', stop: stopWatcher });
      }
    }
    startedYet('starting');
    return { done: untilStopped(), stop, server };
  } catch (err) {
    await stop();
    await drain();
    // A worker that failed while the rest was starting stopped the start: its failure is the one to report.
    throw failure ?? err;
  }

  async function untilStopped(): Promise<void> {
    await new Promise<void>((resolve) => {
      if (stopping.signal.aborted) resolve();
      else stopping.signal.addEventListener('abort', () => resolve(), { once: true });
    });
    await stopped;
    if (failure !== undefined) throw failure;
  }
}

/** Why the watcher is not synced: the collections it has not listed yet, and what the API server last answered. */
function watcherNotSynced(watcher: Watcher | undefined, apiServer: string): string {
  if (!watcher) return 'watcher not started';
  return `watcher not synced: ${watcher.unsynced() ?? 'listing'} (API server ${apiServer})`;
}

/** Closes the HTTP server: no new connections, idle keep-alive ones dropped, requests in flight answered. */
function closeServer(server: Server): Promise<void> {
  return new Promise<void>((resolve) => {
    server.close(() => resolve());
    server.closeIdleConnections();
  });
}

/** Exit codes of `application-operator run`: stopped cleanly after SIGTERM or SIGINT, or anything else. */
export const exitCodes = { stopped: 0, failed: 1 } as const;

/**
 * Runs the operator as this process: SIGTERM or SIGINT stops it in every phase (connecting, waiting for the Lease,
 * running) and it resolves to 0 once stopped, or to 1 when stopping outlasts --shutdown-timeout-seconds (a Kubernetes
 * pod would be killed at its grace period anyway) or at a second signal while stopping. It rejects when the
 * operator fails (cannot start, or its worker fails), after stopping what had started.
 */
export async function runOperatorProcess(cfg: OperatorConfig): Promise<number> {
  const log = createLogger(cfg.logLevel);
  const signalled = new AbortController();
  const progress: StopProgress = {};
  let forced!: (code: number) => void;
  const cutShort = new Promise<number>((resolve) => { forced = resolve; });
  const onSignal = (signal: NodeJS.Signals) => {
    if (signalled.signal.aborted) {
      log.warn({ signal, stopping: progress.step }, `${signal} again while stopping: exiting now`);
      forced(exitCodes.failed);
      return;
    }
    log.info({ signal }, `${signal}: stopping`);
    signalled.abort();
    setTimeout(() => {
      log.error({ stopping: progress.step }, `did not stop within ${cfg.shutdownTimeoutSeconds} s (still stopping ${progress.step ?? 'something'}): exiting anyway`);
      forced(exitCodes.failed);
    }, cfg.shutdownTimeoutSeconds * 1000).unref();
  };
  process.on('SIGTERM', onSignal);
  process.on('SIGINT', onSignal);
  const lifecycle = (async () => {
    try {
      const running = await runOperator(cfg, { signal: signalled.signal, progress, log });
      await running.done;
      return exitCodes.stopped;
    } catch (err) {
      if (err instanceof StoppedWhileStarting) return exitCodes.stopped;
      // The command prints it on stderr and exits with exitCodes.failed.
      throw err;
    }
  })();
  return Promise.race([lifecycle, cutShort]);
}
