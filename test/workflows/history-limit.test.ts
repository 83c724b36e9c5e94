// The kit's waits (a step retried while it keeps failing, an undo retried until it succeeds, a wait woken by control
// signals) on a Temporal dev server of their own whose history limit is low: 400 events terminate a run, and the
// server suggests continue-as-new from 100. Each scenario's rollout writes several times that many events; each
// must continue as new (on the server's suggestion: the rollouts keep their default limit of 2,000) and end as it
// would have, never terminated. Every run is replayed.
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { eventually } from '../../lib/poll.ts';
import { controlSignals, rolloutQuery } from '../../workflows/contract.ts';
import { WorkflowTier, control, failure, gates, plan, type RolloutRun } from './stubs.ts';

const limit = 400;
const tier = new WorkflowTier({ dynamicConfig: { 'limit.historyCount.error': limit, 'limit.historyCount.warn': 200, 'limit.historyCount.suggestContinueAsNew': 100 } });
// Retried steps wait 20-50 ms instead of 2-60 s: the same loop, many more times a second.
const fast = { retryDelay: { firstMs: 20, maxMs: 50 } };

/** How many runs the rollout took and how many history events they wrote in all; none was terminated. */
async function runsOf(run: RolloutRun): Promise<{ runs: number; events: number }> {
  let runs = 0;
  let events = 0;
  for await (const wf of tier.client.workflow.list({ query: `WorkflowId = '${run.handle.workflowId}'` })) {
    assert.notEqual(wf.status.name, 'TERMINATED', `run ${wf.runId} was terminated (the history limit)`);
    runs++;
    events += (await tier.client.workflow.getHandle(wf.workflowId, wf.runId).fetchHistory()).events?.length ?? 0;
  }
  return { runs, events };
}

describe(`the kit's waits under a history limit of ${limit} events`, { concurrency: true }, () => {
  before(() => tier.start());
  after(() => tier.stop());

  it('a forward step that keeps failing is retried across runs until it passes, then the rollout promotes', async () => {
    const run = await tier.startRollout(plan({ steps: [{ kind: 'weight', weight: 20 }] }),
      { fail: { setCanaryRoute: (n) => (n < 80 ? failure('Scripted', 'the API server answers 503 (scripted)') : undefined) } }, fast);
    const result = await tier.finish(run);
    assert.equal(result.phase, 'Promoted');
    assert.ok(run.r.count('setCanaryRoute') > 80, 'it kept trying');
    const { runs, events } = await runsOf(run);
    assert.ok(events > limit && runs > 1, `${events} events over ${runs} runs`);
  });

  it('an undo that keeps failing is retried across runs until it succeeds; the abort ends Aborted', async () => {
    const run = await tier.startRollout(plan({ steps: [{ kind: 'weight', weight: 20 }, { kind: 'pause', ms: null }] }),
      { fail: { removeCanary: (n) => (n < 80 ? failure('Scripted', 'the API server answers 503 (scripted)') : undefined) } }, fast);
    await eventually('paused', async () => ((await run.handle.query(rolloutQuery))?.phase === 'Paused' ? true : undefined), { timeoutMs: 30_000 });
    await control(run, 'abort', 'tester');
    const result = await tier.finish(run);
    assert.equal(result.phase, 'Aborted');
    assert.equal(run.r.count('removeCanary'), 81);
    const { runs, events } = await runsOf(run);
    assert.ok(events > limit && runs > 1, `${events} events over ${runs} runs`);
  });

  it('a wait at an approval woken by hundreds of control signals keeps its place, and a promote still passes it', async () => {
    const run = await tier.startRollout(plan({ steps: [{ kind: 'weight', weight: 20 }, { kind: 'pause', ms: null }], gates: { ...gates, intervalMs: 1000 } }));
    await eventually('paused', async () => ((await run.handle.query(rolloutQuery))?.phase === 'Paused' ? true : undefined), { timeoutMs: 30_000 });
    for (let i = 0; i < 150; i++) {
      await run.handle.signal(controlSignals.pause, { by: `tester-${i}` });
      await run.handle.signal(controlSignals.resume, { by: `tester-${i}` });
    }
    const state = await run.handle.query(rolloutQuery);
    assert.equal(state?.step, 1, 'still at the approval');
    assert.equal(state?.pausedByUser, false, 'the last resume lifted the last pause');
    await control(run, 'promote', 'tester');
    const result = await tier.finish(run);
    assert.equal(result.phase, 'Promoted');
    const { runs, events } = await runsOf(run);
    assert.ok(events > limit && runs > 1, `${events} events over ${runs} runs`);
  });
});
