import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { endedRolloutReport, endedRolloutsQuery, missing, orphans, runningQuery } from '../../watcher/sweep.ts';

const status = (name: string) => ({ name, code: 0 }) as never;

describe('the sweep of Temporal\'s workflows', () => {
  test('running workflows of a type on the task queue, quoted', () => {
    assert.equal(runningQuery('app-ops', 'applicationWorkflow'), "TaskQueue = 'app-ops' AND WorkflowType = 'applicationWorkflow' AND ExecutionStatus = 'Running'");
    assert.equal(runningQuery("it's", 'x'), "TaskQueue = 'it\\'s' AND WorkflowType = 'x' AND ExecutionStatus = 'Running'");
  });
  test('rollouts closed without finishing since a time', () => {
    assert.equal(endedRolloutsQuery('q', new Date('2026-12-01T10:00:00Z')),
      "TaskQueue = 'q' AND WorkflowType IN ('canaryRolloutWorkflow', 'blueGreenRolloutWorkflow') AND ExecutionStatus IN ('Terminated', 'TimedOut', 'Failed') AND CloseTime > '2026-12-01T10:00:00.000Z'");
  });
  test('missing: what is expected and not running', () => {
    assert.deepEqual(missing(['a', 'b', 'c'], new Set(['b', 'z'])), ['a', 'c']);
    assert.deepEqual(missing([], new Set(['b'])), []);
  });
  test('orphans: a running workflow whose object is unknown in two listings in a row', () => {
    const known = (id: string) => id === 'application/a/kept';
    const first = orphans(['application/a/kept', 'application/a/gone', 'application/a/going'], known, new Set());
    assert.deepEqual(first.orphans, [], 'nothing at the first look: a deletion\'s own signal may be in flight');
    assert.deepEqual([...first.suspects], ['application/a/gone', 'application/a/going']);
    // 'going' ended meanwhile (its deletion's signal did it); 'new' is a first sighting.
    const second = orphans(['application/a/kept', 'application/a/gone', 'application/a/new'], known, first.suspects);
    assert.deepEqual(second.orphans, ['application/a/gone']);
    assert.deepEqual([...second.suspects], ['application/a/new']);
  });
  const cases: { name: string; id: string; status: string; want: ReturnType<typeof endedRolloutReport> }[] = [
    {
      name: 'a terminated rollout is told to its Application\'s workflow', id: 'application/shop/cart/canary', status: 'TERMINATED',
      want: { workflowId: 'application/shop/cart', signal: { phase: 'RolledBack', abnormal: 'Terminated', message: 'the rollout\'s workflow was terminated', closedAt: '2026-12-01T10:00:00.000Z' } },
    },
    {
      name: 'timed out', id: 'application/a/b/canary', status: 'TIMED_OUT',
      want: { workflowId: 'application/a/b', signal: { phase: 'RolledBack', abnormal: 'TimedOut', message: 'the rollout\'s workflow timed out', closedAt: '2026-12-01T10:00:00.000Z' } },
    },
    { name: 'a completed run is no news', id: 'application/a/b/canary', status: 'COMPLETED', want: null },
    { name: 'a run that continued as new is no news', id: 'application/a/b/canary', status: 'CONTINUED_AS_NEW', want: null },
    { name: 'not a rollout', id: 'release/a/b', status: 'TERMINATED', want: null },
  ];
  for (const c of cases) {
    test(c.name, () => assert.deepEqual(endedRolloutReport({ workflowId: c.id, status: status(c.status), closeTime: new Date('2026-12-01T10:00:00Z') }), c.want));
  }
});
