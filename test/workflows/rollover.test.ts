// Rollouts that wait for days: with a tiny history threshold every scenario continues as new several times, in every
// phase (steps, a timed pause, an approval, a user's pause, a blind hold, an analysis streak, promotion, compensation
// mid-way), and must end exactly as it would in one run. A rollout whose workflow Temporal lost is taken up from
// the Application's status. Every run of every chain is replayed.
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import proto from '@temporalio/proto';
import { rolloutQuery, type RolloutInput } from '../../workflows/contract.ts';
import type { AnalysisMetric, RolloutPlan } from '../../reconcile/plan.ts';
import { eventually } from '../../lib/poll.ts';
import { WorkflowTier, control, gates, plan, sleep, type Recorder, type RolloutRun, type Script } from './stubs.ts';

const tier = new WorkflowTier();
const { EventType } = proto.temporal.api.enums.v1;

/** So small that a rollout checking its gate every 100 ms continues as new about every half second. */
const tiny = { maxHistoryEvents: 30 };
const start = (p: RolloutPlan, script: Script = {}) => tier.startRollout(p, script, tiny);
const paused = (r: Recorder) => r.last()?.phase === 'Paused';
const runsAtLeast = (run: RolloutRun, n: number) => eventually(`${n} runs`, async () => ((await tier.runs(run.handle.workflowId)) >= n ? true : undefined), { timeoutMs: 60_000, intervalMs: 100 });
const analysis = (m: Partial<AnalysisMetric>, intervalMs = 150): RolloutPlan['analysis'] => ({
  intervalMs, metrics: [{ name: 'm0', query: 'q0', range: { min: 99 }, failureLimit: 2, inconclusiveLimit: 3, dryRun: false, ...m }],
});

/** The phases and messages status went through, without repeats: what a user watching status saw. */
const story = (r: Recorder) => r.statuses.map((s) => `${s.phase}: ${s.message}`).filter((x, i, all) => i === 0 || all[i - 1] !== x);

