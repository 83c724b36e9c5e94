import { setTimeout as sleep } from 'node:timers/promises';

/** Polls fn until it returns a non-undefined value; on timeout throws with the last observation, so a failure says what was seen. */
export async function eventually<T>(what: string, fn: () => Promise<T | undefined>, opts: { timeoutMs?: number; intervalMs?: number } = {}): Promise<T> {
  const deadline = Date.now() + (opts.timeoutMs ?? 60_000);
  let last: unknown;
  for (;;) {
    try {
      const v = await fn();
      if (v !== undefined) return v;
      last = 'not yet';
    } catch (err) {
      last = err instanceof Error ? err.message : err;
    }
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}; last: ${typeof last === 'string' ? last : JSON.stringify(last)}`);
    await sleep(opts.intervalMs ?? 250);
  }
}
