// Where an operator process's memory goes: what importing its modules costs (measured in fresh processes), and,
// from its /metrics at a given moment, resident memory split into the main thread's V8 heap, the worker threads'
// heaps (the Temporal workflow sandbox), external memory, and the rest (native: the Temporal core SDK in Rust, code
// and stacks, allocator slack), with the number of workflows in the sticky cache.
import { execFile } from 'node:child_process';
import { resolve } from 'node:path';
import { promisify } from 'node:util';

const root = resolve(import.meta.dirname, '..');

/** The memory of one process at one moment, in MB. */
export interface MemorySnapshot {
  rssMB: number;
  mainHeapUsedMB: number;
  mainHeapTotalMB: number;
  workerThreadsHeapUsedMB: number;
  workerThreadsHeapTotalMB: number;
  externalMB: number;
  /** RSS minus the heaps (total) and external memory: native code and data, thread stacks, allocator slack. */
  nativeAndOtherMB: number;
  cachedWorkflows: number;
}

const metric = (text: string, name: string, label?: string): number => {
  for (const line of text.split('\n')) {
    if (!line.startsWith(name) || (line[name.length] !== ' ' && line[name.length] !== '{')) continue;
    if (label && !line.includes(label)) continue;
    return Number(line.slice(line.lastIndexOf(' ') + 1));
  }
  return 0;
};

/** The breakdown from an operator's /metrics text (ours, the process metrics, and the Temporal worker's). */
export function memoryOf(metrics: string): MemorySnapshot {
  const mb = (n: number) => n / 2 ** 20;
  const p = 'application_operator_process_';
  const rss = metric(metrics, `${p}process_resident_memory_bytes`);
  const mainTotal = metric(metrics, `${p}nodejs_heap_size_total_bytes`);
  const threadsTotal = metric(metrics, 'application_operator_worker_threads_heap_bytes', 'kind="total"');
  const external = metric(metrics, `${p}nodejs_external_memory_bytes`);
  return {
    rssMB: mb(rss),
    mainHeapUsedMB: mb(metric(metrics, `${p}nodejs_heap_size_used_bytes`)),
    mainHeapTotalMB: mb(mainTotal),
    workerThreadsHeapUsedMB: mb(metric(metrics, 'application_operator_worker_threads_heap_bytes', 'kind="used"')),
    workerThreadsHeapTotalMB: mb(threadsTotal),
    externalMB: mb(external),
    nativeAndOtherMB: mb(Math.max(0, rss - mainTotal - threadsTotal - external)),
    cachedWorkflows: metric(metrics, 'temporal_sticky_cache_size'),
  };
}

export interface ImportCost {
  module: string;
  rssMB: number;
  heapUsedMB: number;
}

/** What Node alone costs, then what importing each module costs on top, each in a fresh process. */
export async function importCosts(): Promise<ImportCost[]> {
  const targets: [string, string][] = [
    ['node (nothing imported)', 'node:os'],
    ['@temporalio/worker', '@temporalio/worker'],
    ['@temporalio/client', '@temporalio/client'],
    ['@kubernetes/client-node (no longer loaded by the operator)', '@kubernetes/client-node'],
    ['prom-client', 'prom-client'],
    ['pino', 'pino'],
    ['zod', 'zod'],
    ['the operator (operator/main.ts and all it imports)', resolve(root, 'operator', 'main.ts')],
  ];
  const script = 'await import(process.argv[1]); globalThis.gc(); const m = process.memoryUsage(); console.log(JSON.stringify({ rss: m.rss, heapUsed: m.heapUsed }));';
  const out: ImportCost[] = [];
  for (const [module, specifier] of targets) {
    const { stdout } = await promisify(execFile)(process.execPath, ['--expose-gc', '--input-type=module', '-e', script, specifier], { cwd: root });
    const m = JSON.parse(stdout.trim().split('\n').at(-1) ?? '{}') as { rss: number; heapUsed: number };
    out.push({ module, rssMB: m.rss / 2 ** 20, heapUsedMB: m.heapUsed / 2 ** 20 });
  }
  return out;
}
