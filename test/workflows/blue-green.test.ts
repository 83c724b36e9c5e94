// The blue-green rollout on a real worker with scripted activities: the preview judged, the approval a promote
// passes, the switch, the switch-back window, and every way out of it. Every scenario's history is replayed.
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { eventually } from '../../lib/poll.ts';
import { rolloutQuery } from '../../workflows/contract.ts';
import type { PlanStep, RolloutPlan } from '../../reconcile/plan.ts';
import { WorkflowTier, control, plan, type RolloutRun, type Script } from './stubs.ts';

const tier = new WorkflowTier();

/** The steps reconcile/strategies/blue-green.ts writes, with millisecond windows. */
function blueGreen(o: { auto?: number; pre?: number; post?: number; delay?: number } = {}): RolloutPlan {
  const to = 'switch all traffic to v2';
  const steps: PlanStep[] = [
    ...(o.pre ? [{ kind: 'analysis', ms: o.pre, label: 'judge the preview by analysis' } as const] : []),
    { kind: 'pause', ms: o.auto ?? null, approval: to },
    { kind: 'weight', weight: 100, label: to },
    ...(o.post ? [{ kind: 'analysis', ms: o.post, label: 'judge the new version by analysis after the switch' } as const] : []),
    ...(o.delay ? [{ kind: 'wait', ms: o.delay, label: 'keep the old version for a switch-back' } as const] : []),
  ];
  return plan({
    strategy: 'blueGreen', router: 'service', steps,
    ...(o.pre || o.post ? { analysis: { intervalMs: 150, metrics: [{ name: 'ok', query: 'q', range: { min: 99 }, failureLimit: 2, inconclusiveLimit: 5, dryRun: false }] } } : {}),
  });
}

const start = (p: RolloutPlan, script: Script = {}) => tier.startRollout(p, script);
const phase = async (run: RolloutRun) => (await run.handle.query(rolloutQuery))?.phase;
/** Waits until the rollout is at `step` (0-based), in `phase` when given. */
const waitingAt = (run: RolloutRun, step: number, phase?: string) => eventually(`the rollout at step ${step + 1}`, async () => {
  const s = await run.handle.query(rolloutQuery);
  return s?.step === step && (phase === undefined || s.phase === phase) ? true : undefined;
}, { timeoutMs: 30_000 });
/** The activities that change something, in order. */
const actions = (run: RolloutRun) => run.r.names().filter((n) => !['observeCanary', 'writeCanaryStatus', 'queryMetrics'].includes(n));

