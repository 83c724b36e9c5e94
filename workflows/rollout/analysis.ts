// The canary's analysis as pure functions: a metric's answer judged against its range, and the run's tally
// decided: passed, failed (roll back), blind (hold: too many inconclusive results in a row) or not yet decided.
import type { AnalysisVerdict, MetricValue } from '../../activities/types.ts';
import type { AnalysisMetric } from '../../reconcile/plan.ts';

/** How many verdicts of each metric the rollout keeps (status, the query, the UI). */
export const keptVerdicts = 5;

/** The newest `per` verdicts of each metric, in the order they came. */
export function keepPerMetric(verdicts: readonly AnalysisVerdict[], per = keptVerdicts): AnalysisVerdict[] {
  const seen = new Map<string, number>();
  const kept: AnalysisVerdict[] = [];
  for (let i = verdicts.length - 1; i >= 0; i--) {
    const v = verdicts[i]!;
    const n = seen.get(v.metric) ?? 0;
    if (n >= per) continue;
    seen.set(v.metric, n + 1);
    kept.push(v);
  }
  return kept.reverse();
}

/** The last verdict of each metric, as one line each: `name: value vs range: result`. */
export function lastVerdicts(verdicts: readonly AnalysisVerdict[]): string[] {
  const last = new Map<string, AnalysisVerdict>();
  for (const v of verdicts) last.set(v.metric, v);
  return [...last.values()].map((v) => `${v.metric}: ${v.value ?? 'no value'} vs ${describeRange(v.range ?? {})}: ${v.result}${v.dryRun ? ' (dry run)' : ''}`);
}

/**
 * Judges one answer: inside the range is a pass, outside a fail, and an infinity (a division by zero) is compared like
 * any number. Everything else is inconclusive, never a pass: no series, NaN, an error (see whyNoValue).
 */
export function judge(metric: AnalysisMetric, answer: MetricValue, at: string, weight: number): AnalysisVerdict {
  const base = { metric: metric.name, at, range: metric.range, query: metric.query, weight, ...(metric.dryRun ? { dryRun: true } : {}) };
  const value = answer.value ?? infinities[answer.nonFinite ?? ''];
  if (value === undefined) return { ...base, result: 'inconclusive', message: whyNoValue(metric, answer) };
  const { min, max } = metric.range;
  const low = min !== undefined && value < min;
  const high = max !== undefined && value > max;
  const range = describeRange(metric.range);
  // Status and history are JSON, which has no Infinity: an infinite value is in the message only.
  const finite = Number.isFinite(value);
  const shown = finite ? String(round(value)) : `${answer.nonFinite} (a division by zero)`;
  const recorded = finite ? { value } : {};
  if (low || high) return { ...base, result: 'fail', ...recorded, message: `${shown} is ${low ? 'below' : 'above'} ${range}` };
  return { ...base, result: 'pass', ...recorded, message: `${shown} is within ${range}` };
}

const infinities: Partial<Record<string, number>> = { '+Inf': Infinity, '-Inf': -Infinity };

/**
 * Why an answer without a number to compare is inconclusive, in words. The built-in templates (reconcile/analysis.ts)
 * answer no series only when no request reached the canary, so only for them does the message say so; NaN is a 0/0,
 * which no range contains and no range excludes.
 */
export function whyNoValue(metric: AnalysisMetric, answer: MetricValue): string {
  if (answer.nonFinite === 'NaN') {
    if (metric.template === 'request-duration') {
      return 'NaN: requests reached the canary but Istio reported no durations for them (no istio_request_duration_milliseconds buckets); NaN is neither a pass nor a fail';
    }
    return 'the query returned NaN, not a number (a 0/0, such as a ratio over an interval without requests, or a quantile of an empty histogram): neither a pass nor a fail';
  }
  if (answer.noSeries) return metric.template ? 'no data: no request reached the canary in the interval' : 'no data: the query matched no series';
  return answer.error ?? 'no value';
}

/** A range in words: "at least 99", "at most 500", "between 1 and 2". */
export function describeRange(r: { min?: number; max?: number }): string {
  if (r.min !== undefined && r.max !== undefined) return `the range ${r.min}..${r.max}`;
  return r.min !== undefined ? `the minimum ${r.min}` : `the maximum ${r.max ?? '?'}`;
}

const round = (n: number) => Math.round(n * 1000) / 1000;

/** Consecutive results of one metric. */
export interface MetricTally {
  failures: number;
  inconclusive: number;
}

export type AnalysisDecision =
  /** Every metric that decides passed in this run. */
  | { kind: 'pass' }
  /** A metric was outside its range failureLimit times in a row: roll back. */
  | { kind: 'fail'; verdict: AnalysisVerdict; times: number }
  /** A metric was inconclusive inconclusiveLimit times in a row: hold the rollout until it answers again. */
  | { kind: 'blind'; verdict: AnalysisVerdict; times: number }
  /** Not decided yet (a failure or an inconclusive result below its limit). */
  | { kind: 'pending' };

/**
 * Adds one run's verdicts to the tallies and decides. A pass resets a metric's failures and a conclusive result its
 * inconclusive count; an inconclusive result leaves the failure streak as it is. Dry-run metrics are judged and
 * recorded but never decide.
 */
export function tally(tallies: Record<string, MetricTally>, verdicts: AnalysisVerdict[], metrics: AnalysisMetric[]): { tallies: Record<string, MetricTally>; decision: AnalysisDecision } {
  const next = { ...tallies };
  let fail: AnalysisDecision | undefined;
  let blind: AnalysisDecision | undefined;
  let allPass = true;
  for (const v of verdicts) {
    const metric = metrics.find((m) => m.name === v.metric);
    if (!metric || metric.dryRun) continue;
    const t = { ...(next[v.metric] ?? { failures: 0, inconclusive: 0 }) };
    if (v.result === 'pass') t.failures = 0;
    if (v.result === 'fail') t.failures++;
    t.inconclusive = v.result === 'inconclusive' ? t.inconclusive + 1 : 0;
    next[v.metric] = t;
    if (v.result !== 'pass') allPass = false;
    if (!fail && t.failures >= metric.failureLimit) fail = { kind: 'fail', verdict: v, times: t.failures };
    if (!blind && t.inconclusive >= metric.inconclusiveLimit) blind = { kind: 'blind', verdict: v, times: t.inconclusive };
  }
  return { tallies: next, decision: fail ?? blind ?? (allPass ? { kind: 'pass' } : { kind: 'pending' }) };
}
