// The operator processes of one benchmark run, spawned by testkit's startOperator with the production defaults: one
// in --mode all and the rest in --mode worker on the same task queue, each with the request-counting probe preloaded.
// What is the benchmark's own: their resident memory sampled from /proc every 500 ms, their probe counts, their
// metrics and a summary of their logs.
import { readFile } from 'node:fs/promises';
import { join, resolve } from 'node:path';
import { StopPolling, eventually } from '../lib/poll.ts';
import { startOperator, type OperatorProcess } from '../testkit/operator.ts';
import { memoryOf, type MemorySnapshot } from './memory.ts';
import { probeFlushMs } from './probe.ts';

const root = resolve(import.meta.dirname, '..');

export interface OperatorSpec {
  namespace: string;
  taskQueue: string;
  workers: number;
  logDir: string;
  /** Flags after the benchmark's own (--operator-arg). */
  extraArgs: string[];
  /** More environment for each process (--operator-env). */
  extraEnv?: Record<string, string>;
  /** Tells the log and probe files of processes started later on the same namespace apart (a restart's). */
  tag?: string;
  /** Every process in --mode all with --leader-elect on this Lease (in the namespace): one watches, the rest stand by. */
  leaderElect?: { leaseName: string };
}

export interface OperatorProc {
  index: number;
  mode: 'all' | 'worker';
  process: OperatorProcess;
  /** Its pid when started (the process's pid() is undefined once it exited). */
  pid: number;
  /** When it was spawned and when its /readyz first answered 200 (ms since epoch). */
  startedAt: number;
  readyAt: number;
  probeFile: string;
  /** Peak resident set size seen, in bytes (max of sampled VmRSS and the kernel's VmHWM). */
  peakRss: number;
  lastRss: number;
  /** RSS once the process said ready, before any Application existed. */
  readyRss: number;
  /** Where its memory went: once ready, at the highest RSS seen in a scrape, and at the last scrape. */
  memory: { ready?: MemorySnapshot; peak?: MemorySnapshot; last?: MemorySnapshot };
}

/** Kubernetes requests one process made, by "VERB resource", as its probe last wrote them. */
export type ProbeCounts = Record<string, number>;

export class Operators {
  readonly procs: OperatorProc[] = [];
  private sampler: NodeJS.Timeout | undefined;
  private scraper: NodeJS.Timeout | undefined;
  private stopping = false;

  /**
   * Starts 1 process in --mode all and workers-1 in --mode worker (with leaderElect, every one in --mode all), and
   * waits until each says ready.
   */
  async start(spec: OperatorSpec): Promise<void> {
    const name = `${spec.namespace}${spec.tag ? `-${spec.tag}` : ''}`;
    const lease = spec.leaderElect ? ['--leader-elect', `--lease-namespace=${spec.namespace}`, `--lease-name=${spec.leaderElect.leaseName}`] : [];
    const started = await Promise.allSettled(Array.from({ length: spec.workers }, async (_, index) => {
      const mode = index === 0 || spec.leaderElect ? 'all' : 'worker';
      const probeFile = join(spec.logDir, `probe-${name}-${index}.json`);
      const startedAt = Date.now();
      const operator = await startOperator({
        namespaces: [spec.namespace], taskQueue: spec.taskQueue, mode,
        // The production defaults, so that what is measured is what users run.
        flags: ['--log-level=info', ...lease], extraArgs: spec.extraArgs,
        nodeArgs: ['--import', join(root, 'bench', 'probe.ts')], extraEnv: { ...spec.extraEnv, BENCH_PROBE_FILE: probeFile },
        logFile: join(spec.logDir, `operator-${name}-${index}-${mode}.log`), readyTimeoutMs: 120_000,
      });
      const readyAt = Date.now();
      const pid = operator.pid();
      if (pid === undefined) throw new Error(`operator process ${index} (${mode}) exited once ready; log ${operator.logFile}`);
      return { index, mode, process: operator, pid, startedAt, readyAt, probeFile, peakRss: 0, lastRss: 0, readyRss: 0, memory: {} } satisfies OperatorProc;
    }));
    for (const s of started) if (s.status === 'fulfilled') this.procs.push(s.value);
    this.sampler = setInterval(() => void this.sample(), 500);
    this.scraper = setInterval(() => void this.scrapeMemory(), 5000);
    const failed = started.find((s) => s.status === 'rejected');
    if (failed) throw failed.reason;
    await this.sample();
    await this.scrapeMemory();
    for (const p of this.procs) {
      p.readyRss = p.lastRss;
      if (p.memory.last) p.memory.ready = p.memory.last;
    }
  }

