// Checks (hooks) in a rollout, on a real worker with scripted activities: HTTP and Job checks at a step, before the
// start, before and after promotion, on rollback; a confirm check waiting paused; every verdict recorded. Every
// scenario's history is replayed.
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import type { Check } from '../../api/application.ts';
import { eventually } from '../../lib/poll.ts';
import { rolloutQuery } from '../../workflows/contract.ts';
import type { PlanCheck, PlanChecks, PlanStep, RolloutPlan } from '../../reconcile/plan.ts';
import { WorkflowTier, control, plan, type RolloutRun, type Script } from './stubs.ts';

const tier = new WorkflowTier();

function check(name: string, kind: 'http' | 'job', o: { phase?: Check['phase']; confirm?: boolean } = {}): PlanCheck {
  const spec = kind === 'http'
    ? { name, ...(o.phase ? { phase: o.phase } : {}), http: { url: `http://127.0.0.1:1/${name}`, method: 'POST', timeoutSeconds: 1, retries: 0, confirm: o.confirm ?? false, intervalSeconds: 1 } }
    : { name, ...(o.phase ? { phase: o.phase } : {}), job: { template: { containers: [{ name: 'c', image: 'registry.invalid/check:pass' }] }, timeoutSeconds: 60 } };
  return { name, kind, confirm: o.confirm ?? false, intervalMs: 150, maxMs: 1000, timeoutMs: 60_000, spec: spec as Check };
}

function withChecks(all: PlanCheck[], steps: PlanStep[], phases: Partial<Omit<PlanChecks, 'all'>> = {}, over: Partial<RolloutPlan> = {}): RolloutPlan {
  return plan({ steps, checks: { all, beforeStart: [], afterPromotion: [], onRollback: [], ...phases }, ...over });
}

const start = (p: RolloutPlan, script: Script = {}) => tier.startRollout(p, script);
const verdicts = (run: RolloutRun) => (run.r.last()?.checks ?? []).map((c) => `${c.name}/${c.phase}: ${c.result}`);
const actions = (run: RolloutRun) => run.r.names().filter((n) => !['observeCanary', 'writeCanaryStatus', 'queryMetrics'].includes(n));

