import { Counter, Gauge, Histogram, Registry, collectDefaultMetrics } from 'prom-client';
import { parseApplication, parseDuration } from '../api/application.ts';
import { ConditionType, Phase, RolloutPhase, isTerminal, terminalRolloutPhases } from '../api/constants.ts';
import { reasonStrength, startOutcomes } from '../watcher/change.ts';

/**
 * What the metrics read from this process's watcher, when it runs one (the Lease holder, or every process without
 * leader election). Read at scrape time, so the numbers are the watcher's informer cache as it is then.
 */
export interface WatcherView {
  /** Every informer has listed once. */
  readonly synced: boolean;
  /** The Applications in the watcher's cache, as the API server sent them. */
  applications(): readonly unknown[];
}

interface StatusLike { metadata?: { name?: string; namespace?: string }; status?: { phase?: string; conditions?: { type: string; status: string; reason?: string }[] } }

/** How many Applications are in each phase (status.phase; Unknown before the first status). */
export function applicationsByPhase(apps: readonly unknown[]): Map<string, number> {
  const counts = new Map<string, number>();
  for (const app of apps as readonly StatusLike[]) {
    const phase = app.status?.phase || 'Unknown';
    counts.set(phase, (counts.get(phase) ?? 0) + 1);
  }
  return counts;
}

/** The Applications whose phase is Failed, with the reason of their InvalidSpec or Degraded condition. */
export function failedApplications(apps: readonly unknown[]): { namespace: string; name: string; reason: string }[] {
  return (apps as readonly StatusLike[]).filter((a) => a.status?.phase === Phase.Failed).map((a) => {
    const why = [ConditionType.InvalidSpec, ConditionType.Degraded].map((t) => a.status?.conditions?.find((c) => c.type === t && c.status === 'True')).find(Boolean);
    return { namespace: a.metadata?.namespace ?? '', name: a.metadata?.name ?? '', reason: why?.reason ?? '' };
  });
}

/** A canary rollout that is not over, as its Application's status and spec tell it. */
export interface RunningRollout {
  labels: { namespace: string; name: string; version: string };
  phase: string;
  startedAt: number;
  /** spec.serviceMesh.canary.progressDeadline in seconds. */
  progressDeadlineSeconds: number;
  /** The end of the current timed pause. */
  pauseEndsAt?: number;
}

/**
 * The rollouts that have not reached an outcome, from the Applications the watcher sees. An Application that does
 * not parse, or whose status.canary lacks a start time, is left out: there is no deadline to measure it against.
 */
export function runningRollouts(apps: readonly unknown[]): RunningRollout[] {
  const out: RunningRollout[] = [];
  for (const raw of apps) {
    const phase = (raw as { status?: { canary?: { phase?: string } } }).status?.canary?.phase;
    // Most Applications have no rollout running: skip them before the (costlier) parse.
    if (!phase || isTerminal(phase)) continue;
    const parsed = parseApplication(raw);
    if (!parsed.ok) continue;
    const { metadata, spec, status } = parsed.app;
    const canary = status?.canary;
    const startedAt = canary?.startedAt ? Date.parse(canary.startedAt) : Number.NaN;
    if (!canary?.version || Number.isNaN(startedAt)) continue;
    const pauseEndsAt = canary.pauseEndsAt ? Date.parse(canary.pauseEndsAt) : Number.NaN;
    out.push({
      labels: { namespace: metadata.namespace ?? '', name: metadata.name, version: canary.version },
      phase,
      startedAt: startedAt / 1000,
      progressDeadlineSeconds: parseDuration(spec.serviceMesh?.canary?.progressDeadline ?? '30m') / 1000,
      ...(phase === RolloutPhase.Paused && !Number.isNaN(pauseEndsAt) ? { pauseEndsAt: pauseEndsAt / 1000 } : {}),
    });
  }
  return out;
}

