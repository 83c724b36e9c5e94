// Small helpers of the benchmark: progress lines, a bounded pool, percentiles and plain-text tables.
import { setTimeout as sleep } from 'node:timers/promises';

const benchStart = Date.now();

/** One progress line, prefixed with the time since the benchmark started. */
export function progress(line: string): void {
  const s = Math.round((Date.now() - benchStart) / 1000);
  const stamp = `${String(Math.floor(s / 60)).padStart(2, '0')}:${String(s % 60).padStart(2, '0')}`;
  console.log(`[${stamp}] ${line}`);
}

/** An error that names the phase of the benchmark it happened in. */
export class PhaseError extends Error {
  readonly phase: string;
  constructor(phase: string, cause: unknown) {
    super(`${phase}: ${cause instanceof Error ? cause.message : String(cause)}`, { cause });
    this.name = 'PhaseError';
    this.phase = phase;
  }
}

let currentPhase = 'start-up';

/** The phase running now (for the error report when something outside phase() fails). */
export function phaseNow(): string {
  return currentPhase;
}

/** Runs fn as a named phase: progress lines at its start and end, and errors that say which phase failed. */
export async function phase<T>(name: string, fn: () => Promise<T>): Promise<T> {
  const before = currentPhase;
  currentPhase = name;
  const t0 = Date.now();
  progress(`${name} ...`);
  try {
    const out = await fn();
    progress(`${name}: done in ${secs(Date.now() - t0)} s`);
    return out;
  } catch (err) {
    if (err instanceof PhaseError) throw err;
    throw new PhaseError(name, err);
  } finally {
    currentPhase = before;
  }
}

/** Runs fn over items with at most `concurrency` calls in flight; results in item order. */
export async function pool<T, R>(items: readonly T[], concurrency: number, fn: (item: T, index: number) => Promise<R>): Promise<R[]> {
  const out = new Array<R>(items.length);
  let next = 0;
  const lanes = Array.from({ length: Math.min(concurrency, items.length) }, async () => {
    for (;;) {
      const i = next++;
      if (i >= items.length) return;
      out[i] = await fn(items[i]!, i);
    }
  });
  await Promise.all(lanes);
  return out;
}

/** Retries fn a few times on errors that a busy server gives (timeouts, 429, 5xx, connection resets). */
export async function retrying<T>(what: string, fn: () => Promise<T>, attempts = 5): Promise<T> {
  let last: unknown;
  for (let i = 0; i < attempts; i++) {
    try {
      return await fn();
    } catch (err) {
      last = err;
      const status = (err as { status?: number }).status;
      if (status !== undefined && status < 500 && status !== 429 && status !== 409) throw err;
      await sleep(200 * 2 ** i);
    }
  }
  throw new Error(`${what} failed after ${attempts} attempts: ${last instanceof Error ? last.message : String(last)}`);
}

/** Seconds with one decimal. */
export function secs(ms: number): string {
  return (ms / 1000).toFixed(1);
}

export interface Distribution {
  count: number;
  min: number;
  p50: number;
  p95: number;
  p99: number;
  max: number;
  mean: number;
}

/** Nearest-rank percentiles of a sample (values in ms). */
export function distribution(values: readonly number[]): Distribution | null {
  if (values.length === 0) return null;
  const v = [...values].sort((a, b) => a - b);
  const rank = (p: number) => v[Math.min(v.length - 1, Math.max(0, Math.ceil((p / 100) * v.length) - 1))]!;
  return { count: v.length, min: v[0]!, p50: rank(50), p95: rank(95), p99: rank(99), max: v[v.length - 1]!, mean: v.reduce((a, b) => a + b, 0) / v.length };
}

/** A plain-text table: a header row, a rule, then rows; numbers right-aligned. */
export function table(header: string[], rows: (string | number)[][]): string {
  const cells = [header, ...rows.map((r) => r.map((c) => (typeof c === 'number' ? fmt(c) : c)))];
  const widths = header.map((_, i) => Math.max(...cells.map((r) => (r[i] ?? '').length)));
  const numeric = header.map((_, i) => rows.length > 0 && rows.every((r) => typeof r[i] === 'number' || /^[-+]?[\d.,]+( ?[a-zA-Z%x]*)?$|^-$/.test(String(r[i] ?? ''))));
  const line = (r: string[]) => r.map((c, i) => (numeric[i] && r !== cells[0] ? (c ?? '').padStart(widths[i]!) : (c ?? '').padEnd(widths[i]!))).join('  ').trimEnd();
  return [line(cells[0]!), widths.map((w) => '-'.repeat(w)).join('  '), ...cells.slice(1).map(line)].join('\n');
}

/** A number for a table: integers as is, small values with up to two decimals. */
export function fmt(n: number): string {
  if (!Number.isFinite(n)) return '-';
  if (Number.isInteger(n)) return String(n);
  if (Math.abs(n) >= 100) return n.toFixed(0);
  if (Math.abs(n) >= 10) return n.toFixed(1);
  return n.toFixed(2);
}

/** "PASS" or "MISS" for a target, never an assertion. */
export function verdict(ok: boolean | null): string {
  return ok === null ? 'n/a' : ok ? 'PASS' : 'MISS';
}
