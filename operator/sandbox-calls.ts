// Calls into workflow code without a watchdog thread each, and one cheap check of them instead.
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

if (!isMainThread) {
  const shared = getEnvironmentData(KEY);
  if (shared instanceof SharedArrayBuffer) takeOver(new Float64Array(shared));
}
