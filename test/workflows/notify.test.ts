// Rollout notifications on a real worker with scripted activities: what is sent and in which order, with ids that
// are stable across continue-as-new, and a receiver that is down changes nothing about the rollout.
import { ApplicationFailure } from '@temporalio/activity';
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import type { PlanNotification } from '../../reconcile/notify.ts';
import type { RolloutPlan } from '../../reconcile/plan.ts';
import { notificationWorkflowId } from '../../workflows/notify.ts';
import { WorkflowTier, control, plan, type Recorder, type RolloutRun } from './stubs.ts';

const tier = new WorkflowTier();
const team: PlanNotification = { name: 'team', url: 'http://127.0.0.1:9/hook', format: 'json' };
const chat: PlanNotification = { name: 'chat', url: 'http://127.0.0.1:9/chat', format: 'slack', events: ['promoted'] };
/** A weight step, then an approval: the rollout waits for a promote. */
const steps: RolloutPlan['steps'] = [{ kind: 'weight', weight: 20 }, { kind: 'pause', ms: null }];
const paused = (r: Recorder) => r.last()?.phase === 'Paused';

/** The messages delivered (once per id and receiver), by seq. */
const delivered = (r: Recorder, receiver = 'team') => {
  const seen = new Map(r.notifications.filter((n) => n.receiver === receiver).map((n) => [n.message.id, n.message]));
  return [...seen.values()].sort((a, b) => a.seq - b.seq);
};

/** The notification workflows a scenario started, terminated: a scripted receiver that is down would keep them retrying. */
async function cleanUp(run: RolloutRun): Promise<void> {
  const ids = new Set(run.r.notifications.map((n) => notificationWorkflowId(n.message)));
  await Promise.all([...ids].map((id) => tier.client.workflow.getHandle(id).terminate('test over').catch(() => undefined)));
}

