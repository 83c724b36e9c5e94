// How the operator's Node process is tuned (memory, and calls into workflow code): the one place that says it. The
// container image (Dockerfile), `npm start`, the demo and every operator the tests and the benchmark spawn start it
// with runtimeEnv and PRELOAD (a unit test checks that the Dockerfile and package.json say the same); runOperator
// applies the rest at start.
// docs/benchmark.md ("Where the memory goes") has the measurements.
import { join } from 'node:path';
import { setFlagsFromString } from 'node:v8';

/**
 * V8's young generation kept small (2 MB semi-spaces instead of 16, on the main thread and on the workflow thread):
 * with the default, most of each heap's growth during a wave of reconciles was young-generation room, never used.
 * It has to be set before the process starts (V8 sizes a heap once).
 */
export const NODE_OPTIONS = '--max-semi-space-size=2';

/**
 * glibc's malloc arenas capped: by default each thread that allocates (the Temporal core's Tokio threads, libuv's
 * pool, the workflow thread) may get an arena of its own, and what is freed in each stays mapped.
 */
export const MALLOC_ARENA_MAX = '2';

/**
 * The module node preloads (`--import`) before the operator's entry point, which then runs on the workflow thread
 * too: calls into workflow code without a watchdog thread each (operator/sandbox-calls.ts). A path from the
 * repository's root; an argument of node's rather than NODE_OPTIONS, so that it resolves wherever the entry point
 * does (the image's ENTRYPOINT, `npm start`, the launcher bin/application-operator, the spawners' preloadArgs) and
 * no other node process inherits it.
 */
export const PRELOAD = 'operator/sandbox-calls.ts';

/** The node arguments that go before bin/application-operator.ts, for the repository at `root`. */
export function preloadArgs(root: string): string[] {
  return [`--import=${join(root, PRELOAD)}`];
}

/** The environment an operator process is started with (what the Dockerfile sets with ENV). */
export const runtimeEnv: Readonly<Record<string, string>> = { NODE_OPTIONS, MALLOC_ARENA_MAX };

/**
 * How far V8 lets a heap grow past what the last full collection kept before collecting again: 1.1x. V8's own
 * factor (up to 4x when collecting is cheap) let garbage promoted out of the small young generation pile up to
 * three times the live heap between full collections (the main heap at 157 MB used, 60 of them live). Node does
 * not take it in NODE_OPTIONS; V8 reads it at each full collection, so setting it at start is enough (and it
 * reaches the workflow thread, started later).
 */
export const HEAP_GROWING_PERCENT = 10;

/** Applies the settings that can be set from inside the process (before the Temporal worker starts its thread). */
export function tuneHeap(): void {
  setFlagsFromString(`--heap-growing-percent=${HEAP_GROWING_PERCENT}`);
}

/** The same environment on top of another: NODE_OPTIONS it already has are kept, ours go first. */
export function withRuntimeEnv(env: NodeJS.ProcessEnv): NodeJS.ProcessEnv {
  const options = env['NODE_OPTIONS']?.includes('--max-semi-space-size') ? env['NODE_OPTIONS'] : [NODE_OPTIONS, env['NODE_OPTIONS']].filter(Boolean).join(' ');
  return { ...env, NODE_OPTIONS: options, MALLOC_ARENA_MAX: env['MALLOC_ARENA_MAX'] ?? MALLOC_ARENA_MAX };
}

/** Whether this process was started with runtimeEnv (the start-up log warns when not). */
export function runtimeTuned(env: NodeJS.ProcessEnv = process.env, execArgv: readonly string[] = process.execArgv): boolean {
  const flags = `${env['NODE_OPTIONS'] ?? ''} ${execArgv.join(' ')}`;
  return flags.includes('--max-semi-space-size') && env['MALLOC_ARENA_MAX'] !== undefined;
}