describe('rollouts that continue as new', { concurrency: true }, () => {
  before(() => tier.start());
  after(() => tier.stop());

  it('steps, a timed pause and the promotion go on across runs exactly as in one', async () => {
    const steps: RolloutPlan['steps'] = [{ kind: 'weight', weight: 20 }, { kind: 'pause', ms: 6000 }, { kind: 'weight', weight: 60 }];
    const [long, short] = await Promise.all([start(plan({ steps })), tier.startRollout(plan({ steps }))]);
    const [a] = await Promise.all([tier.finish(long), tier.finish(short)]);
    assert.equal(a.phase, 'Promoted', a.message);
    // However slow the machine, the first run's history outgrows the threshold before the pause ends: a later run
    // takes the pause up, with the end the first one set.
    const inputs = await tier.runInputs<RolloutInput>(long.handle.workflowId);
    const inPause = inputs.filter((i) => i.carried?.position.at === 'steps' && i.carried.position.step === 1 && !i.carried.position.done);
    assert.ok(inPause.length >= 1, `a run began during the pause (${inputs.length} runs: ${inputs.map((i) => JSON.stringify(i.carried?.position ?? 'first')).join(', ')})`);
    assert.ok(inPause.every((i) => i.carried?.state.pauseEndsAt === inPause[0]!.carried?.state.pauseEndsAt && i.carried?.state.pauseEndsAt));
    assert.equal(await tier.runs(short.handle.workflowId), 1);
    assert.deepEqual(story(long.r), story(short.r), 'status told the same story');
    assert.deepEqual(long.r.weights(), [20, 60, 0]);
    assert.equal(long.r.count('prepareCanary'), 1, 'the canary was created once');
    assert.deepEqual(long.r.events, short.r.events, 'the same Events, each once');
    const ends = new Set(long.r.statuses.map((s) => s.pauseEndsAt).filter(Boolean));
    assert.equal(ends.size, 1, `the timed pause kept its end across runs: ${[...ends].join(', ')}`);
  });

  it('an approval waits through many runs; only a promote passes it', async () => {
    const run = await start(plan({ steps: [{ kind: 'weight', weight: 20 }, { kind: 'pause', ms: null }] }));
    await run.r.until('paused', paused);
    await runsAtLeast(run, 4);
    const state = await run.handle.query(rolloutQuery);
    assert.equal(state?.phase, 'Paused');
    assert.equal(state?.weight, 20);
    assert.equal(run.r.events.filter((e) => e === 'CanaryPaused').length, 1, 'paused once, not once per run');
    await control(run, 'promote', 'olga');
    const result = await tier.finish(run);
    assert.equal(result.phase, 'Promoted');
    assert.match(result.message, /by olga/);
    assert.deepEqual(run.r.weights(), [20, 0]);
  });

  it('a user\'s pause and who asked carry over; resume goes on', async () => {
    const run = await start(plan({ steps: [{ kind: 'weight', weight: 10 }, { kind: 'pause', ms: 300 }, { kind: 'weight', weight: 50 }] }));
    await run.r.until('in the timed pause', paused);
    await control(run, 'pause', 'pat');
    const first = await tier.runs(run.handle.workflowId);
    await runsAtLeast(run, first + 3);
    const held = await run.handle.query(rolloutQuery);
    assert.equal(held?.pausedByUser, true);
    assert.equal(held?.pausedBy, 'pat');
    assert.equal(run.r.last()?.pausedBy, 'pat', 'status says who paused');
    assert.deepEqual(run.r.weights(), [10]);
    await control(run, 'resume', 'pat');
    assert.equal((await tier.finish(run)).phase, 'Promoted');
    assert.deepEqual(run.r.weights(), [10, 50, 0]);
  });

  it('a blind hold lasts across runs and ends when the metric answers again', async () => {
    const run = await start(plan({ steps: [{ kind: 'weight', weight: 20 }, { kind: 'weight', weight: 40 }], analysis: analysis({ inconclusiveLimit: 2 }) }), {
      metrics: (n) => (n < 12 ? { value: null, error: 'no data (scripted)' } : { value: 100 }),
    });
    await run.r.until('held', (r) => r.events.includes('AnalysisInconclusive'));
    const result = await tier.finish(run);
    assert.equal(result.phase, 'Promoted', result.message);
    assert.ok(await tier.runs(run.handle.workflowId) >= 3);
    assert.equal(run.r.events.filter((e) => e === 'AnalysisInconclusive').length, 1, 'held once');
    assert.equal(run.r.events.filter((e) => e === 'AnalysisRecovered').length, 1);
  });

  it('an analysis failure streak is carried: the failureLimit-th failure in a row rolls back, whatever the runs between', async () => {
    const run = await start(plan({ steps: [{ kind: 'weight', weight: 20 }, { kind: 'pause', ms: null }], analysis: analysis({ failureLimit: 5 }, 300) }), {
      metrics: () => ({ value: 80 }),
    });
    const result = await tier.finish(run);
    assert.equal(result.phase, 'RolledBack');
    assert.match(result.message, /analysis failed: m0 5 times in a row/);
    assert.equal(run.r.count('queryMetrics'), 5, 'not one query more: the streak was not reset by a new run');
    assert.ok(await tier.runs(run.handle.workflowId) >= 2);
  });

  it('a promotion waiting for stable continues as new without promoting twice', async () => {
    const run = await start(plan({ steps: [{ kind: 'weight', weight: 10 }] }), { stableDoneAt: 40 });
    const result = await tier.finish(run);
    assert.equal(result.phase, 'Promoted');
    assert.equal(run.r.count('promoteStable'), 1, 'the stable Deployment was given the image once');
    const promoting = run.r.calls.findIndex((c) => c.name === 'promoteStable');
    assert.ok(await tier.runs(run.handle.workflowId) >= 2);
    assert.equal(run.r.events.filter((e) => e === 'CanaryPromoting').length, 1);
    assert.ok(promoting >= 0);
  });

  it('a compensation cut by a new run goes on with what is left to undo, last first', async () => {
    const run = await start(plan({ steps: [{ kind: 'weight', weight: 10 }] }), {
      stableDoneAt: 1_000_000,
      fail: { removeCanary: (n) => (n < 10 ? new Error('503 ServiceUnavailable (scripted)') : undefined) },
    });
    await run.r.until('promoting', (r) => r.count('stableRolledOut') >= 2);
    const before = await tier.runs(run.handle.workflowId);
    await control(run, 'abort', 'quinn', 'too slow');
    const result = await tier.finish(run);
    assert.equal(result.phase, 'Aborted');
    assert.match(result.message, /aborted by quinn: too slow/);
    assert.ok(await tier.runs(run.handle.workflowId) > before, 'a new run began during the compensation');
    assert.equal(run.r.count('restoreStableImage'), 1, 'an undo done is not done again by the next run');
    assert.equal(run.r.count('removeCanary'), 11);
    const undos = run.r.names().filter((n) => n === 'restoreStableImage' || n === 'removeCanary');
    assert.equal(undos[0], 'restoreStableImage', 'last first');
    assert.equal(run.r.events.filter((e) => e === 'CanaryAborting').length, 1, 'the compensation began once');
  });

  it('waiting costs about six history events per gate interval', async () => {
    const run = await tier.startRollout(plan({ steps: [{ kind: 'weight', weight: 20 }, { kind: 'pause', ms: null }], gates: { ...gates, intervalMs: 200 } }));
    await run.r.until('paused', paused);
    const checksBefore = run.r.count('observeCanary');
    const eventsBefore = (await run.handle.fetchHistory()).events?.length ?? 0;
    await run.r.until('20 more gate checks', (r) => r.count('observeCanary') >= checksBefore + 20);
    const events = (await run.handle.fetchHistory()).events ?? [];
    const checks = run.r.count('observeCanary') - checksBefore;
    const perCheck = (events.length - eventsBefore) / checks;
    assert.ok(perCheck <= 7, `${perCheck.toFixed(1)} events per gate check while waiting (${events.length - eventsBefore} events, ${checks} checks)`);
    assert.equal(events.filter((e) => e.eventType === EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED && Number(e.eventId) > eventsBefore).length, 0, 'no activity task while waiting');
    await control(run, 'abort');
    assert.equal((await tier.finish(run)).phase, 'Aborted');
  });
});