describe('rollout notifications', { concurrency: true }, () => {
  before(() => tier.start());
  after(() => tier.stop());

  it('a rollout sends started, its steps, the pause and promoted, in order, each with its own stable id', async () => {
    const run = await tier.startRollout(plan({ steps, notifications: [team, chat] }));
    await run.r.until('paused', paused);
    await run.r.until('started, step and paused sent', (r) => delivered(r).length >= 3);
    await control(run, 'promote', 'olga');
    const result = await tier.finish(run);
    assert.equal(result.phase, 'Promoted');
    await run.r.until('promoted sent to both', (r) => delivered(r).length >= 4 && delivered(r, 'chat').length >= 1);
    const sent = delivered(run.r);
    assert.deepEqual(sent.map((m) => m.event), ['started', 'step', 'paused', 'promoted']);
    assert.deepEqual(sent.map((m) => m.seq), [1, 2, 3, 4]);
    const prefix = `${run.handle.workflowId}/v2@`;
    for (const m of sent) {
      assert.ok(m.id.startsWith(prefix) && m.id.endsWith(`/${m.seq}-${m.event}`), m.id);
      assert.equal(m.application, 'app');
      assert.equal(m.version, 'v2');
    }
    assert.equal(new Set(sent.map((m) => m.id)).size, sent.length, 'distinct ids');
    assert.equal(sent[1]!.weight, 20);
    assert.equal(sent[3]!.phase, 'Promoted');
    assert.match(sent[3]!.message, /by olga/);
    // The receiver with an events filter got only what it asked for, with the same id as the other.
    assert.deepEqual(delivered(run.r, 'chat').map((m) => m.id), [sent[3]!.id]);
    // Every delivery attempt was its message's first: nothing was sent twice.
    assert.equal(run.r.notifications.length, 5);
    // The started notification happened before anything was promoted: the stub saw it first.
    assert.equal(run.r.notifications[0]!.message.event, 'started');
    await tier.replay(tier.client.workflow.getHandle(notificationWorkflowId(sent[0]!)));
  });

  it('a receiver that is down is retried, and the rollout goes on exactly as without it', async () => {
    const down = { fail: { sendNotification: () => new Error('connect ECONNREFUSED 127.0.0.1:9 (scripted)') } };
    const [failing, quiet] = await Promise.all([tier.startRollout(plan({ notifications: [team] }), down), tier.startRollout(plan())]);
    try {
      const [a, b] = await Promise.all([tier.finish(failing), tier.finish(quiet)]);
      assert.equal(a.phase, 'Promoted', a.message);
      assert.deepEqual(a.phase, b.phase);
      assert.deepEqual(failing.r.weights(), quiet.r.weights());
      assert.deepEqual(failing.r.events, quiet.r.events, 'the same Events');
      assert.deepEqual(failing.r.phases(), quiet.r.phases());
      assert.equal(quiet.r.notifications.length, 0, 'a plan without notifications sends none');
      const started = () => failing.r.notifications.filter((n) => n.message.event === 'started');
      await failing.r.until('the started message retried', () => started().length >= 2, 30_000);
      assert.equal(new Set(started().map((n) => n.message.id)).size, 1, 'a retry sends the same id');
    } finally {
      await cleanUp(failing);
    }
  });

  it('a receiver that refuses a message (4xx) is not asked again', async () => {
    const refuses = { fail: { sendNotification: () => ApplicationFailure.nonRetryable('HTTP 400 (scripted)', 'NotificationRejected') } };
    const run = await tier.startRollout(plan({ steps: [{ kind: 'weight', weight: 50 }], notifications: [team] }), refuses);
    assert.equal((await tier.finish(run)).phase, 'Promoted');
    await run.r.until('three messages tried', (r) => delivered(r).length >= 3);
    // Long enough for a retry (the first comes after a second).
    await new Promise((resolve) => setTimeout(resolve, 2500));
    assert.deepEqual(run.r.notifications.map((n) => n.message.event).sort(), ['promoted', 'started', 'step']);
  });

  it('a failed analysis is told at once, then the rollback; the notifications of an undoing are not waited for', async () => {
    const analysis: RolloutPlan['analysis'] = { intervalMs: 200, metrics: [{ name: 'm0', query: 'q0', range: { min: 99 }, failureLimit: 2, inconclusiveLimit: 3, dryRun: false }] };
    // The rollback's own notifications go to a receiver that is down: the undoing still ends.
    const run = await tier.startRollout(plan({ steps: [{ kind: 'weight', weight: 20 }, { kind: 'weight', weight: 50 }], analysis, notifications: [team] }), {
      metrics: () => ({ value: 80 }), fail: { sendNotification: (n) => (n >= 2 ? new Error('receiver down (scripted)') : undefined) },
    });
    try {
      const result = await tier.finish(run);
      assert.equal(result.phase, 'RolledBack');
      await run.r.until('the rollback told', (r) => delivered(r).some((m) => m.event === 'rolledBack'));
      const sent = delivered(run.r);
      assert.deepEqual(sent.map((m) => m.event), ['started', 'step', 'analysisFailed', 'rolledBack']);
      assert.match(sent[2]!.message, /analysis failed: m0 2 times in a row/);
      assert.equal(sent[3]!.phase, 'RolledBack');
    } finally {
      await cleanUp(run);
    }
  });

  it('an abort is told, with who asked', async () => {
    const run = await tier.startRollout(plan({ steps, notifications: [team] }));
    await run.r.until('paused', paused);
    await control(run, 'abort', 'pat', 'bad metrics');
    assert.equal((await tier.finish(run)).phase, 'Aborted');
    await run.r.until('the abort told', (r) => delivered(r).some((m) => m.event === 'aborted'));
    const last = delivered(run.r).at(-1)!;
    assert.equal(last.event, 'aborted');
    assert.match(last.message, /aborted by pat: .*bad metrics/);
  });

  it('ids and their order survive continue-as-new: each message once, numbered without a gap', async () => {
    const run = await tier.startRollout(plan({ steps, notifications: [team] }), {}, { maxHistoryEvents: 30 });
    await run.r.until('paused', paused);
    for (let i = 0; i < 600 && (await tier.runs(run.handle.workflowId)) < 3; i++) await new Promise((resolve) => setTimeout(resolve, 100));
    assert.ok((await tier.runs(run.handle.workflowId)) >= 3, 'the rollout continued as new while paused');
    await control(run, 'promote', 'olga');
    assert.equal((await tier.finish(run)).phase, 'Promoted');
    await run.r.until('promoted sent', (r) => delivered(r).some((m) => m.event === 'promoted'));
    const sent = delivered(run.r);
    // The promote ends the pause and the steps: the last weight step is skipped.
    assert.deepEqual(sent.map((m) => m.event), ['started', 'step', 'paused', 'promoted']);
    assert.deepEqual(sent.map((m) => m.seq), [1, 2, 3, 4]);
    assert.equal(new Set(sent.map((m) => m.id.replace(/\/\d+-\w+$/, ''))).size, 1, 'one rollout prefix in every run');
    assert.equal(run.r.notifications.length, sent.length, 'no message delivered twice across runs');
  });
});