describe('checks in a rollout', { concurrency: true }, () => {
  before(() => tier.start());
  after(() => tier.stop());

  it('an HTTP check at a step passes and the rollout goes on; the check is told where the rollout stands', async () => {
    const run = await start(withChecks([check('smoke', 'http')], [{ kind: 'weight', weight: 20 }, { kind: 'check', check: 'smoke' }, { kind: 'weight', weight: 60 }]));
    const result = await tier.finish(run);
    assert.equal(result.phase, 'Promoted');
    assert.deepEqual(verdicts(run), ['smoke/step: pass']);
    assert.ok(run.r.events.includes('CheckPassed'));
    const call = run.r.calls.find((c) => c.name === 'runHttpCheck')!.input as { context: Record<string, unknown> };
    assert.deepEqual(call.context, { application: 'app', namespace: call.context['namespace'], version: 'v2', image: 'app:v2', phase: 'step', step: 1, weight: 20 });
    assert.deepEqual(run.r.weights(), [20, 60, 0], 'the check ran between the weights');
  });

  it('a failing HTTP check at a step rolls back, saying which check and what it answered', async () => {
    const run = await start(withChecks([check('smoke', 'http')], [{ kind: 'weight', weight: 20 }, { kind: 'check', check: 'smoke' }, { kind: 'weight', weight: 60 }]),
      { http: () => ({ verdict: 'fail', detail: 'HTTP 500 from http://127.0.0.1:1/smoke: boom' }) });
    const result = await tier.finish(run);
    assert.equal(result.phase, 'RolledBack');
    assert.equal(run.r.last()?.reason, 'CheckFailed');
    assert.match(result.message, /step check smoke failed: HTTP 500 from http:\/\/127\.0\.0\.1:1\/smoke: boom/);
    assert.deepEqual(run.r.weights(), [20], 'never moved to 60');
    assert.ok(run.r.names().includes('removeCanary'));
  });

  it('a confirm check waits, paused, until its endpoint says yes', async () => {
    const run = await start(withChecks([check('go', 'http', { confirm: true })], [{ kind: 'weight', weight: 20 }, { kind: 'check', check: 'go' }]),
      { http: (n) => ({ verdict: n < 3 ? 'waiting' : 'pass', detail: n < 3 ? 'HTTP 404: not yet' : 'HTTP 200: go' }) });
    await eventually('paused waiting', () => Promise.resolve(run.r.statuses.some((s) => s.phase === 'Paused' && /waiting for check go to confirm/.test(s.message)) ? true : undefined), { timeoutMs: 30_000 });
    const result = await tier.finish(run);
    assert.equal(result.phase, 'Promoted');
    assert.equal(run.r.count('runHttpCheck'), 4);
    assert.ok(run.r.events.includes('CheckWaiting'));
    assert.deepEqual(verdicts(run), ['go/step: waiting', 'go/step: pass']);
  });

  it('a promote confirms a confirm check that waits', async () => {
    const run = await start(withChecks([check('go', 'http', { confirm: true })], [{ kind: 'weight', weight: 20 }, { kind: 'check', check: 'go' }, { kind: 'weight', weight: 50 }]),
      { http: () => ({ verdict: 'waiting', detail: 'HTTP 404: not yet' }) });
    await eventually('paused waiting', async () => ((await run.handle.query(rolloutQuery))?.phase === 'Paused' ? true : undefined), { timeoutMs: 30_000 });
    await control(run, 'promote', 'carol');
    const result = await tier.finish(run);
    assert.equal(result.phase, 'Promoted');
    assert.match(run.r.last()!.checks!.at(-1)!.message, /confirmed by the promote of carol/);
  });

  it('a Job check is watched until its Job ends, then its Job is deleted; a failed Job rolls back', async () => {
    const ok = await start(withChecks([check('load', 'job')], [{ kind: 'weight', weight: 20 }, { kind: 'check', check: 'load' }]), { job: (n) => (n < 2 ? 'running' : 'succeeded') });
    const bad = await start(withChecks([check('load', 'job')], [{ kind: 'weight', weight: 20 }, { kind: 'check', check: 'load' }]), { job: (n) => (n < 1 ? 'running' : 'failed') });
    assert.equal((await tier.finish(ok)).phase, 'Promoted');
    assert.equal(ok.r.count('observeJobCheck'), 3);
    assert.deepEqual(actions(ok).filter((n) => n.includes('Job')), ['startJobCheck', 'observeJobCheck', 'observeJobCheck', 'observeJobCheck', 'deleteJobCheck']);
    const failed = await tier.finish(bad);
    assert.equal(failed.phase, 'RolledBack');
    assert.match(failed.message, /check load failed: Job app-load-job failed: BackoffLimitExceeded: exit 1/);
    assert.equal(bad.r.count('deleteJobCheck'), 1, 'the failed Job is deleted once its end is read');
  });

  it('an abort while a Job check runs deletes its Job with the rest', async () => {
    const run = await start(withChecks([check('load', 'job')], [{ kind: 'weight', weight: 20 }, { kind: 'check', check: 'load' }]), { job: () => 'running' });
    await eventually('the Job watched', () => Promise.resolve(run.r.count('observeJobCheck') >= 2 ? true : undefined), { timeoutMs: 30_000 });
    await control(run, 'abort', 'dave');
    const result = await tier.finish(run);
    assert.equal(result.phase, 'Aborted');
    assert.equal(run.r.count('deleteJobCheck'), 1);
  });

  it('beforeStart: a failing check ends the rollout before anything is created', async () => {
    const run = await start(withChecks([check('ready', 'http', { phase: 'beforeStart' })], [{ kind: 'weight', weight: 20 }], { beforeStart: ['ready'] }),
      { http: () => ({ verdict: 'fail', detail: 'HTTP 503: frozen' }) });
    const result = await tier.finish(run);
    assert.equal(result.phase, 'RolledBack');
    assert.ok(!run.r.names().includes('prepareCanary'), 'no canary was made');
    assert.match(result.message, /beforeStart check ready failed: HTTP 503: frozen/);
  });

  it('a host the operator refuses fails the check with reason CheckNotAllowed', async () => {
    const run = await start(withChecks([check('smoke', 'http')], [{ kind: 'weight', weight: 20 }, { kind: 'check', check: 'smoke' }]),
      { http: () => ({ verdict: 'fail', detail: 'refused: 127.0.0.1:1 is not in --check-allowed-hosts', reason: 'CheckNotAllowed' }) });
    const result = await tier.finish(run);
    assert.equal(result.phase, 'RolledBack');
    assert.equal(run.r.last()?.reason, 'CheckNotAllowed');
  });

  it('postPromotion checks of a canary are reported after the promotion; onRollback checks after an abort', async () => {
    const promoted = await start(withChecks([check('after', 'http', { phase: 'postPromotion' })], [{ kind: 'weight', weight: 20 }], { afterPromotion: ['after'] }),
      { http: () => ({ verdict: 'fail', detail: 'HTTP 500: latency up' }) });
    const p = await tier.finish(promoted);
    assert.equal(p.phase, 'Promoted', 'a promotion done is not undone');
    assert.match(promoted.r.last()!.message, /postPromotion check after: fail: HTTP 500: latency up/);
    assert.ok(promoted.r.events.includes('CheckFailed'));

    const aborted = await start(withChecks([check('told', 'http', { phase: 'onRollback' })], [{ kind: 'weight', weight: 20 }, { kind: 'pause', ms: null }], { onRollback: ['told'] }));
    await eventually('paused', async () => ((await aborted.handle.query(rolloutQuery))?.phase === 'Paused' ? true : undefined), { timeoutMs: 30_000 });
    await control(aborted, 'abort', 'erin');
    const a = await tier.finish(aborted);
    assert.equal(a.phase, 'Aborted');
    const order = actions(aborted);
    assert.ok(order.indexOf('runHttpCheck') > order.indexOf('removeCanary'), `the onRollback check runs after the undoing: ${order.join(', ')}`);
    assert.deepEqual(verdicts(aborted), ['told/onRollback: pass']);
  });

  it('blue-green: a failing postPromotion check after the switch switches back', async () => {
    const steps: PlanStep[] = [
      { kind: 'pause', ms: 0, approval: 'switch all traffic to v2' },
      { kind: 'weight', weight: 100, label: 'switch all traffic to v2' },
      { kind: 'check', check: 'after', phase: 'postPromotion' },
      { kind: 'wait', ms: 60_000, label: 'keep the old version for a switch-back' },
    ];
    const run = await start(withChecks([check('after', 'http', { phase: 'postPromotion' })], steps, {}, { strategy: 'blueGreen', router: 'service' }),
      { http: () => ({ verdict: 'fail', detail: 'HTTP 500: errors after the switch' }) });
    const result = await tier.finish(run);
    assert.equal(result.phase, 'RolledBack');
    assert.deepEqual(actions(run), ['prepareCanary', 'setCanaryRoute', 'runHttpCheck', 'removeCanary']);
  });
});
