// How the CLI tells "no worker answered" from other query failures, on errors shaped as the Temporal client
// raises them (a ServiceError wrapping the transport's gRPC error). Each shape was seen against the dev server.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { idleSince, noWorker } from '../../client/control.ts';

const wrapped = (code: number, message: string) => Object.assign(new Error('Failed to query Workflow'), { cause: Object.assign(new Error(`${code} ${message}`), { code }) });

test('the server knows no poller on the task queue', () => {
  assert.equal(noWorker(wrapped(4, 'DEADLINE_EXCEEDED'), 'q', []), 'no worker is polling task queue "q"');
});

test('the server refuses at once: FAILED_PRECONDITION, no poller seen recently', () => {
  const err = wrapped(9, 'FAILED_PRECONDITION: no poller seen for task queue recently, worker may be down');
  assert.equal(noWorker(err, 'q', [1_800_000_000]), 'no worker is polling task queue "q" (a worker last polled at 2027-01-15T08:00:00.000Z)');
});

test('nobody took the query before the client\'s deadline (CANCELLED) or the server\'s (DEADLINE_EXCEEDED)', () => {
  for (const err of [wrapped(1, 'CANCELLED: Call cancelled'), wrapped(4, 'DEADLINE_EXCEEDED')]) {
    assert.match(noWorker(err, 'q', [1_800_000_000]) ?? '', /^no worker answered within 10 s on task queue "q" \(a worker last polled at /);
  }
});

test('any other failure is not blamed on a missing worker', () => {
  assert.equal(noWorker(wrapped(9, 'FAILED_PRECONDITION: something else'), 'q', [1_800_000_000]), undefined);
  assert.equal(noWorker(wrapped(3, 'INVALID_ARGUMENT: unknown query type'), 'q', undefined), undefined);
  assert.equal(noWorker(new Error('boom'), 'q', undefined), undefined);
});

test('a control is not sent to a task queue no worker has polled for longer than a worker ever waits between polls (90 s)', () => {
  const now = 1_800_000_000_000;
  assert.equal(idleSince([], 'q', now), 'no worker is polling task queue "q"');
  assert.equal(idleSince([now - 91_000, now - 300_000], 'q', now), `no worker has polled task queue "q" since ${new Date(now - 91_000).toISOString()}`);
  assert.equal(idleSince([now - 300_000, now - 60_000], 'q', now), undefined, 'one polled a minute ago: it may be in a long poll');
});
