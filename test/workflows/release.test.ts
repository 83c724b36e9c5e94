// The Release workflow's wave and compensation logic, scenario by scenario, on a real worker with scripted
// activities (each Application's canary promotes, fails, hangs or disappears as the scenario says). Histories are
// replayed.
import type { WorkflowHandleWithSignaledRunId } from '@temporalio/client';
import { WorkflowNotFoundError, WorkflowUpdateFailedError } from '@temporalio/client';
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { controlRelease } from '../../client/release.ts';
import { eventually } from '../../lib/poll.ts';
import type { releaseWorkflow } from '../../workflows/release/workflow.ts';
import type { ReleasePlan } from '../../reconcile/wave-plan.ts';
import {
  changedSignal, releaseQuery, releaseUpdates, releaseWorkflowId, releaseWorkflowType, type ChangeSignal, type ControlAction, type ReleaseState,
} from '../../workflows/contract.ts';
import { WorkflowTier, type Recorder, type ReleaseScript } from './stubs.ts';

const tier = new WorkflowTier();

interface Run {
  handle: WorkflowHandleWithSignaledRunId<typeof releaseWorkflow>;
  r: Recorder;
}

const plan = (waves: string[][], over: Partial<ReleasePlan> = {}): ReleasePlan => ({
  generation: 1, waves: waves.map((apps, i) => ({ name: `w${i + 1}`, apps: apps.map((name) => ({ name, canaryVersion: 'v2' })) })), ...over,
});

async function start(release: ReleaseScript, options: { maxHistoryEvents?: number } = {}): Promise<Run> {
  const { namespace, recorder } = tier.scenario({ release });
  const handle = await tier.client.workflow.signalWithStart<typeof releaseWorkflow, [ChangeSignal]>(releaseWorkflowType, {
    taskQueue: tier.taskQueue, workflowId: releaseWorkflowId(namespace, 'rel'), args: [{ namespace, name: 'rel', options: { pollSeconds: 0.2, ...options } }],
    signal: changedSignal, signalArgs: [{ reason: 'spec' }],
  });
  return { handle, r: recorder };
}

const state = (run: Run, ok: (s: ReleaseState) => boolean) => eventually('release state', async () => {
  const s = await run.handle.query(releaseQuery);
  return ok(s) ? s : undefined;
}, { timeoutMs: 120_000, intervalMs: 100 });

const control = (run: Run, action: ControlAction, by = 'tester') => run.handle.executeUpdate(releaseUpdates[action], { args: [{ by }] });
const started = (r: Recorder) => r.calls.filter((c) => c.name === 'startCanary').map((c) => c.input['app'] as string);
const reverted = (r: Recorder) => r.calls.filter((c) => c.name === 'revertApplication').map((c) => c.input['app'] as string);

/** Ends a scenario: a Release still running is terminated (one that finished has ended by itself); its history replays. */
async function end(run: Run): Promise<void> {
  const { status } = await run.handle.describe();
  // A Release that ends by itself may end between the look and the terminate: then there is nothing to terminate.
  if (status.name === 'RUNNING') await run.handle.terminate('scenario over').catch((err: unknown) => {
    if (!(err instanceof WorkflowNotFoundError)) throw err;
  });
  await tier.replay(run.handle);
}