  /** Reads each process's memory breakdown from its /metrics, keeping the one with the highest RSS. */
  async scrapeMemory(): Promise<void> {
    await Promise.all(this.procs.map(async (p) => {
      const text = await fetch(`${p.process.metricsUrl}/metrics`).then((r) => r.text(), () => '');
      if (!text) return;
      const m = memoryOf(text);
      p.memory.last = m;
      if (!p.memory.peak || m.rssMB > p.memory.peak.rssMB) p.memory.peak = m;
    }));
  }

  /** Throws StopPolling, with the log's tail, when a process has died: a wait on the operator ends at once. */
  async assertAlive(): Promise<void> {
    try {
      for (const p of this.procs) await p.process.assertAlive();
    } catch (err) {
      throw new StopPolling((err as Error).message);
    }
  }

  private async sample(): Promise<void> {
    for (const p of this.procs) {
      const text = await readFile(`/proc/${p.pid}/status`, 'utf8').catch(() => '');
      const kb = (field: string) => Number(new RegExp(`^${field}:\\s+(\\d+) kB`, 'm').exec(text)?.[1] ?? 0) * 1024;
      const rss = kb('VmRSS');
      if (rss > 0) p.lastRss = rss;
      p.peakRss = Math.max(p.peakRss, rss, kb('VmHWM'));
    }
  }

  /** Each process's request counts as its probe last wrote them (of every process, or of those given). */
  async probeCounts(procs: OperatorProc[] = this.procs): Promise<ProbeCounts[]> {
    return Promise.all(procs.map(async (p) => {
      const text = await readFile(p.probeFile, 'utf8').catch(() => '');
      try {
        return (JSON.parse(text) as { counts: ProbeCounts }).counts;
      } catch {
        return {};
      }
    }));
  }

  /**
   * Waits until the given processes made no Kubernetes request (by their probes) for quietMs, leaving out the
   * requests `ignore` matches ("VERB resource": a leader's Lease renewals, a standby's Lease reads). Resolves with when
   * their last request was first seen (ms since epoch, to within two probe flushes), or null when they were still
   * busy at the timeout; throws StopPolling when one of them died.
   */
  async lastRequestBeforeQuiet(procs: OperatorProc[], opts: { quietMs: number; timeoutMs: number; ignore?: RegExp }): Promise<number | null> {
    let seen = '';
    let last = Date.now();
    try {
      return await eventually(`no API request for ${opts.quietMs / 1000} s`, async () => {
        for (const p of procs) await p.process.assertAlive().catch((err: unknown) => {
          throw new StopPolling((err as Error).message);
        });
        const counts = Object.entries(sumProbes(await this.probeCounts(procs))).filter(([k]) => !opts.ignore?.test(k)).sort();
        const now = Date.now();
        const key = JSON.stringify(counts);
        if (key !== seen) {
          seen = key;
          last = now;
          return undefined;
        }
        return now - last >= opts.quietMs ? last : undefined;
      }, { timeoutMs: opts.timeoutMs, intervalMs: probeFlushMs, paced: true });
    } catch (err) {
      if (err instanceof StopPolling) throw err;
      return null;
    }
  }

