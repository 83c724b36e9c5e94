// Canary rollouts end to end: a real operator, real Istio CRDs, kwok pods (an unready image for the bad canary).
import { Worker } from '@temporalio/worker';
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { unreadyImage } from '../../stack/stack.ts';
import { control, formatRollout } from '../../client/control.ts';
import { applicationWorkflowId, controlUpdates, rolloutQuery, rolloutWorkflowId } from '../../workflows/contract.ts';
import { appManifest, eventsOf, getApp, getDeployment, kube, temporalClient, waitForObject, waitForPhase, type Json } from '../../testkit/apps.ts';
import { assertSteadyState, destinationRule, waitCanaryPhase, waitWeights } from '../../testkit/canary.ts';
import { workflowBundle } from '../../testkit/env.ts';
import { eventually } from '../../lib/poll.ts';
import { operatorSuite } from '../../testkit/suite.ts';

const apply = (obj: Json) => kube(['apply', '--server-side', '--field-manager=test-user', '--force-conflicts', '-f', '-'], JSON.stringify(obj));
const gates = { interval: '1s', failureThreshold: 3, initialDelay: '2s' };
const meshApp = (ns: string, name: string, canary?: Json) => appManifest(ns, name, {
  image: 'nginx:1.25', replicas: 2,
  serviceMesh: { enabled: true, ...(canary ? { canary: { healthGates: gates, ...canary } } : {}) },
});
const drOf = destinationRule;