describe('blue-green rollout workflow', { concurrency: true }, () => {
  before(() => tier.start());
  after(() => tier.stop());

  it('runs under its own type; waits for a promote at the preview; the promote switches, the window passes, the old version goes', async () => {
    const run = await start(blueGreen({ delay: 400 }));
    await waitingAt(run, 0, 'Paused');
    assert.equal(await phase(run), 'Paused');
    assert.deepEqual(run.r.weights(), [], 'no request reaches the preview before the switch');
    assert.equal((await run.handle.describe()).type, 'blueGreenRolloutWorkflow');
    await control(run, 'promote', 'alice');
    const result = await tier.finish(run);
    assert.equal(result.phase, 'Promoted');
    assert.deepEqual(run.r.weights(), [100, 0], 'all at once to the new version; back to the stable Service once stable runs it');
    assert.deepEqual(actions(run), ['prepareCanary', 'setCanaryRoute', 'promoteStable', 'stableRolledOut', 'setCanaryRoute', 'removeCanary', 'finishCanarySpec']);
    const messages = run.r.statuses.map((s) => s.message);
    assert.ok(messages.some((m) => /switch all traffic to v2: promoted by alice/.test(m)), messages.join('\n'));
    assert.ok(messages.some((m) => /keep the old version for a switch-back/.test(m)), 'the window is in status');
    const removed = run.r.calls.find((c) => c.name === 'removeCanary')!.input;
    assert.deepEqual([removed['router'], removed['version']], ['service', 'v2'], 'the rollout removes with the router it started with');
  });

  it('auto-promotion after a passing preview analysis: no person needed', async () => {
    const run = await start(blueGreen({ auto: 0, pre: 300 }), { metrics: () => ({ value: 99.9 }) });
    const result = await tier.finish(run);
    assert.equal(result.phase, 'Promoted');
    assert.deepEqual(run.r.weights(), [100, 0]);
    assert.ok(run.r.count('queryMetrics') >= 1, 'the preview was judged at 0% (it gets no user requests)');
  });

  it('a failing preview analysis aborts before any switch', async () => {
    const run = await start(blueGreen({ auto: 0, pre: 2000 }), { metrics: () => ({ value: 50 }) });
    const result = await tier.finish(run);
    assert.equal(result.phase, 'RolledBack');
    assert.deepEqual(run.r.weights(), [], 'the switch never happened');
    assert.ok(!run.r.names().includes('promoteStable'));
    assert.ok(run.r.names().includes('removeCanary'), 'the preview goes');
  });

  it('a failing post-promotion analysis switches back at once, the old version untouched', async () => {
    const seen: { run?: RolloutRun } = {};
    // Good on the preview, bad once it takes the traffic.
    const script: Script = { metrics: () => ({ value: seen.run?.r.weights().at(-1) === 100 ? 10 : 99.9 }) };
    const run = await start(blueGreen({ auto: 0, post: 5000, delay: 60_000 }), script);
    seen.run = run;
    const result = await tier.finish(run);
    assert.equal(result.phase, 'RolledBack');
    assert.deepEqual(run.r.weights(), [100], 'switched; the switch-back is the compensation (removeCanary pins the stable pods)');
    assert.deepEqual(actions(run), ['prepareCanary', 'setCanaryRoute', 'removeCanary']);
    assert.ok(!run.r.names().includes('promoteStable'), 'the stable Deployment never changed: the switch-back is instant');
    assert.match(run.r.last()!.message, /rolled back/);
  });

  it('an abort in the switch-back window switches back', async () => {
    const run = await start(blueGreen({ auto: 0, delay: 60_000 }));
    await waitingAt(run, 2);
    await eventually('switched', () => Promise.resolve(run.r.weights().at(-1) === 100 ? true : undefined), { timeoutMs: 30_000 });
    await control(run, 'abort', 'bob', 'errors in the logs');
    const result = await tier.finish(run);
    assert.equal(result.phase, 'Aborted');
    assert.deepEqual(actions(run), ['prepareCanary', 'setCanaryRoute', 'removeCanary']);
    assert.match(run.r.last()!.message, /aborted by bob/);
  });

  it('an abort at the preview keeps the active version; the preview goes', async () => {
    const run = await start(blueGreen());
    await waitingAt(run, 0);
    await control(run, 'abort', 'bob');
    const result = await tier.finish(run);
    assert.equal(result.phase, 'Aborted');
    assert.deepEqual(actions(run), ['prepareCanary', 'removeCanary']);
  });

  it('a promote before the approval (the preview still judged) goes to the switch; a second one after it ends the window early', async () => {
    const run = await start(blueGreen({ pre: 600_000, delay: 600_000 }), { metrics: () => ({ value: 99.9 }) });
    await waitingAt(run, 0);
    await control(run, 'promote', 'alice');
    await eventually('switched', () => Promise.resolve(run.r.weights().at(-1) === 100 ? true : undefined), { timeoutMs: 30_000 });
    await waitingAt(run, 3);
    await control(run, 'promote', 'alice');
    const result = await tier.finish(run);
    assert.equal(result.phase, 'Promoted');
    assert.deepEqual(run.r.weights(), [100, 0], 'the switch was not skipped');
  });

  it('the switch-back window continues as new with the rollout and keeps its end', async () => {
    // About 50 events come before the window and each gate check in it adds 5: a window of 8 s leaves room for the
    // two or three checks that pass the limit however slowly a loaded machine runs them.
    const run = await tier.startRollout(blueGreen({ auto: 0, delay: 8000 }), {}, { maxHistoryEvents: 60 });
    const t0 = Date.now();
    const result = await tier.finish(run);
    assert.equal(result.phase, 'Promoted');
    assert.ok(Date.now() - t0 >= 8000, 'the window was waited out whole');
    const runs = await tier.runInputs<{ carried?: { stepEndsAt?: number } }>(run.handle.workflowId);
    assert.ok(runs.length > 1, `continued as new (${runs.length} runs)`);
    const ends = runs.map((r) => r.carried?.stepEndsAt).filter((x) => x !== undefined);
    assert.ok(ends.length >= 1 && new Set(ends).size === 1, `one end carried across runs: ${JSON.stringify(ends)}`);
  });
});