  /** The /metrics text of every process (ours plus the Temporal worker's). */
  async metrics(): Promise<string[]> {
    return Promise.all(this.procs.map((p) => fetch(`${p.process.metricsUrl}/metrics`).then((r) => r.text(), () => '')));
  }

  /** Warnings and errors in the processes' JSON logs, with a few distinct messages. */
  async logSummary(): Promise<{ warnings: number; errors: number; messages: Record<string, number> }> {
    let warnings = 0;
    let errors = 0;
    const messages: Record<string, number> = {};
    for (const p of this.procs) {
      const text = await readFile(p.process.logFile, 'utf8').catch(() => '');
      for (const line of text.split('\n')) {
        if (!line.startsWith('{')) continue;
        let entry: { level?: number; msg?: string };
        try {
          entry = JSON.parse(line) as { level?: number; msg?: string };
        } catch {
          continue;
        }
        if ((entry.level ?? 0) < 40) continue;
        if ((entry.level ?? 0) >= 50) errors++;
        else warnings++;
        const msg = (entry.msg ?? '?').slice(0, 120);
        messages[msg] = (messages[msg] ?? 0) + 1;
      }
    }
    return { warnings, errors, messages };
  }

  /** Stops every process (SIGTERM, then SIGKILL after 15 s; or SIGKILL at once: a crash) and waits for them to exit. */
  async stop(signal: 'SIGTERM' | 'SIGKILL' = 'SIGTERM'): Promise<void> {
    if (this.stopping) return;
    this.stopping = true;
    await this.sample();
    clearInterval(this.sampler);
    clearInterval(this.scraper);
    await Promise.all(this.procs.map((p) => p.process.stop(signal, 15_000)));
  }
}

/** Sums the probes of several processes. */
export function sumProbes(list: ProbeCounts[]): ProbeCounts {
  const out: ProbeCounts = {};
  for (const c of list) for (const [k, v] of Object.entries(c)) out[k] = (out[k] ?? 0) + v;
  return out;
}

/** Probe counts folded by verb ("APPLY dry-run" stays its own verb). */
export function probeByVerb(c: ProbeCounts): Record<string, number> {
  const out: Record<string, number> = {};
  for (const [k, v] of Object.entries(c)) {
    const verb = k.slice(0, k.lastIndexOf(' '));
    out[verb] = (out[verb] ?? 0) + v;
  }
  return out;
}

/** Mean of each histogram (sum/count) whose name matches, from Prometheus text of several processes. */
export function histogramMeans(texts: string[], pattern: RegExp): Record<string, { count: number; mean: number }> {
  const acc: Record<string, { sum: number; count: number }> = {};
  for (const text of texts) {
    for (const line of text.split('\n')) {
      const m = /^([a-zA-Z_:][\w:]*)_(sum|count)(\{[^}]*\})? ([\d.eE+-]+)$/.exec(line);
      if (!m || !pattern.test(m[1]!)) continue;
      const name = m[1]!;
      const e = (acc[name] ??= { sum: 0, count: 0 });
      if (m[2] === 'sum') e.sum += Number(m[4]);
      else e.count += Number(m[4]);
    }
  }
  return Object.fromEntries(Object.entries(acc).map(([k, v]) => [k, { count: v.count, mean: v.count ? v.sum / v.count : 0 }]));
}

/** Sum of a counter by one label, from Prometheus text of several processes. */
export function counterBy(texts: string[], metric: string, label: string): Record<string, number> {
  const out: Record<string, number> = {};
  for (const text of texts) {
    for (const line of text.split('\n')) {
      if (!line.startsWith(`${metric}{`) && !line.startsWith(`${metric} `)) continue;
      const value = Number(line.slice(line.lastIndexOf(' ') + 1));
      const l = new RegExp(`${label}="([^"]*)"`).exec(line)?.[1] ?? '';
      out[l] = (out[l] ?? 0) + value;
    }
  }
  return out;
}