describe('canary rollouts', () => {
  const s = operatorSuite('canary', { routes: true });

  it('seed flow: weight 20 splits traffic 80/20; a Temporal signal promotes; the CR is left consistent', async () => {
    await apply(meshApp(s.ns, 'seed'));
    await waitForPhase(s.ns, 'seed', 'Running');
    await apply(meshApp(s.ns, 'seed', { enabled: true, canaryVersion: 'v2', weight: 20 }));
    await waitWeights(s.ns, 'seed', 20);
    const canary = await getDeployment(s.ns, 'seed-canary');
    assert.equal(canary!.spec.template.metadata.labels.version, 'v2');
    assert.equal(canary!.spec.template.spec.containers[0].image, 'nginx:v2');
    const dr = await drOf(s.ns, 'seed');
    assert.deepEqual(dr!.spec.subsets.map((s: Json) => [s.name, s.labels.version]), [['stable', 'stable'], ['canary', 'v2']]);
    const paused = await waitCanaryPhase(s.ns, 'seed', 'Paused');
    assert.equal(paused.status.canary.weight, 20);

    const client = await temporalClient();
    await client.workflow.getHandle(rolloutWorkflowId(s.ns, 'seed')).signal('promote');
    const done = await waitCanaryPhase(s.ns, 'seed', 'Promoted');
    assert.equal(done.spec.image, 'nginx:v2', 'the spec now says what runs');
    assert.equal(done.spec.serviceMesh.canary.enabled, false);
    await assertSteadyState(s.ns, 'seed');
    const stable = await getDeployment(s.ns, 'seed');
    assert.equal(stable!.spec.template.spec.containers[0].image, 'nginx:v2');
    // No later reconcile reverts the promotion.
    await kube(['-n', s.ns, 'annotate', 'application', 'seed', 'touch=1']);
    await sleep(1500);
    assert.equal((await getDeployment(s.ns, 'seed'))!.spec.template.spec.containers[0].image, 'nginx:v2');
    assert.equal(await getDeployment(s.ns, 'seed-canary'), null);
    // The promote switched the spec's canary off; the Application's workflow must take that in its stride.
    const parent = await client.workflow.getHandle(applicationWorkflowId(s.ns, 'seed')).describe();
    assert.equal(parent.status.name, 'RUNNING');
    // Nobody touched its routes: no repair, nor a drift repair of the children (the Application's pass and the
    // rollout's first route once raced, and every rollout began by "repairing" a 0% route).
    const repairs = (await eventsOf(s.ns, done.metadata.uid)).filter((e) => e.reason === 'CanaryRepaired' || e.reason === 'DriftRepaired');
    assert.deepEqual(repairs.map((e) => e.note), []);
  });

  it('abort restores all traffic to stable (read back), removes the canary, says who, and does not restart', async () => {
    await apply(meshApp(s.ns, 'abort', { enabled: true, canaryVersion: 'v3', weight: 30 }));
    await waitWeights(s.ns, 'abort', 30);
    await waitCanaryPhase(s.ns, 'abort', 'Paused');
    await control(await temporalClient(), 'pause', s.ns, 'abort');
    const again = await control(await temporalClient(), 'pause', s.ns, 'abort');
    assert.equal(again.accepted, false);
    assert.match(again.note, /^nothing to pause: the rollout is already paused \(by .+\)$/);
    assert.equal(again.state?.pausedByUser, true);
    const outcome = await control(await temporalClient(), 'abort', s.ns, 'abort', 'bad metrics');
    assert.equal(outcome.state?.key, 'v3|nginx:v3');
    assert.equal(outcome.state?.phase, 'Aborting', 'the reply shows the state after the abort was accepted');
    const app = await waitCanaryPhase(s.ns, 'abort', 'Aborted');
    assert.match(app.status.canary.abortedBy, /@/);
    assert.equal(app.status.canary.reason, 'CanaryAborted');
    assert.match(app.status.canary.message, /bad metrics/);
    await assertSteadyState(s.ns, 'abort');
    assert.equal((await getDeployment(s.ns, 'abort'))!.spec.template.spec.containers[0].image, 'nginx:1.25');
    await sleep(3000);
    assert.equal(await getDeployment(s.ns, 'abort-canary'), null, 'the same canary did not restart');
    assert.equal((await getApp(s.ns, 'abort'))!.status.canary.phase, 'Aborted');
    await assert.rejects(control(await temporalClient(), 'promote', s.ns, 'abort'), /no rollout is running|already Aborted/);
  });

  it('steps with timed pauses proceed on their own and promote at the end', async () => {
    await apply(meshApp(s.ns, 'steps', {
      enabled: true, canaryVersion: 'v4',
      steps: [{ setWeight: 25 }, { pause: { duration: '2s' } }, { setWeight: 60 }, { pause: { duration: '2s' } }],
    }));
    await waitWeights(s.ns, 'steps', 25);
    const q = await (await temporalClient()).workflow.getHandle(rolloutWorkflowId(s.ns, 'steps')).query(rolloutQuery);
    assert.equal(q?.totalSteps, 4);
    await waitWeights(s.ns, 'steps', 60);
    const done = await waitCanaryPhase(s.ns, 'steps', 'Promoted');
    assert.equal(done.spec.image, 'nginx:v4');
    await assertSteadyState(s.ns, 'steps');
  });

  it('a person\'s pause during a timed pause is in the Application\'s status at once (who, and that it holds once the step is over); the pause step keeps its end', async () => {
    await apply(meshApp(s.ns, 'midpause', { enabled: true, canaryVersion: 'v6', steps: [{ setWeight: 10 }, { pause: { duration: '10m' } }, { setWeight: 50 }] }));
    const timed = await waitCanaryPhase(s.ns, 'midpause', 'Paused');
    const endsAt = timed.status.canary.pauseEndsAt;
    await control(await temporalClient(), 'pause', s.ns, 'midpause', 'hold it');
    // Before, status said nothing of it until the ten minutes were over.
    const app = await waitForObject('the hold in status', () => getApp(s.ns, 'midpause'), (a) => Boolean(a?.status?.canary?.pausedBy), 30_000);
    assert.match(app!.status.canary.pausedBy, /.+/);
    assert.match(app!.status.canary.message, /^paused by request of .+ during step 2\/3: pause for 10m: it holds once this step is over$/);
    assert.equal(app!.status.canary.pauseEndsAt, endsAt, 'the pause keeps its end');
    await control(await temporalClient(), 'abort', s.ns, 'midpause');
    await waitCanaryPhase(s.ns, 'midpause', 'Aborted');
  });

  it('a pause step is an approval: resume is refused, an indefinite pause waits for promote (an update), and the query tells the time left', async () => {
    await apply(meshApp(s.ns, 'hold', {
      enabled: true, canaryVersion: 'v5', steps: [{ setWeight: 10 }, { pause: { duration: '6s' } }, { pause: {} }],
    }));
    await waitCanaryPhase(s.ns, 'hold', 'Paused');
    const handle = (await temporalClient()).workflow.getHandle(rolloutWorkflowId(s.ns, 'hold'));
    const timed = await handle.query(rolloutQuery);
    const left = Date.parse(timed!.pauseEndsAt!) - Date.now();
    assert.ok(left > 0 && left <= 6000, `time left ${left}`);
    assert.match(formatRollout(timed!), /pause ends in [0-6] s/);
    await assert.rejects(control(await temporalClient(), 'resume', s.ns, 'hold'), /resume rejected: the rollout of v5 is not paused by request: it waits at step 2\/3: pause for 6 s; promote to go on/);
    await eventually('the timed pause over, by itself: the indefinite one', async () => ((await handle.query(rolloutQuery))?.step === 2 ? true : undefined), { timeoutMs: 30_000 });
    await sleep(3000);
    assert.equal((await getApp(s.ns, 'hold'))!.status.canary.phase, 'Paused', 'still waiting for promote');
    await assert.rejects(control(await temporalClient(), 'resume', s.ns, 'hold'), /pause until promoted; promote to go on/);
    await handle.executeUpdate(controlUpdates.promote, { args: [{ by: 'test' }] });
    await waitCanaryPhase(s.ns, 'hold', 'Promoted');
    await assertSteadyState(s.ns, 'hold');
  });

  it('a canary spec changed under a running rollout applies to the next one: a condition and an Event say so', async () => {
    await apply(meshApp(s.ns, 'later', { enabled: true, canaryVersion: 'v6', steps: [{ setWeight: 10 }, { pause: {} }] }));
    await waitCanaryPhase(s.ns, 'later', 'Paused');
    const specCondition = async () => (await getApp(s.ns, 'later'))!.status.conditions?.find((c: Json) => c.type === 'CanarySpecApplied');
    await eventually('CanarySpecApplied True while the rollout runs with today\'s spec', async () => ((await specCondition())?.status === 'True' ? true : undefined), { timeoutMs: 30_000 });
    // New steps and a longer progress deadline, same version and image: no new rollout; the running one keeps its plan.
    await apply(meshApp(s.ns, 'later', { enabled: true, canaryVersion: 'v6', steps: [{ setWeight: 30 }, { pause: {} }], progressDeadline: '20m' }));
    const deferred = await eventually('CanarySpecApplied False', async () => {
      const c = await specCondition();
      return c?.status === 'False' ? c : undefined;
    }, { timeoutMs: 30_000 });
    assert.equal(deferred.reason, 'RolloutSpecDeferred');
    assert.match(deferred.message, /^canary steps, progressDeadline changed while the rollout of v6 runs \(generation \d+\): it keeps the spec it started with; the change applies to the next rollout/);
    const app = (await getApp(s.ns, 'later'))!;
    assert.equal(app.status.canary.weight, 10, 'the running rollout did not take the new steps');
    assert.ok((await eventsOf(s.ns, app.metadata.uid)).some((e) => e.reason === 'RolloutSpecDeferred' && /canary steps, progressDeadline changed/.test(e.note)), 'an Event says so');
    await control(await temporalClient(), 'promote', s.ns, 'later');
    await waitCanaryPhase(s.ns, 'later', 'Promoted');
    await eventually('no CanarySpecApplied once no rollout runs', async () => ((await specCondition()) === undefined ? true : undefined), { timeoutMs: 30_000 });
  });

  it('rolls a bad canary back by itself, never routing to it, and says why', async () => {
    await apply(meshApp(s.ns, 'bad', { enabled: true, canaryVersion: 'bad', image: unreadyImage, steps: [{ setWeight: 50 }, { pause: {} }] }));
    const app = await waitCanaryPhase(s.ns, 'bad', 'RolledBack');
    assert.equal(app.status.canary.reason, 'HealthGateFailed');
    assert.match(app.status.canary.message, /health gate failed 3 times.*0\/1 canary replicas ready/);
    // The conditions say it too, not only status.canary.
    const cond = app.status.conditions.find((c: Json) => c.type === 'CanaryProgressing');
    assert.deepEqual([cond?.status, cond?.reason], ['False', 'HealthGateFailed']);
    assert.match(cond?.message, /rolled back: health gate failed/);
    await assertSteadyState(s.ns, 'bad');
    // By uid, as kubectl describe looks them up.
    const events = await kube(['-n', s.ns, 'get', 'events', '--field-selector', `involvedObject.uid=${app.metadata.uid}`, '-o', 'jsonpath={.items[*].reason}']);
    assert.match(events, /CanaryRolledBack/);
  });

  it('deleting the Application mid-rollout cleans up the canary and releases the finalizer', async () => {
    await apply(meshApp(s.ns, 'delme', { enabled: true, canaryVersion: 'v6', weight: 40 }));
    await waitWeights(s.ns, 'delme', 40);
    await kube(['-n', s.ns, 'delete', 'application', 'delme', '--wait=true', '--timeout=60s']);
    assert.equal(await getApp(s.ns, 'delme'), null);
    assert.equal(await getDeployment(s.ns, 'delme-canary'), null);
    const client = await temporalClient();
    const d = await client.workflow.getHandle(rolloutWorkflowId(s.ns, 'delme')).describe();
    assert.notEqual(d.status.name, 'RUNNING');
  });

  // A rollout that goes as planned is not a warning: each of these was logged by every healthy rollout (a canary
  // not ready in its start-up grace, the Application's pass crossing the promote's spec change with a 409, a recheck
  // reaching a rollout that had just ended) until a benchmark of 10 healthy rollouts logged 20 warnings and an error.
  it('the rollouts that went as planned (seed, steps) logged no warning and no error', async () => {
    const ids = ['seed', 'steps'].flatMap((n) => [applicationWorkflowId(s.ns, n), rolloutWorkflowId(s.ns, n)]);
    const lines = (await s.op.logs()).split('\n').filter((l) => l.startsWith('{')).map((l) => JSON.parse(l) as { level: number; msg: string; workflowId?: string; err?: unknown; error?: unknown });
    assert.ok(lines.some((l) => l.workflowId !== undefined && ids.includes(l.workflowId)), 'the log has lines of these workflows');
    const bad = lines.filter((l) => l.level >= 40 && l.workflowId !== undefined && ids.includes(l.workflowId)).map((l) => `${l.workflowId}: ${l.msg} ${JSON.stringify(l.err ?? l.error ?? '')}`);
    assert.deepEqual(bad, []);
  });

  it('replays every Application and rollout history of this file deterministically', async () => {
    const client = await temporalClient();
    const histories = client.workflow.list({ query: `TaskQueue = '${s.op.taskQueue}'` }).intoHistories();
    const types = new Set<string>();
    for await (const r of Worker.runReplayHistories({ workflowBundle: await workflowBundle() }, histories)) {
      assert.equal(r.error, undefined, `${r.workflowId}: ${String(r.error)}`);
      types.add(r.workflowId.endsWith('/canary') ? 'rollout' : 'application');
    }
    assert.deepEqual([...types].sort(), ['application', 'rollout']);
  });

  it('every VirtualService written in this file summed to 100 and never routed to a canary without ready pods', async () => {
    const { seen, violations } = await s.routes.stop();
    assert.ok(seen >= 10, `observed ${seen} VirtualService versions`);
    assert.deepEqual(violations, []);
  });
});
