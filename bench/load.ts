// The machine's load while the benchmark runs: the 1-minute load average and the share of CPU the machine spent
// outside the processes the benchmark measures, sampled every few seconds, so every result says how busy the
// machine was (a 2-core machine shared with other test runs makes wall-clock ratios noisy).
import { loadavg } from 'node:os';
import { cpuSnapshot, type CpuSnapshot } from './cpu.ts';

export interface LoadSample {
  /** ms since epoch. */
  at: number;
  /** 1-minute load average. */
  load1: number;
  /** Share of the machine's CPU (all cores) used by processes the benchmark does not measure, since the last sample. */
  othersShare: number;
}

export interface LoadSummary {
  samples: number;
  load1: { mean: number; max: number };
  othersShare: { mean: number; max: number };
}

/** Samples the load every `intervalMs` until stopped; `measured` names the pids whose CPU is ours. */
export class LoadSampler {
  readonly samples: LoadSample[] = [];
  private readonly timer: NodeJS.Timeout;
  private last: { at: number; cpu: CpuSnapshot };
  private readonly measured: () => [string, number | undefined][];
  private readonly cores: number;

  constructor(measured: () => [string, number | undefined][], cores: number, intervalMs = 2000) {
    this.measured = measured;
    this.cores = cores;
    this.last = { at: Date.now(), cpu: cpuSnapshot(measured()) };
    this.timer = setInterval(() => this.sample(), intervalMs);
    this.timer.unref();
  }

  private sample(): void {
    const at = Date.now();
    const cpu = cpuSnapshot(this.measured());
    const seconds = (at - this.last.at) / 1000;
    const ours = Object.entries(cpu).filter(([k]) => k !== 'machine').reduce((n, [k, v]) => n + Math.max(0, v - (this.last.cpu[k] ?? v)), 0);
    const machine = (cpu['machine'] ?? 0) - (this.last.cpu['machine'] ?? 0);
    this.samples.push({ at, load1: loadavg()[0] ?? 0, othersShare: seconds > 0 ? Math.max(0, machine - ours) / (seconds * this.cores) : 0 });
    this.last = { at, cpu };
  }

  /** The load between two moments (ms since epoch). */
  summary(from: number, to: number): LoadSummary {
    const s = this.samples.filter((x) => x.at >= from && x.at <= to);
    const stat = (f: (x: LoadSample) => number) => ({ mean: s.length ? s.reduce((n, x) => n + f(x), 0) / s.length : 0, max: Math.max(0, ...s.map(f)) });
    return { samples: s.length, load1: stat((x) => x.load1), othersShare: stat((x) => x.othersShare) };
  }

  stop(): void {
    clearInterval(this.timer);
  }
}
