// One-line summaries on every activity call and timer (Temporal's user metadata), so the history in the Temporal UI
// and `temporal workflow show` reads as the application's story: "set canary weight 30%", "pause 5m", "gate check",
// "apply children (spec changed)". Pure except for the SDK calls it wraps; safe in workflow code.
import { condition } from '@temporalio/workflow';
import { formatDuration } from '../lib/duration.ts';

/** Temporal keeps summaries short; a longer one is cut with an ellipsis rather than refused. */
const maxSummaryChars = 160;

/** An activity proxy function (proxyActivities' or proxyLocalActivities'), which takes per-call options. */
export interface Summarizable<A extends unknown[], R> {
  executeWithOptions(options: { summary?: string }, args: A): Promise<R>;
}

/** Calls `activity` with `summary` on its ActivityTaskScheduled event. */
export function run<A extends unknown[], R>(activity: Summarizable<A, R>, summary: string, ...args: A): Promise<R> {
  return activity.executeWithOptions({ summary: oneLine(summary) }, args);
}

/** condition() with a timer whose TimerStarted event says what the wait is for; true when `fn` became true first. */
export function waitFor(fn: () => boolean, ms: number, summary: string): Promise<boolean> {
  return condition(fn, ms, { summary: oneLine(summary) });
}

/** A single line of at most maxSummaryChars characters. */
export function oneLine(text: string): string {
  const line = text.replace(/\s+/g, ' ').trim();
  return line.length <= maxSummaryChars ? line : `${line.slice(0, maxSummaryChars - 1)}…`;
}

/** A duration as people write it: 250ms, 45s, 5m, 1h30m. */
export function duration(ms: number): string {
  return formatDuration(ms, '');
}