describe('release workflow', { concurrency: true }, () => {
  before(() => tier.start());
  after(() => tier.stop());

  it('promotes the waves in order: a wave starts only when the one before is promoted', async () => {
    const run = await start({ plan: plan([['a', 'b'], ['c']]), apps: { a: { outcome: 'promote', after: 2 }, b: { outcome: 'promote', after: 4 } } });
    const s = await state(run, (x) => x.phase === 'Promoted');
    assert.deepEqual(started(run.r), ['a', 'b', 'c']);
    const cStarted = run.r.calls.find((c) => c.name === 'startCanary' && c.input['app'] === 'c')!.at;
    const wave1Done = run.r.releaseStatuses().findIndex((st) => /wave 1 \(w1\) promoted/.test(st.message));
    assert.ok(wave1Done >= 0, 'wave 1 promoted first');
    assert.ok(run.r.calls.filter((c) => c.name === 'observeApplications' && c.at < cStarted).length >= 4, 'c waited for a and b');
    assert.deepEqual(s.applications.map((a) => `${a.name}:${a.phase}`), ['a:Promoted', 'b:Promoted', 'c:Promoted']);
    assert.equal(run.r.count('releaseClaims'), 1, 'the Applications were let go');
    assert.equal(run.r.count('revertApplication'), 0);
    await end(run);
  });

  it('a canary failing in wave 2 stops the wave and puts wave 1 back, last first', async () => {
    const run = await start({ plan: plan([['a', 'b'], ['c', 'd']]), apps: { c: { outcome: 'fail', after: 3 }, d: { outcome: 'hang' } } });
    const s = await state(run, (x) => x.phase === 'RolledBack');
    assert.equal(s.failedApplication, 'c');
    assert.match(s.message, /^the canary v2 of c was rolled back: /);
    assert.deepEqual(run.r.calls.filter((c) => c.name === 'stopCanary').map((c) => c.input['app']), ['d', 'c'], 'the rest of wave 2 stopped, and the failed canary switched off');
    assert.deepEqual(reverted(run.r), ['b', 'a'], 'wave 1 reverted in reverse order');
    assert.deepEqual(s.applications.map((a) => `${a.name}:${a.phase}`), ['a:Reverted', 'b:Reverted', 'c:Failed', 'd:Stopped']);
    const stop = run.r.calls.findIndex((c) => c.name === 'stopCanary');
    const revert = run.r.calls.findIndex((c) => c.name === 'revertApplication');
    assert.ok(stop < revert, 'the wave is stopped before the earlier waves are reverted');
    await end(run);
  });

  it('an image changed by hand after its promotion stands when the release rolls back: the others are put back and the release ends', async () => {
    const run = await start({ plan: plan([['a', 'b'], ['c']]), apps: { a: { outcome: 'promote', editedTo: 'a:2-hotfix' }, c: { outcome: 'fail', after: 3 } } });
    const s = await state(run, (x) => x.phase === 'RolledBack');
    assert.deepEqual(reverted(run.r), ['b', 'a']);
    assert.deepEqual(s.applications.map((a) => `${a.name}:${a.phase}`), ['a:Promoted', 'b:Reverted', 'c:Failed']);
    assert.equal(s.applications.find((a) => a.name === 'a')!.message, 'left at a:2-hotfix: its image was changed after the Release promoted a:v2');
    assert.match(s.message, /every Application this release promoted runs its previous image again; left as changed after its promotion: a \(a:2-hotfix\)$/);
    await end(run);
  });

  it('a rollback puts back the image an Application ran when its canary started, not the one it had when the release claimed it (a hotfix in between)', async () => {
    const run = await start({ plan: plan([['a'], ['b']]), apps: { a: { outcome: 'promote', hotfix: 'a:old-hotfix' }, b: { outcome: 'fail', after: 3 } } });
    const s = await state(run, (x) => x.phase === 'RolledBack');
    const revert = run.r.calls.find((c) => c.name === 'revertApplication' && c.input['app'] === 'a');
    assert.equal(revert?.input['previousImage'], 'a:old-hotfix');
    assert.deepEqual(s.applications.map((a) => `${a.name}:${a.phase}:${a.message}`), ['a:Reverted:back to a:old-hotfix', `b:Failed:${s.applications[1]!.message}`]);
    await end(run);
  });

  it('an abort during the pause between waves puts wave 1 back; the abort answers with the state', async () => {
    const run = await start({ plan: plan([['a'], ['b']], { pauseBetweenWavesMs: null }) });
    await state(run, (x) => x.phase === 'Paused' && /waiting for a promote to start wave 2/.test(x.message));
    const answer = await control(run, 'abort', 'ann');
    assert.match(answer.message, /abort requested by ann/);
    const s = await state(run, (x) => x.phase === 'Aborted');
    assert.match(s.message, /aborted by ann/);
    assert.deepEqual(reverted(run.r), ['a']);
    assert.deepEqual(started(run.r), ['a'], 'wave 2 never started');
    await end(run);
  });

  it('a promote starts the next wave when the release waits for one; a timed pause ends by itself', async () => {
    const held = await start({ plan: plan([['a'], ['b']], { pauseBetweenWavesMs: null }) });
    await state(held, (x) => x.phase === 'Paused');
    await control(held, 'promote');
    await state(held, (x) => x.phase === 'Promoted');
    assert.deepEqual(started(held.r), ['a', 'b']);
    const timed = await start({ plan: plan([['a'], ['b']], { pauseBetweenWavesMs: 300 }) });
    await state(timed, (x) => x.phase === 'Promoted');
    await Promise.all([end(held), end(timed)]);
  });

  it('pause holds the next wave until resumed; refused requests say why', async () => {
    const run = await start({ plan: plan([['a'], ['b']]), apps: { a: { outcome: 'promote', after: 6 } } });
    await state(run, (x) => x.wave === 1 && x.phase === 'Progressing');
    await control(run, 'pause');
    await assert.rejects(control(run, 'pause'), (e: unknown) => e instanceof WorkflowUpdateFailedError && /already paused/.test(e.cause?.message ?? ''));
    await state(run, (x) => x.phase === 'Paused' && /paused by request before wave 2/.test(x.message));
    assert.deepEqual(started(run.r), ['a'], 'wave 2 waits');
    await control(run, 'resume');
    await state(run, (x) => x.phase === 'Promoted');
    assert.deepEqual(started(run.r), ['a', 'b']);
    // Over, its run has ended: the CLI's abort answers from it.
    const { namespace } = await run.handle.query(releaseQuery);
    assert.equal((await controlRelease(tier.client, 'abort', namespace, 'rel')).note, 'nothing to abort: the release is Promoted');
    await end(run);
  });

  it('a refused claim fails the release with the reason and touches nothing', async () => {
    const run = await start({ plan: plan([['a'], ['b']]), refuse: 'Application a already runs its own canary (v7, Paused): finish or abort it first' });
    const s = await state(run, (x) => x.phase === 'Failed');
    assert.match(s.message, /refused: Application a already runs its own canary/);
    assert.equal(run.r.count('startCanary'), 0);
    // Each Application says why it was not taken, none says Waiting for a wave that will never come.
    assert.deepEqual(s.applications.map((a) => [a.name, a.phase, a.message]), [
      ['a', 'Refused', 'Application a already runs its own canary (v7, Paused): finish or abort it first'],
      ['b', 'Refused', 'not claimed: the Release was refused for another Application'],
    ]);
    assert.equal(s.wave, 0);
    assert.equal(await run.handle.result(), 'Failed', 'and its run is over');
    await end(run);
  });

  it('an Application deleted during its wave fails the wave with a clear reason, and the earlier wave is put back', async () => {
    const run = await start({ plan: plan([['a'], ['b']]), apps: { b: { outcome: 'gone', after: 2 } } });
    const s = await state(run, (x) => x.phase === 'RolledBack');
    assert.equal(s.failedApplication, 'b');
    assert.match(s.message, /Application b was deleted during its wave/);
    assert.deepEqual(reverted(run.r), ['a']);
    await end(run);
  });

  it('deleting the Release mid-flight compensates first, then releases the finalizer', async () => {
    let deleting = false;
    const run = await start({
      plan: plan([['a'], ['b']]), apps: { b: { outcome: 'hang' } },
      read: () => (deleting ? { outcome: 'deleting', uid: 'rel-uid' } : { outcome: 'ready', uid: 'rel-uid', generation: 1, plan: plan([['a'], ['b']]) }),
    });
    await state(run, (x) => x.wave === 2);
    deleting = true;
    await run.handle.signal(changedSignal, { reason: 'deleted' });
    assert.equal(await run.handle.result(), 'deleted');
    assert.deepEqual(reverted(run.r), ['a']);
    assert.deepEqual(run.r.calls.filter((c) => c.name === 'stopCanary').map((c) => c.input['app']), ['b']);
    const order = run.r.names().filter((n) => n === 'revertApplication' || n === 'finalizeRelease');
    assert.deepEqual(order, ['revertApplication', 'finalizeRelease']);
    await tier.replay(run.handle);
  });

  it('a generation that already ran is not run again; an invalid spec is reported', async () => {
    const done = await start({ read: () => ({ outcome: 'ready', uid: 'u', generation: 3, plan: plan([['a']], { generation: 3 }), finishedPhase: 'Promoted' }) });
    await state(done, (x) => x.phase === 'Promoted');
    assert.equal(done.r.count('claimApplications'), 0);
    const invalid = await start({ read: () => ({ outcome: 'invalid', uid: 'u', generation: 1, message: 'spec.waves: should have at least 1 items' }) });
    const s = await state(invalid, (x) => x.phase === 'Failed');
    assert.match(s.message, /the spec is invalid: spec.waves/);
    await Promise.all([end(done), end(invalid)]);
  });

  it('a finished Release holds no workflow open: its run ends with the outcome, and a change starts a new run for the next generation', async () => {
    let generation = 1;
    const run = await start({ read: () => ({ outcome: 'ready', uid: 'u', generation, plan: plan([['a']], { generation }) }) });
    assert.equal(await run.handle.result(), 'Promoted', 'the run ends once its generation is promoted');
    // The CLI still answers for a Release whose run is over, from that run.
    const { namespace } = await run.handle.query(releaseQuery);
    assert.deepEqual(await controlRelease(tier.client, 'abort', namespace, 'rel').then((r) => [r.accepted, r.note]), [false, 'nothing to abort: the release is Promoted']);
    await assert.rejects(controlRelease(tier.client, 'promote', namespace, 'rel'), /promote rejected: the release is Promoted/);
    // The watcher's signalWithStart on the next spec change starts a new run under the same id.
    generation = 2;
    const next = await tier.client.workflow.signalWithStart<typeof releaseWorkflow, [ChangeSignal]>(releaseWorkflowType, {
      taskQueue: tier.taskQueue, workflowId: run.handle.workflowId, args: [{ namespace, name: 'rel', options: { pollSeconds: 0.2 } }],
      signal: changedSignal, signalArgs: [{ reason: 'spec' }],
    });
    assert.notEqual(next.signaledRunId, run.handle.signaledRunId, 'a new run');
    assert.equal(await next.result(), 'Promoted');
    assert.equal(run.r.count('claimApplications'), 2, 'each generation ran once');
    assert.equal((await next.query(releaseQuery)).generation, 2);
    await tier.replay(run.handle);
  });

  it('a change signalled while a generation runs is read before the run ends', async () => {
    let generation = 1;
    const run = await start({ plan: plan([['a']]), apps: { a: { outcome: 'promote', after: 5 } }, read: () => ({ outcome: 'ready', uid: 'u', generation, plan: plan([['a']], { generation }) }) });
    await state(run, (x) => x.wave === 1);
    generation = 2;
    await run.handle.signal(changedSignal, { reason: 'spec' });
    // An Application's status moving is no change of the Release: it does not keep the run open.
    await run.handle.signal(changedSignal, { reason: 'child-status' });
    assert.equal(await run.handle.result(), 'Promoted');
    assert.equal(run.r.count('readRelease'), 2, 'read again after the run, once');
    assert.equal(run.r.count('claimApplications'), 2, 'and the new generation ran');
    await tier.replay(run.handle);
  });

  it('continues as new while a wave waits and between waves, carrying everything; resume does not pass a wait for a promote', async () => {
    const run = await start({ plan: plan([['a'], ['b']], { pauseBetweenWavesMs: null }), apps: { a: { outcome: 'promote', after: 25 } } }, { maxHistoryEvents: 30 });
    await state(run, (x) => x.phase === 'Paused' && /waiting for a promote to start wave 2/.test(x.message));
    const runs = await tier.runs(run.handle.workflowId);
    assert.ok(runs >= 2, `continued as new while wave 1 waited (${runs} runs)`);
    await assert.rejects(control(run, 'resume'), (e: unknown) => e instanceof WorkflowUpdateFailedError && /not paused by request: it waits for a promote/.test(e.cause?.message ?? ''));
    await control(run, 'promote', 'una');
    const s = await state(run, (x) => x.phase === 'Promoted');
    assert.deepEqual(started(run.r), ['a', 'b'], 'each canary started once');
    assert.equal(run.r.count('claimApplications'), 1, 'claimed once');
    assert.deepEqual(s.applications.map((a) => `${a.name}:${a.phase}`), ['a:Promoted', 'b:Promoted']);
    assert.equal(run.r.releaseStatuses().filter((st) => /waiting for a promote to start wave 2/.test(st.message)).length, 1, 'status said it once');
    assert.equal(await run.handle.result(), 'Promoted', 'the last run ends with the outcome');
    await tier.replayRuns(run.handle.workflowId);
  });

  // ---- fleet releases: Applications in member clusters ----

  const fleet = (waves: { name: string; cluster?: string; canaryVersion?: string }[][]): ReleasePlan => ({
    generation: 1, waves: waves.map((apps, i) => ({ name: `w${i + 1}`, apps: apps.map((a) => ({ canaryVersion: 'v2', ...a })) })),
  });
  const where = (c: { input: Record<string, unknown> }) => `${(c.input['cluster'] as string | undefined) ?? 'hub'}/${c.input['app'] as string}`;

  it('a fleet release runs cluster by cluster; a canary failing in the last cluster puts the first two back, last first', async () => {
    const run = await start({
      plan: fleet([[{ name: 'api' }], [{ name: 'api', cluster: 'b' }], [{ name: 'api', cluster: 'c' }]]),
      apps: { 'c/api': { outcome: 'fail', after: 2 } },
    });
    const s = await state(run, (x) => x.phase === 'RolledBack');
    assert.equal(s.failedApplication, 'c/api');
    assert.match(s.message, /^the canary v2 of api in cluster c was rolled back: /);
    assert.deepEqual(run.r.calls.filter((c) => c.name === 'startCanary').map(where), ['hub/api', 'b/api', 'c/api']);
    assert.deepEqual(run.r.calls.filter((c) => c.name === 'revertApplication').map(where), ['b/api', 'hub/api'], 'the member first (last wave first), then the hub');
    assert.deepEqual(s.applications.map((a) => `${a.cluster ?? 'hub'}/${a.name}:${a.phase}`), ['hub/api:Reverted', 'b/api:Reverted', 'c/api:Failed']);
    assert.deepEqual(run.r.calls.filter((c) => c.name === 'claimApplications').map((c) => c.input['cluster'] ?? 'hub'), ['hub', 'b', 'c'], 'one claim per cluster');
    assert.deepEqual(run.r.calls.filter((c) => c.name === 'releaseClaims').map((c) => c.input['cluster'] ?? 'hub'), ['hub', 'b', 'c'], 'every cluster let go');
    await end(run);
  });

  it('a member cluster that does not answer holds the release visibly, and it goes on when the cluster is back', async () => {
    const down = new Set(['b']);
    const run = await start({ plan: fleet([[{ name: 'api' }], [{ name: 'api', cluster: 'b' }, { name: 'web', cluster: 'b' }]]), down });
    // b is down from the start: the claim of its Applications holds (the hub's was made).
    const held = await state(run, (x) => x.heldByCluster === 'b');
    assert.match(held.message, /^held: cluster b cannot be reached \(claiming its Applications\): cluster b .*ECONNREFUSED.*; the release goes on when it answers, or rolls back on abort$/);
    await sleep(600);
    assert.equal((await run.handle.query(releaseQuery)).heldByCluster, 'b', 'still held while b is down');
    const statusEvents = () => run.r.calls.filter((c) => c.name === 'writeReleaseStatus').map((c) => (c.input['event'] as { reason: string } | undefined)?.reason).filter(Boolean);
    assert.equal(statusEvents().filter((r) => r === 'ClusterUnreachable').length, 1, 'one Event for the hold, however many tries');
    down.delete('b');
    const s = await state(run, (x) => x.phase === 'Promoted');
    assert.equal(s.heldByCluster, undefined);
    assert.ok(statusEvents().includes('ClusterReachable'), 'the Release said the cluster answers again');
    assert.deepEqual(run.r.calls.filter((c) => c.name === 'startCanary').map(where), ['hub/api', 'b/api', 'b/web']);
    // Down again in the middle of its wave: the look holds, then goes on.
    await end(run);
  });

  it('an abort while a member cluster is held rolls back: the undo waits for that cluster, then puts the hub back', async () => {
    const down = new Set<string>();
    const run = await start({ plan: fleet([[{ name: 'api' }], [{ name: 'api', cluster: 'b' }]]), apps: { 'b/api': { outcome: 'hang' } }, down });
    await state(run, (x) => x.wave === 2 && x.applications.some((a) => a.cluster === 'b' && a.phase === 'Progressing'));
    down.add('b');
    await state(run, (x) => x.heldByCluster === 'b');
    await control(run, 'abort', 'ann');
    const undoing = await state(run, (x) => x.phase === 'Aborting' && x.heldByCluster === 'b');
    assert.match(undoing.message, /held: cluster b cannot be reached \((aborting|stopping) the canary of api\)/);
    assert.deepEqual(reverted(run.r), [], 'nothing put back while the running canary cannot be stopped');
    down.delete('b');
    const s = await state(run, (x) => x.phase === 'Aborted');
    assert.deepEqual(run.r.calls.filter((c) => c.name === 'stopCanary').map(where), ['b/api']);
    assert.deepEqual(run.r.calls.filter((c) => c.name === 'revertApplication').map(where), ['hub/api']);
    assert.deepEqual(s.applications.map((a) => `${a.cluster ?? 'hub'}/${a.name}:${a.phase}`), ['hub/api:Reverted', 'b/api:Stopped']);
    await end(run);
  });
});
