import { setTimeout as sleep } from 'node:timers/promises';

/** Thrown by a polled function to stop polling at once (say, the server being waited for has exited). */
export class StopPolling extends Error {}

/**
 * Polls fn until it returns a value other than undefined. A thrown error counts as "not yet", except StopPolling,
 * which ends the wait; on timeout the error says what was last seen, so a failure explains itself.
 */
export async function eventually<T>(
  what: string, fn: () => Promise<T | undefined>,
  /** intervalMs is the pause between reads, or with `paced` the time from the start of one read to the next. */
  opts: { timeoutMs?: number; intervalMs?: number; paced?: boolean } = {},
): Promise<T> {
  const deadline = Date.now() + (opts.timeoutMs ?? 60_000);
  let last: unknown;
  for (;;) {
    const started = Date.now();
    try {
      const v = await fn();
      if (v !== undefined) return v;
      last = 'not yet';
    } catch (err) {
      if (err instanceof StopPolling) throw err;
      last = err instanceof Error ? err.message : err;
    }
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}; last: ${typeof last === 'string' ? last : JSON.stringify(last)}`);
    const interval = opts.intervalMs ?? 250;
    await sleep(opts.paced ? Math.max(0, interval - (Date.now() - started)) : interval);
  }
}
