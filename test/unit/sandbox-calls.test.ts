// Calls into workflow code without a watchdog thread each, and workflow promises without a stack trace each
// (operator/sandbox-calls.ts), on real threads: a thread
// started with the module preloaded, as the Temporal SDK's workflow thread is in the operator, runs a node:vm call
// that outlasts its `timeout` to the end while the main thread sees it running and stuck; without the watch set up,
// the same call is cut off at its deadline as before. (A preload runs on a thread started from a file, as the SDK's
// is, not on one started from a string.)
import assert from 'node:assert/strict';
import { fileURLToPath } from 'node:url';
import { Script, createContext } from 'node:vm';
import { Worker } from 'node:worker_threads';
import { test } from 'node:test';
import { skipPromiseStacks, watchCalls } from '../../operator/sandbox-calls.ts';

const preload = fileURLToPath(new URL('../../operator/sandbox-calls.ts', import.meta.url));

/**
 * A thread that runs a node:vm call busy for `busyMs` under a `timeout` of 100 ms (or, with `shortCallsMs`, calls that
 * return at once, one after another, for that long), and says how it ended.
 */
function busyThread(busyMs: number, shortCallsMs?: number): { started: Promise<void>; ended: Promise<{ ok: boolean; err?: string }> } {
  const workerData = shortCallsMs === undefined ? { busyMs } : { shortCallsMs };
  const worker = new Worker(new URL('../fixtures/busy-thread.ts', import.meta.url), { workerData, execArgv: ['--import', preload] });
  let started!: () => void;
  const startedP = new Promise<void>((resolve) => (started = resolve));
  const ended = new Promise<{ ok: boolean; err?: string }>((resolve, reject) => {
    worker.on('message', (m: unknown) => {
      if (m === 'started') started();
      else {
        resolve(m as { ok: boolean; err?: string });
        void worker.terminate();
      }
    });
    worker.on('error', reject);
  });
  return { started: startedP, ended };
}

test('a watched thread runs a call past its node:vm timeout to the end; the main thread sees it running, then stuck', async () => {
  const calls = watchCalls(200);
  try {
    const t = busyThread(800);
    await t.started;
    let longest = 0;
    let stuck: string | undefined;
    const watching = (async () => {
      for (let i = 0; i < 60 && !stuck; i++) {
        await new Promise((r) => setTimeout(r, 20));
        longest = Math.max(longest, calls.runningMs());
        stuck = calls.stuck();
      }
    })();
    const ended = await t.ended;
    await watching;
    assert.deepEqual(ended, { ok: true }, 'the call ran past its 100 ms timeout to the end');
    assert.equal(calls.active, true, 'the thread took its calls over');
    assert.ok(longest >= 200, `the call was seen running (longest ${longest} ms)`);
    assert.match(stuck ?? '', /a call into workflow code has run \d+ s without returning/);
    assert.equal(calls.runningMs(), 0, 'no call in progress once it returned');
    assert.equal(calls.stuck(), undefined);
  } finally {
    calls.close();
  }
});

// Found in a benchmark's log: "a call into workflow code has run 1796541398 s without returning" (and /healthz failing)
// from an operator whose workflow calls all returned in microseconds. The main thread read the call's start twice,
// and a call that ended between the two reads left it 0: now minus 0. The thread here starts and ends calls as fast
// as it can while the main thread reads; a read of a start must be one read.
test('a call that ends while the main thread reads it is never seen as running since 1970', async () => {
  const calls = watchCalls(5_000);
  try {
    const t = busyThread(0, 1_500);
    await t.started;
    let reads = 0;
    let longest = 0;
    let stuck: string | undefined;
    let ended: { ok: boolean; err?: string } | undefined;
    void t.ended.then((e) => (ended = e));
    while (!ended) {
      // Synchronous bursts of reads, racing the thread; a timer between them lets its message in.
      for (let i = 0; i < 200_000; i++, reads++) {
        longest = Math.max(longest, calls.runningMs());
        stuck ??= calls.stuck();
      }
      await new Promise((r) => setImmediate(r));
    }
    assert.deepEqual(ended, { ok: true });
    assert.equal(calls.active, true, 'the thread took its calls over');
    assert.ok(reads > 1_000_000, `the main thread read often enough to meet a call ending (${reads} reads)`);
    assert.ok(longest < 5_000, `no call seen running longer than the thread ran (longest ${longest} ms)`);
    assert.equal(stuck, undefined);
  } finally {
    calls.close();
  }
});

test('without the watch set up, a thread with the module preloaded keeps the node:vm deadline', async () => {
  const calls = watchCalls(200);
  calls.close();
  const ended = await busyThread(800).ended;
  assert.equal(ended.ok, false);
  assert.match(ended.err ?? '', /timed out/);
  assert.equal(calls.active, false);
});

test('on the main thread the module changes nothing: a call past its timeout is cut off', () => {
  const calls = watchCalls(200);
  try {
    assert.throws(() => new Script('const end = Date.now() + 300; while (Date.now() < end) {}').runInContext(createContext({}), { timeout: 50 }), /timed out/);
  } finally {
    calls.close();
  }
});

/** Whether the Temporal SDK's promise hook is installed on a thread started now with the module preloaded. */
async function promiseHookOnThread(): Promise<boolean> {
  const worker = new Worker(new URL('../fixtures/promise-hook-thread.ts', import.meta.url), { execArgv: ['--import', preload] });
  try {
    const m = await new Promise<{ promiseHookInstalled: boolean }>((resolve, reject) => {
      worker.once('message', resolve);
      worker.once('error', reject);
    });
    return m.promiseHookInstalled;
  } finally {
    await worker.terminate();
  }
}

test('a thread started after skipPromiseStacks installs no promise hook; one started after close() does', async () => {
  const stacks = skipPromiseStacks();
  try {
    assert.equal(await promiseHookOnThread(), false, 'no stack captured per promise');
    assert.equal(stacks.skipped, true, 'the main thread knows');
  } finally {
    stacks.close();
  }
  assert.equal(await promiseHookOnThread(), true, 'the SDK\'s hook, as without the module');
});
