// Calls into workflow code without a watchdog thread each, and one cheap check of them instead; and workflow promises
// without a stack trace each.
//
// The Temporal SDK runs workflow code in a node:vm context on a thread of its own and passes every call into it
// (three to five per activation) node:vm's `timeout` option: its deadlock detection. Node implements that option by
// starting a watchdog thread for the call and joining it after: measured on this project's machines, 250 µs of CPU
// per call against 3 µs without, a fifth of the operator's CPU per created Application (docs/benchmark.md,
// "Calls into workflow code").
//
// This module is preloaded into the operator's process (node's `--import`: operator/runtime.ts PRELOAD), so it runs
// on the workflow thread too (the SDK's pool of one thread) before the SDK loads there. On a worker thread whose
// process set up `watchCalls` (before the Temporal worker started its thread), it drops `timeout` from node:vm calls and writes the start of
// the call in progress where the main thread reads it: a call that has not returned within the deadline fails
// /healthz (a workflow stuck in an endless loop has the whole thread, as the SDK's own check would have reported
// it), and the kubelet restarts the process. Without `watchCalls` (another process, `--stuck-workflow-seconds=0`)
// nothing changes: each call keeps the SDK's own deadline.
//
// The SDK also installs a promise hook on that thread which, for every promise workflow code creates, captures a stack
// trace and maps it through the bundle's source map, so that the `__stack_trace` query (the Temporal UI's "Stack
// Trace" tab) can say where each workflow waits: a third of the workflow thread's CPU in a wave of creates
// (docs/benchmark.md, "Workflow promises without a stack each"). On a thread whose process called `skipPromiseStacks`,
// the hook is not installed; the query then answers that stack traces are not enabled on this worker
// (`--workflow-stack-traces` keeps them).
import { createRequire } from 'node:module';
import { Script } from 'node:vm';
import { getEnvironmentData, isMainThread, setEnvironmentData } from 'node:worker_threads';

/** The name the shared slots travel under, from the main thread to the threads it starts. */
const KEY = 'application-operator/sandbox-calls';

/** Slot 0: when the call in progress began (ms since epoch; 0 when none). Slot 1: 1 once a thread took calls over. */
type Slots = Float64Array;

/** What the main thread reads of the calls into workflow code. */
export interface CallWatch {
  /** How long the call in progress has been running (ms); 0 when none. */
  runningMs(now?: number): number;
  /** What to say when the call in progress has run past the deadline; undefined while none has. */
  stuck(now?: number): string | undefined;
  /** Whether a thread took its calls over (the preload ran there): false means each call keeps the SDK's deadline. */
  readonly active: boolean;
  /** Threads started from now on keep the SDK's deadline (those already started go on reporting here). */
  close(): void;
}

/**
 * Sets up the slots a thread started after this call finds: its calls into workflow code then run without a
 * watchdog thread each, and report here instead, where a call past `deadlineMs` is `stuck`. Call it before the
 * Temporal worker is created.
 */
export function watchCalls(deadlineMs: number): CallWatch {
  const slots: Slots = new Float64Array(new SharedArrayBuffer(2 * Float64Array.BYTES_PER_ELEMENT));
  setEnvironmentData(KEY, slots.buffer);
  // One read of the start: the thread may end its call (and write 0) between two reads, and now minus 0 is 56 years.
  const runningMs = (now = Date.now()) => {
    const start = slots[0]!;
    return start ? Math.max(0, now - start) : 0;
  };
  return {
    runningMs,
    stuck(now = Date.now()) {
      const ms = runningMs(now);
      if (ms <= deadlineMs) return undefined;
      return `a call into workflow code has run ${Math.round(ms / 1000)} s without returning (an endless loop in a workflow?): no workflow on this process moves until it does`;
    },
    get active() {
      return slots[1] === 1;
    },
    close() {
      setEnvironmentData(KEY, undefined);
    },
  };
}

/** Replaces Script#runInContext on this thread: `timeout` dropped, the call's start written to `slots`. */
function takeOver(slots: Slots): void {
  const { runInContext } = Script.prototype as { runInContext: (this: Script, ...args: Parameters<Script['runInContext']>) => unknown };
  let depth = 0;
  Script.prototype.runInContext = function withoutWatchdog(this: Script, context, options): unknown {
    const { timeout: _deadline, ...rest } = options ?? {};
    if (depth++ === 0) slots[0] = Date.now();
    try {
      return runInContext.call(this, context, rest);
    } finally {
      if (--depth === 0) slots[0] = 0;
    }
  };
  slots[1] = 1;
}

/** The Temporal SDK's module that holds the workflow thread's global handlers (its promise hook among them). */
export const SDK_HANDLERS_MODULE = '@temporalio/worker/lib/workflow/vm-shared.js';

/** The name the flag of `skipPromiseStacks` travels under. */
const STACKS_KEY = 'application-operator/promise-stacks';

/** What the main thread knows of the workflow thread's promise stacks. */
export interface PromiseStacks {
  /** Whether a thread started since skips them: false means the SDK's hook is installed (no preload, or an SDK laid out otherwise). */
  readonly skipped: boolean;
  /** Threads started from now on install the SDK's hook again. */
  close(): void;
}

/**
 * Workflow threads started after this call keep no stack trace per promise: the Temporal SDK's promise hook is not
 * installed there. Call it before the Temporal worker is created.
 */
export function skipPromiseStacks(): PromiseStacks {
  const flag = new Int32Array(new SharedArrayBuffer(Int32Array.BYTES_PER_ELEMENT));
  setEnvironmentData(STACKS_KEY, flag.buffer);
  return {
    get skipped() {
      return Atomics.load(flag, 0) === 1;
    },
    close() {
      setEnvironmentData(STACKS_KEY, undefined);
    },
  };
}

/**
 * The SDK's handlers of this thread (the module its workflow thread loads) never install their promise hook: the
 * workflows it creates are told stack traces are off, and their stack-trace query says so. A Temporal SDK laid out
 * otherwise (no such module or method) is left as it is, and the flag stays down: the main thread says so at start.
 */
function withoutPromiseStacks(flag: Int32Array): void {
  try {
    const require = createRequire(import.meta.url);
    const { globalHandlers } = require(SDK_HANDLERS_MODULE) as { globalHandlers?: { setPromiseHook?: unknown } };
    if (typeof globalHandlers?.setPromiseHook !== 'function') return;
    globalHandlers.setPromiseHook = () => undefined;
    Atomics.store(flag, 0, 1);
  } catch {
    // not this SDK's layout: its hook stays
  }
}

if (!isMainThread) {
  const shared = getEnvironmentData(KEY);
  if (shared instanceof SharedArrayBuffer) takeOver(new Float64Array(shared));
  const stacks = getEnvironmentData(STACKS_KEY);
  if (stacks instanceof SharedArrayBuffer) withoutPromiseStacks(new Int32Array(stacks));
}
