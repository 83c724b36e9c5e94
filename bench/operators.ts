// The operator processes of one benchmark run: `application-operator run` spawned like the test harness does, one
// in --mode all and the rest in --mode worker on the same task queue, each with the request-counting probe preloaded,
// their resident memory sampled from /proc every 500 ms.
import { spawn, type ChildProcess } from 'node:child_process';
import { createWriteStream } from 'node:fs';
import { readFile } from 'node:fs/promises';
import { join, resolve } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { freePort } from '../lib/net.ts';
import type { StackInfo } from '../stack/stack.ts';

const root = resolve(import.meta.dirname, '..');

export interface OperatorSpec {
  info: StackInfo;
  namespace: string;
  taskQueue: string;
  workflowBundle: string;
  workers: number;
  logDir: string;
  extraArgs: string[];
}

export interface OperatorProc {
  index: number;
  mode: 'all' | 'worker';
  pid: number;
  metricsUrl: string;
  logFile: string;
  probeFile: string;
  args: string[];
  child: ChildProcess;
  /** Peak resident set size seen, in bytes (max of sampled VmRSS and the kernel's VmHWM). */
  peakRss: number;
  lastRss: number;
  /** RSS once the process said ready, before any Application existed. */
  readyRss: number;
}

/** Kubernetes requests one process made, by "VERB resource", as its probe last wrote them. */
export type ProbeCounts = Record<string, number>;

export class Operators {
  readonly procs: OperatorProc[] = [];
  private sampler: NodeJS.Timeout | undefined;
  private stopping = false;

  /** The flags every process gets (printed with the results). */
  static flags(spec: OperatorSpec, mode: 'all' | 'worker', metricsPort: number): string[] {
    return [
      `--kubeconfig=${spec.info.kubeconfig}`, `--temporal-address=${spec.info.temporalAddress}`, `--temporal-namespace=${spec.info.temporalNamespace}`,
      `--task-queue=${spec.taskQueue}`, `--namespaces=${spec.namespace}`, `--workflow-bundle=${spec.workflowBundle}`,
      `--metrics-addr=127.0.0.1:${metricsPort}`, `--mode=${mode}`, '--no-register-search-attributes', '--log-level=info',
      ...spec.extraArgs,
    ];
  }

  /** Starts 1 process in --mode all and workers-1 in --mode worker, and waits until each says ready. */
  async start(spec: OperatorSpec): Promise<void> {
    for (let i = 0; i < spec.workers; i++) {
      const mode = i === 0 ? 'all' : 'worker';
      const port = await freePort();
      const logFile = join(spec.logDir, `operator-${spec.namespace}-${i}-${mode}.log`);
      const probeFile = join(spec.logDir, `probe-${spec.namespace}-${i}.json`);
      const args = Operators.flags(spec, mode, port);
      const log = createWriteStream(logFile, { flags: 'a' });
      const child = spawn(process.execPath, ['--import', join(root, 'bench', 'probe.ts'), join(root, 'bin', 'application-operator.ts'), 'run', ...args], {
        cwd: root, env: { ...process.env, BENCH_PROBE_FILE: probeFile }, stdio: ['ignore', 'pipe', 'pipe'],
      });
      child.stdout?.pipe(log, { end: false });
      child.stderr?.pipe(log, { end: false });
      if (child.pid === undefined) throw new Error(`could not spawn operator process ${i}`);
      this.procs.push({ index: i, mode, pid: child.pid, metricsUrl: `http://127.0.0.1:${port}`, logFile, probeFile, args, child, peakRss: 0, lastRss: 0, readyRss: 0 });
    }
    this.sampler = setInterval(() => void this.sample(), 500);
    await Promise.all(this.procs.map((p) => this.waitReady(p)));
    await this.sample();
    for (const p of this.procs) p.readyRss = p.lastRss;
  }

  private async waitReady(p: OperatorProc): Promise<void> {
    const deadline = Date.now() + 120_000;
    for (;;) {
      if (p.child.exitCode !== null || p.child.signalCode !== null) {
        throw new Error(`operator process ${p.index} (${p.mode}) exited with ${p.child.exitCode ?? p.child.signalCode}; last log lines:\n${await tail(p.logFile)}`);
      }
      const ok = await fetch(`${p.metricsUrl}/readyz`).then((r) => r.ok, () => false);
      if (ok) return;
      if (Date.now() > deadline) throw new Error(`operator process ${p.index} (${p.mode}) not ready after 120 s; log ${p.logFile}:\n${await tail(p.logFile)}`);
      await sleep(250);
    }
  }

  /** Throws when a process has died (checked while waiting for convergence). */
  async assertAlive(): Promise<void> {
    for (const p of this.procs) {
      if (p.child.exitCode !== null || p.child.signalCode !== null) {
        throw new Error(`operator process ${p.index} (${p.mode}, pid ${p.pid}) exited with ${p.child.exitCode ?? p.child.signalCode}; last log lines:\n${await tail(p.logFile)}`);
      }
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

  /** Each process's request counts as its probe last wrote them. */
  async probeCounts(): Promise<ProbeCounts[]> {
    return Promise.all(this.procs.map(async (p) => {
      const text = await readFile(p.probeFile, 'utf8').catch(() => '');
      try {
        return (JSON.parse(text) as { counts: ProbeCounts }).counts;
      } catch {
        return {};
      }
    }));
  }

  /** The /metrics text of every process (ours plus the Temporal worker's). */
  async metrics(): Promise<string[]> {
    return Promise.all(this.procs.map((p) => fetch(`${p.metricsUrl}/metrics`).then((r) => r.text(), () => '')));
  }

  /** Warnings and errors in the processes' JSON logs, with a few distinct messages. */
  async logSummary(): Promise<{ warnings: number; errors: number; messages: Record<string, number> }> {
    let warnings = 0;
    let errors = 0;
    const messages: Record<string, number> = {};
    for (const p of this.procs) {
      const text = await readFile(p.logFile, 'utf8').catch(() => '');
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

  /** Stops every process (SIGTERM, then SIGKILL after 15 s) and waits for them to exit. */
  async stop(): Promise<void> {
    if (this.stopping) return;
    this.stopping = true;
    await this.sample();
    clearInterval(this.sampler);
    await Promise.all(this.procs.map(async (p) => {
      const c = p.child;
      if (c.exitCode !== null || c.signalCode !== null) return;
      const exited = new Promise<void>((r) => c.once('exit', () => r()));
      c.kill('SIGTERM');
      const killed = await Promise.race([exited.then(() => false), sleep(15_000).then(() => true)]);
      if (killed) {
        c.kill('SIGKILL');
        await exited;
      }
    }));
  }
}

async function tail(file: string, lines = 25): Promise<string> {
  const text = await readFile(file, 'utf8').catch(() => '');
  return text.split('\n').slice(-lines).join('\n');
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