/** The operator's Prometheus metrics (docs/monitoring.md says what each is for); the Temporal worker's own are appended on /metrics. */
export function createMetrics() {
  const registry = new Registry();
  collectDefaultMetrics({ register: registry, prefix: 'application_operator_process_' });
  let watcherView: () => WatcherView | undefined = () => undefined;
  const apps = () => watcherView()?.applications() ?? [];
  const rollouts = () => runningRollouts(apps());
  const rolloutLabels = ['namespace', 'name', 'version'] as const;
  const metrics = {
    registry,
    /** Lets the watcher gauges read this process's watcher (undefined while it runs none, e.g. a standby replica). */
    readWatcher(view: () => WatcherView | undefined): void {
      watcherView = view;
    },
    reconciliations: new Counter({
      name: 'application_operator_reconciliations_total',
      help: 'Reconcile passes, by Application and the phase they ended in',
      labelNames: ['name', 'namespace', 'phase'] as const,
      registers: [registry],
    }),
    reconcileDuration: new Histogram({
      name: 'application_operator_reconciliation_duration_seconds',
      help: 'Duration of one reconcile pass (the reconcile activity)',
      buckets: [0.1, 0.5, 1, 2, 5, 10],
      registers: [registry],
    }),
    rollouts: new Counter({
      name: 'application_operator_rollouts_total',
      help: 'Canary rollouts that ended, by outcome (Promoted, Aborted, RolledBack, Failed)',
      labelNames: ['outcome'] as const,
      registers: [registry],
    }),
    rolloutDuration: new Histogram({
      name: 'application_operator_rollout_duration_seconds',
      help: 'Duration of canary rollouts from start to their outcome',
      labelNames: ['outcome'] as const,
      buckets: [10, 30, 60, 120, 300, 600, 1800, 3600, 7200],
      registers: [registry],
    }),
    workerThreadsHeap: new Gauge({
      name: 'application_operator_worker_threads_heap_bytes',
      help: 'V8 heap of the worker threads (the Temporal worker runs workflow code in one): used and total, from a diagnostic report at each scrape',
      labelNames: ['kind'] as const,
      registers: [registry],
      collect() {
        // The main thread's heap is in the process metrics; the threads' are only visible to a diagnostic report.
        const report = process.report.getReport() as unknown as { workers?: { javascriptHeap?: { usedMemory?: number; totalMemory?: number } }[] };
        const workers = report.workers ?? [];
        this.set({ kind: 'used' }, workers.reduce((n, w) => n + (w.javascriptHeap?.usedMemory ?? 0), 0));
        this.set({ kind: 'total' }, workers.reduce((n, w) => n + (w.javascriptHeap?.totalMemory ?? 0), 0));
      },
    }),
    notifications: new Counter({
      name: 'application_operator_notifications_total',
      help: 'Rollout notifications, by outcome of each delivery attempt: sent, failed (retried), rejected (a 4xx, not retried), refused (--check-allowed-hosts), or error (no URL: the Secret or its key is missing; retried)',
      labelNames: ['outcome'] as const,
      registers: [registry],
    }),
    signals: new Counter({
      name: 'application_operator_watch_signals_total',
      help: 'Signals the watcher sent to Application workflows, by reason and result',
      labelNames: ['reason', 'result'] as const,
      registers: [registry],
    }),
    starts: new Counter({
      name: 'application_operator_watch_starts_total',
      help: 'New Applications\' workflows the watcher started with a plain start, by how the first workflow task came: eager (handed back in the start\'s answer to this process\'s worker), queued (through Temporal\'s task queue: no slot free, or eager start off on the server) or running (a workflow ran already and was signalled instead)',
      labelNames: ['first_task'] as const,
      registers: [registry],
    }),
    sweepFindings: new Counter({
      name: 'application_operator_sweep_findings_total',
      help: 'What the watcher\'s sweep of Temporal found: Application or Release workflows missing (started again), workflows whose object was deleted while no watcher watched (told, so that they end), and rollouts whose workflow closed without finishing (rolled back)',
      labelNames: ['kind'] as const,
      registers: [registry],
    }),
    watcherRunning: new Gauge({
      name: 'application_operator_watcher_running',
      help: '1 when this process runs the watcher (it holds the Lease, or runs without leader election), else 0',
      registers: [registry],
      collect() {
        this.set(watcherView() ? 1 : 0);
      },
    }),
    watcherSynced: new Gauge({
      name: 'application_operator_watcher_synced',
      help: '1 when this process runs the watcher and every informer has listed once, else 0',
      registers: [registry],
      collect() {
        this.set(watcherView()?.synced ? 1 : 0);
      },
    }),
    applications: new Gauge({
      name: 'application_operator_applications',
      help: 'Applications the watcher sees, by status.phase (Unknown before their first status)',
      labelNames: ['phase'] as const,
      registers: [registry],
      collect() {
        this.reset();
        for (const [phase, n] of applicationsByPhase(apps())) this.set({ phase }, n);
      },
    }),
    applicationFailed: new Gauge({
      name: 'application_operator_application_failed',
      help: '1 for each Application in phase Failed, with the reason of its InvalidSpec or Degraded condition',
      labelNames: ['namespace', 'name', 'reason'] as const,
      registers: [registry],
      collect() {
        this.reset();
        for (const f of failedApplications(apps())) this.set(f, 1);
      },
    }),
    rolloutStarted: new Gauge({
      name: 'application_operator_rollout_started_timestamp_seconds',
      help: 'Start of each canary rollout that has not reached an outcome, by its current phase (from status.canary, as the watcher sees it)',
      labelNames: [...rolloutLabels, 'phase'] as const,
      registers: [registry],
      collect() {
        this.reset();
        for (const r of rollouts()) this.set({ ...r.labels, phase: r.phase }, r.startedAt);
      },
    }),
    rolloutProgressDeadline: new Gauge({
      name: 'application_operator_rollout_progress_deadline_seconds',
      help: 'progressDeadline of each canary rollout that has not reached an outcome (time in pauses does not count against it)',
      labelNames: rolloutLabels,
      registers: [registry],
      collect() {
        this.reset();
        for (const r of rollouts()) this.set(r.labels, r.progressDeadlineSeconds);
      },
    }),
    rolloutPauseEnd: new Gauge({
      name: 'application_operator_rollout_pause_end_timestamp_seconds',
      help: 'When the timed pause of each paused canary rollout ends',
      labelNames: rolloutLabels,
      registers: [registry],
      collect() {
        this.reset();
        for (const r of rollouts()) if (r.pauseEndsAt !== undefined) this.set(r.labels, r.pauseEndsAt);
      },
    }),
  };
  // Every known label value has a series from the start: Prometheus sees no increase() in a counter whose first
  // sample is already 1, so the first rollout of each outcome (often the only one) would not show otherwise.
  for (const outcome of terminalRolloutPhases) {
    metrics.rollouts.inc({ outcome }, 0);
    metrics.rolloutDuration.zero({ outcome });
  }
  for (const reason of Object.keys(reasonStrength)) for (const result of ['ok', 'error']) metrics.signals.inc({ reason, result }, 0);
  for (const firstTask of startOutcomes) metrics.starts.inc({ first_task: firstTask }, 0);
  return metrics;
}

export type Metrics = ReturnType<typeof createMetrics>;
