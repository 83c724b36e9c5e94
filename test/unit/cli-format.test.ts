import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { ago, failingActivities, formatFailing, formatRollout } from '../../client/control.ts';
import type { RolloutState } from '../../workflows/contract.ts';

const now = Date.parse('2026-12-01T12:00:00Z');

describe('ago', () => {
  const cases: [string, string][] = [
    ['2026-12-01T12:00:00Z', 'just now'],
    ['2026-12-01T11:59:48Z', '12 s ago'],
    ['2026-12-01T11:57:00Z', '3 min ago'],
    ['2026-12-01T09:00:00Z', '3 h ago'],
    ['not a time', 'not a time'],
  ];
  for (const [iso, words] of cases) test(`${iso} is ${words}`, () => assert.equal(ago(iso, now), words));
});

describe('what keeps failing now', () => {
  test('only pending activities that failed, with their attempt, last error and when', () => {
    const failing = failingActivities('application', [
      { activityType: { name: 'reconcileApplication' }, attempt: 4, lastFailure: { message: 'connect ECONNREFUSED 127.0.0.1:6443' }, lastAttemptCompleteTime: { seconds: now / 1000 - 5 } },
      { activityType: { name: 'reconcileApplication' }, attempt: 1 },
    ]);
    assert.deepEqual(failing, [{ workflow: 'application', activity: 'reconcileApplication', attempt: 4, error: 'connect ECONNREFUSED 127.0.0.1:6443', failedAt: '2026-12-01T11:59:55.000Z' }]);
    assert.equal(formatFailing(failing[0]!, now), '  failing now: the reconcile pass (attempt 4, last 5 s ago): connect ECONNREFUSED 127.0.0.1:6443');
  });

  test("a rollout's activity is named as such", () => {
    assert.equal(formatFailing({ workflow: 'rollout', activity: 'checkCanary', attempt: 2, error: 'timed out' }, now), "  failing now: the rollout's activity checkCanary (attempt 2): timed out");
  });
});

describe('the time left in a timed pause', () => {
  const rollout = (pauseEndsAt: string): RolloutState => ({
    namespace: 'default', name: 'web', key: 'v2|nginx:v2', phase: 'Paused', step: 1, totalSteps: 2, weight: 10,
    message: 'step 2/2: pause for 72h', startedAt: '2026-12-01T11:00:00Z', pauseEndsAt, pausedByUser: false,
    deadlineAt: '2026-12-01T13:00:00Z', gates: [], consecutiveFailures: 0,
  });
  const cases: [string, string][] = [
    ['2026-12-01T12:00:12.300Z', '13 s'],
    ['2026-12-01T12:10:00Z', '10m'],
    ['2026-12-04T12:00:00Z', '72h'],
    ['2026-12-01T11:00:00Z', '0 s'],
  ];
  for (const [end, left] of cases) {
    test(`a pause ending at ${end} ends in ${left}`, () => {
      assert.ok(formatRollout(rollout(end), now).includes(`\n  pause ends in ${left} (${end})\n`), formatRollout(rollout(end), now));
    });
  }
});
