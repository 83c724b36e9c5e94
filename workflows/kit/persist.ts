// An activity call that must eventually succeed, and never silently: while it keeps failing with a retryable error
// the entity says so (in status, in the UI) and tries again with a growing delay; once it works again it says what
// is true now. A forward step may give way to an abort; an undo never gives up.
import { ActivityFailure, ApplicationFailure, TimeoutFailure, isCancellation, log } from '@temporalio/workflow';
import { duration, waitFor } from '../summary.ts';

/** What persist needs of the entity it works for. */
export interface PersistHooks {
  /** Failure types no retry can fix: thrown at once. */
  fatal: readonly string[];
  /** The call keeps failing: `message` says how; show it (best effort). */
  failing(message: string): Promise<void>;
  /** It works again after failing: show what is true now. */
  recovered(): Promise<void>;
  /** Ends a wait between tries early (an abort); `stopped` then decides whether to give up. */
  interrupted(): boolean;
  /** Called when a wait ended early: throws to give up (an abort), returns to try again. */
  stopped(): void;
  /** Called after each wait between tries: continues as new when the history is due (see rollover.ts). */
  waited(): Promise<void>;
  /** The wait after the first failed try, doubled each time up to maxMs (default 2 s, up to 60 s). */
  retryDelay?: { firstMs: number; maxMs: number };
}

/** Runs `once` until it succeeds: see the module's comment. `undo`: never interrupted. */
export async function persist<T>(what: string, once: () => Promise<T>, hooks: PersistHooks, opts: { undo?: boolean } = {}): Promise<T> {
  for (let attempt = 1; ; attempt++) {
    try {
      const out = await once();
      if (attempt > 1) await hooks.recovered();
      return out;
    } catch (err) {
      if (isCancellation(err) || !isActivityError(err) || hooks.fatal.includes(failureType(err) ?? '')) throw err;
      const { firstMs, maxMs } = hooks.retryDelay ?? { firstMs: 2000, maxMs: 60_000 };
      const delayMs = Math.min(firstMs * 2 ** (attempt - 1), maxMs);
      const message = `"${what}" keeps failing (attempt ${attempt}): ${describeFailure(err)}; trying again in ${delayMs / 1000} s`;
      log.warn(message);
      await hooks.failing(message);
      const interrupted = await waitFor(() => !opts.undo && hooks.interrupted(), delayMs, `retry "${what}" in ${duration(delayMs)}`);
      await hooks.waited();
      if (interrupted) hooks.stopped();
    }
  }
}

/** An activity's failure: wrapped in an ActivityFailure, or (a local activity's) as the activity raised it or timed out. */
export function isActivityError(err: unknown): boolean {
  return err instanceof ActivityFailure || err instanceof ApplicationFailure || err instanceof TimeoutFailure;
}

/** The failure type an activity raised (ApplicationFailure.type), if any. */
export function failureType(err: unknown): string | undefined {
  const cause = err instanceof ActivityFailure ? err.cause : err;
  return cause instanceof ApplicationFailure ? cause.type ?? undefined : undefined;
}

/** A failure in words: its type and message when an activity raised it. */
export function describeFailure(err: unknown): string {
  const cause = err instanceof ActivityFailure ? err.cause ?? err : err;
  if (cause instanceof ApplicationFailure) return `${cause.type ?? 'error'}: ${cause.message}`;
  return cause instanceof Error ? cause.message : String(cause);
}
