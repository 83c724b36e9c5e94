// Small helpers of the chaos run.
import { setTimeout as sleep } from 'node:timers/promises';

/** Rejects when p has not settled within ms (a server being restarted can leave a call hanging). */
export function withTimeout<T>(p: Promise<T>, ms: number, what: string): Promise<T> {
  return Promise.race([p, sleep(ms).then(() => { throw new Error(`${what} timed out after ${ms} ms`); })]);
}

/** The first line of an error's message, short enough for the sequence log. */
export const errText = (err: unknown) => (err instanceof Error ? err.message : String(err)).split('\n')[0]!.slice(0, 300);
