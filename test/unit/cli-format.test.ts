import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { ago, failingActivities, formatFailing } from '../../client/control.ts';

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