describe('a rollout Temporal lost, taken up from status', { concurrency: true }, () => {
  before(() => tier.start());
  after(() => tier.stop());

  it('resumes at the step, weight, pause and user\'s hold that status names, and says so', async () => {
    const p = plan({ steps: [{ kind: 'weight', weight: 10 }, { kind: 'pause', ms: null }, { kind: 'weight', weight: 50 }] });
    const run = await tier.startRollout(p, { routed: (n) => (n === 0 ? { weight: 10 } : undefined) }, {
      recovered: { key: p.key, phase: 'Paused', step: 1, weight: 10, startedAt: '2026-11-30T10:00:00.000Z', pausedBy: 'ann' },
    });
    await run.r.until('recovered', (r) => r.events.includes('RolloutRecovered'));
    assert.match(run.r.statuses[0]?.message ?? '', /taken up again at step 2\/3.*\(Paused, 10%\).*Temporal had no record/);
    assert.equal(run.r.statuses[0]?.startedAt, '2026-11-30T10:00:00.000Z', 'the rollout keeps its start');
    await run.r.until('the canary applied again and checked', (r) => r.count('prepareCanary') >= 1 && r.count('observeCanary') >= 3);
    assert.equal(run.r.last()?.pausedBy, 'ann', 'still held by ann');
    assert.deepEqual(run.r.weights(), [], 'the route it had was kept (read back as intended), not moved');
    assert.equal(run.r.count('prepareCanary'), 1, 'the canary applied again (idempotent)');
    await control(run, 'resume', 'ann');
    await sleep(400);
    assert.deepEqual(run.r.weights(), [], 'the pause step still waits for a promote');
    await control(run, 'promote', 'ann');
    const result = await tier.finish(run);
    assert.equal(result.phase, 'Promoted');
    assert.deepEqual(run.r.weights(), [0]);
  });

  it('a rollout lost while aborting finishes its compensation', async () => {
    const p = plan();
    const run = await tier.startRollout(p, {}, { recovered: { key: p.key, phase: 'Aborting', step: 0, weight: 20, abortedBy: 'bo', message: 'abort requested by bo' } });
    const result = await tier.finish(run);
    assert.equal(result.phase, 'Aborted');
    assert.equal(run.r.count('removeCanary'), 1);
    assert.equal(run.r.count('prepareCanary'), 0, 'nothing created again');
    assert.match(result.message, /aborted by bo/);
  });

  it('a rollout lost while promoting promotes (idempotently) rather than starting over', async () => {
    const p = plan();
    const run = await tier.startRollout(p, {}, { recovered: { key: p.key, phase: 'Promoting', step: 3, weight: 60 } });
    const result = await tier.finish(run);
    assert.equal(result.phase, 'Promoted');
    assert.equal(run.r.count('promoteStable'), 1);
    assert.equal(run.r.count('prepareCanary'), 0);
  });
});
