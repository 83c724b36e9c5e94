import { Counter, Gauge, Histogram, Registry, collectDefaultMetrics } from 'prom-client';

/** The operator's Prometheus metrics (the README's Operations section lists them); the Temporal worker's own are appended on /metrics. */
export function createMetrics() {
  const registry = new Registry();
  collectDefaultMetrics({ register: registry, prefix: 'application_operator_process_' });
  return {
    registry,
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
    signals: new Counter({
      name: 'application_operator_watch_signals_total',
      help: 'Signals the watcher sent to Application workflows, by reason and result',
      labelNames: ['reason', 'result'] as const,
      registers: [registry],
    }),
  };
}

export type Metrics = ReturnType<typeof createMetrics>;
