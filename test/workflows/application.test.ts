// The Application workflow's loop, scenario by scenario, on a real worker with scripted activities: what starts,
// supersedes and stops rollouts, reported failures, deletion and continue-as-new. Histories are replayed.
import type { WorkflowHandle, WorkflowHandleWithSignaledRunId } from '@temporalio/client';
import proto from '@temporalio/proto';
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { FailureType } from '../../api/constants.ts';
import type { ReconcileResult } from '../../activities/types.ts';
import type { applicationWorkflow } from '../../workflows/application.ts';
import {
  applicationPatchLevel, applicationWorkflowId, applicationWorkflowType, changedSignal, controlSignals, rolloutEndedSignal, rolloutWorkflowId, rolloutWorkflowType, stateQuery,
  type ApplicationState, type ChangeSignal, type LoopOptions,
} from '../../workflows/contract.ts';
import { eventually } from '../../lib/poll.ts';
import { appPhaseKey } from '../../workflows/search-attributes.ts';
import { WorkflowTier, failure, plan, sleep, type Recorder, type Script } from './stubs.ts';

const tier = new WorkflowTier();
const { EventType } = proto.temporal.api.enums.v1;

interface AppRun {
  namespace: string;
  handle: WorkflowHandleWithSignaledRunId<typeof applicationWorkflow>;
  r: Recorder;
}

/** Starts an Application's workflow; `asWatcher` starts it as the watcher does (its AppPhase and patch level). */
async function startApp(script: Script, options: Partial<LoopOptions> = {}, asWatcher?: { phase: string }): Promise<AppRun> {
  const { namespace, recorder } = tier.scenario(script);
  const handle = await tier.client.workflow.signalWithStart<typeof applicationWorkflow, [ChangeSignal]>(applicationWorkflowType, {
    taskQueue: tier.taskQueue, workflowId: applicationWorkflowId(namespace, 'app'),
    args: [{ namespace, name: 'app', options: { progressRecheckSeconds: 1, ...options }, ...(asWatcher ? { patchLevel: applicationPatchLevel } : {}) }],
    signal: changedSignal, signalArgs: [{ reason: 'spec' }],
    ...(asWatcher ? { typedSearchAttributes: [{ key: appPhaseKey, value: asWatcher.phase }] } : {}),
  });
  return { namespace, handle, r: recorder };
}

/** Polls the state query until `ok` holds (an activity's answer reaches the workflow a moment after it was recorded). */
async function stateUntil(handle: WorkflowHandle, ok: (s: ApplicationState) => boolean): Promise<ApplicationState> {
  return eventually('application state', async () => {
    const s = await handle.query(stateQuery);
    return ok(s) ? s : undefined;
  }, { timeoutMs: 60_000, intervalMs: 50 });
}

const change = (run: AppRun) => run.handle.signal(changedSignal, { reason: 'spec' });
const canaryA = plan({ key: 'a|app:a', version: 'a', image: 'app:a', steps: [{ kind: 'weight', weight: 10 }, { kind: 'pause', ms: null }] });
const canaryB = plan({ key: 'b|app:b', version: 'b', image: 'app:b', steps: [{ kind: 'weight', weight: 20 }, { kind: 'pause', ms: null }] });
const rolloutCalls = (r: Recorder, namespace: string, name: string) => r.calls.filter((c) => c.workflowId === rolloutWorkflowId(namespace, 'app') && c.name === name);

/** Replays the Application workflow's history and the rollouts' (every run of the rollout id). */
async function replayAll(run: AppRun): Promise<void> {
  await tier.replay(run.handle);
  for await (const wf of tier.client.workflow.list({ query: `WorkflowId = '${rolloutWorkflowId(run.namespace, 'app')}'` })) {
    await tier.replay(tier.client.workflow.getHandle(wf.workflowId, wf.runId));
  }
}

describe('Application workflow', { concurrency: true }, () => {
  before(() => tier.start());
  after(() => tier.stop());

  it('reconciles on every change signal; child-status alone never re-applies', async () => {
    const run = await startApp({});
    await run.r.until('first pass', (r) => r.count('reconcileApplication') === 1);
    await run.handle.signal(changedSignal, { reason: 'child-status', object: 'Deployment/app' });
    await run.r.until('second pass', (r) => r.count('reconcileApplication') === 2);
    await change(run);
    await run.r.until('third pass', (r) => r.count('reconcileApplication') === 3);
    const applies = run.r.calls.filter((c) => c.name === 'reconcileApplication').map((c) => c.input['apply']);
    assert.deepEqual(applies, [true, false, true]);
    const state = await stateUntil(run.handle, (st) => st.passes === 3);
    assert.equal(state.phase, 'Running');
    await run.handle.terminate('done');
    await replayAll(run);
  });

  it('a pass a stable pod\'s problem woke reads the pods (podProblem), whatever the Deployment\'s status says; others do not', async () => {
    const run = await startApp({});
    await run.r.until('first pass', (r) => r.count('reconcileApplication') === 1);
    await run.handle.signal(changedSignal, { reason: 'child-status', object: 'Pod/app-5d9c-x2' });
    await run.r.until('second pass', (r) => r.count('reconcileApplication') === 2);
    await run.handle.signal(changedSignal, { reason: 'child-status', object: 'Deployment/app' });
    await run.r.until('third pass', (r) => r.count('reconcileApplication') === 3);
    const passes = run.r.calls.filter((c) => c.name === 'reconcileApplication').map((c) => [c.input['apply'], c.input['podProblem']]);
    assert.deepEqual(passes, [[true, undefined], [false, true], [false, undefined]]);
    await run.handle.terminate('done');
    await replayAll(run);
  });

  it('a pass the spec changed under ends superseded: the workflow passes again at once, with no signal and no failure', async () => {
    const run = await startApp({ reconcile: (n) => (n === 0 ? { outcome: 'superseded', phase: undefined, generation: undefined, message: undefined } : { generation: 2 }) });
    await run.r.until('second pass', (r) => r.count('reconcileApplication') === 2);
    const state = await stateUntil(run.handle, (st) => st.passes === 2);
    assert.equal(state.phase, 'Running', 'the phase comes from the pass over the new spec');
    assert.equal(state.generation, 2);
    assert.deepEqual(run.r.calls.filter((c) => c.name === 'reconcileApplication').map((c) => c.input['apply']), [true, true], 'the second pass applies the new spec');
    const history = await run.handle.fetchHistory();
    const signals = history.events?.filter((e) => e.eventType === EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED).length;
    assert.equal(signals, 1, 'only the signal that started it');
    await run.handle.terminate('done');
    await replayAll(run);
  });

  it('starts a rollout the spec asks for and forwards control sent to the Application workflow', async () => {
    const run = await startApp({ reconcile: () => ({ canary: canaryA }) });
    await run.r.until('rollout paused', (r) => r.last()?.phase === 'Paused');
    await run.handle.signal(controlSignals.promote, { by: 'eve' });
    await run.r.until('promoted', (r) => r.last()?.phase === 'Promoted');
    // The finished rollout is not restarted although the (scripted) spec still asks for it.
    await run.r.until('a pass after the rollout', (r) => r.count('reconcileApplication') >= 2);
    await change(run);
    await run.r.until('another pass', (r) => r.count('reconcileApplication') >= 3);
    await sleep(500);
    assert.equal(rolloutCalls(run.r, run.namespace, 'prepareCanary').length, 1, 'one rollout only');
    await run.handle.terminate('done');
    await replayAll(run);
  });

  it('a new canary in the spec supersedes the running one: aborted, then the new one starts', async () => {
    let canary = canaryA;
    const run = await startApp({ reconcile: () => ({ canary }) });
    await run.r.until('a paused', (r) => r.last()?.version === 'a' && r.last()?.phase === 'Paused');
    canary = canaryB;
    await change(run);
    await run.r.until('b paused', (r) => r.last()?.version === 'b' && r.last()?.phase === 'Paused');
    const a = run.r.statuses.filter((s) => s.version === 'a').at(-1);
    assert.equal(a?.phase, 'Aborted');
    assert.match(a?.message ?? '', /superseded by canary b \(app:b\)/);
    await run.handle.terminate('done');
    await replayAll(run);
  });

  it('an aborted canary stays aborted on later passes; a different one starts', async () => {
    let canary = canaryA;
    const run = await startApp({ reconcile: () => ({ canary }) });
    await run.r.until('a paused', (r) => r.last()?.phase === 'Paused');
    await run.handle.signal(controlSignals.abort, { by: 'fay', reason: 'no' });
    await run.r.until('a aborted', (r) => r.last()?.phase === 'Aborted');
    await change(run);
    await sleep(700);
    assert.equal(rolloutCalls(run.r, run.namespace, 'prepareCanary').length, 1, 'not restarted');
    canary = canaryB;
    await change(run);
    await run.r.until('b started', (r) => r.last()?.version === 'b');
    await run.handle.terminate('done');
    await replayAll(run);
  });

  it('a new workflow run does not restart a rollout that status says finished', async () => {
    const run = await startApp({ reconcile: () => ({ canary: canaryA, lastRollout: { key: canaryA.key, phase: 'RolledBack', step: 2, weight: 0 } }) });
    await run.r.until('two passes', (r) => r.count('reconcileApplication') >= 1);
    await change(run);
    await run.r.until('second pass', (r) => r.count('reconcileApplication') >= 2);
    assert.equal(run.r.count('prepareCanary'), 0);
    await run.handle.terminate('done');
    await replayAll(run);
  });

  it('deletion mid-rollout aborts and compensates the rollout, finalizes, and ends', async () => {
    let outcome: ReconcileResult['outcome'] = 'reconciled';
    const run = await startApp({ reconcile: () => ({ canary: canaryA, outcome }) });
    await run.r.until('rollout paused', (r) => r.last()?.phase === 'Paused');
    outcome = 'deleting';
    await run.handle.signal(changedSignal, { reason: 'deleted' });
    assert.equal(await run.handle.result(), 'deleted');
    assert.equal(run.r.last()?.phase, 'Aborted');
    assert.match(run.r.last()?.message ?? '', /being deleted/);
    const order = run.r.names().filter((n) => n === 'removeCanary' || n === 'finalizeApplication');
    assert.deepEqual(order, ['removeCanary', 'finalizeApplication'], 'the canary is compensated before the children go');
    await replayAll(run);
  });

  it('deletion with no rollout is finalized by the pass it wakes (one step, no separate finalizing activity)', async () => {
    const asked: (boolean | undefined)[] = [];
    const run = await startApp({
      reconcile: (_n, input) => {
        asked.push(input.finalize);
        return input.finalize ? { outcome: 'deleting', finalized: { removed: ['Deployment/app', 'Service/app'], finalizerReleased: true } } : {};
      },
    });
    await run.r.until('first pass', (r) => r.count('reconcileApplication') >= 1);
    await run.handle.signal(changedSignal, { reason: 'deleted' });
    assert.equal(await run.handle.result(), 'deleted');
    assert.deepEqual(asked, [undefined, true], 'only the pass the deletion woke is asked to finalize');
    assert.equal(run.r.count('finalizeApplication'), 0);
    await replayAll(run);
  });

  it('a pass retrying with its backoff gives way to a deletion at once: cancelled, and the pass the deletion wakes finalizes', async () => {
    const asked: { finalize: boolean; at: number }[] = [];
    const run = await startApp({
      reconcile: (_n, input) => {
        asked.push({ finalize: input.finalize === true, at: Date.now() });
        return input.finalize ? { outcome: 'deleting', finalized: { removed: ['Deployment/app'], finalizerReleased: true } } : new Error('the API server answers 500 (scripted)');
      },
    });
    // Far enough into the backoff that its next try is 12.8 s away: the cancel, three local tries and the finalizing
    // pass take a few seconds on a loaded machine (at 3.2 s away one CI run finalized 1.8 s after it).
    const pending = await eventually('the pass retrying as an activity, its next try well ahead', async () => {
      const p = (await run.handle.describe()).raw.pendingActivities?.find((a) => a.activityType?.name === 'reconcileApplication');
      return p && (p.attempt ?? 0) >= 8 && p.nextAttemptScheduleTime ? p : undefined;
    }, { timeoutMs: 90_000, intervalMs: 50 });
    const nextTry = Number(pending.nextAttemptScheduleTime!.seconds) * 1000 + (pending.nextAttemptScheduleTime!.nanos ?? 0) / 1e6;
    await run.handle.signal(changedSignal, { reason: 'deleted' });
    assert.equal(await run.handle.result(), 'deleted');
    const finalized = asked.find((a) => a.finalize);
    assert.ok(finalized, 'a pass was asked to finalize');
    assert.ok(finalized.at < nextTry, `finalized ${nextTry - finalized.at} ms before the retry's next try, not after it`);
    const events = (await run.handle.fetchHistory()).events ?? [];
    assert.ok(events.some((e) => e.eventType === EventType.EVENT_TYPE_ACTIVITY_TASK_CANCEL_REQUESTED), 'the retrying activity was cancelled');
    await replayAll(run);
  });

  it('an Application that is gone ends the workflow', async () => {
    const run = await startApp({ reconcile: () => ({ outcome: 'gone' }) });
    assert.equal(await run.handle.result(), 'gone');
    assert.equal(run.r.count('finalizeApplication'), 0);
    await replayAll(run);
  });

  it('InvalidSpec and ApplyRejected are reported, not retried: the workflow waits for the next change', async () => {
    const run = await startApp({
      reconcile: (n) => (n === 0 ? failure(FailureType.InvalidSpec, 'spec.image: must not be empty') : n === 1 ? failure(FailureType.ApplyRejected, 'Deployment refused') : {}),
    });
    await run.r.until('first pass', (r) => r.count('reconcileApplication') === 1);
    await sleep(500);
    assert.equal(run.r.count('reconcileApplication'), 1, 'a reported failure is not retried');
    assert.match((await stateUntil(run.handle, (st) => st.phase === 'Failed')).message ?? '', /must not be empty/);
    await change(run);
    await run.r.until('second pass', (r) => r.count('reconcileApplication') === 2);
    assert.match((await stateUntil(run.handle, (st) => st.message === 'Deployment refused')).phase ?? '', /Failed/);
    await change(run);
    await stateUntil(run.handle, (st) => st.phase === 'Running');
    assert.equal(run.r.count('reconcileApplication'), 3);
    await run.handle.terminate('done');
    await replayAll(run);
  });

  it('a refused apply is tried again by itself after refusedRetrySeconds, doubling; an invalid spec waits for its change', async () => {
    const run = await startApp({
      reconcile: (n) => (n <= 2 ? failure(FailureType.ApplyRejected, 'denied request: at most 3 replicas') : n === 4 ? failure(FailureType.InvalidSpec, 'spec.image: must not be empty') : {}),
    }, { refusedRetrySeconds: 1 });
    await run.r.until('three refusals, then a pass', (r) => r.count('reconcileApplication') === 4);
    await stateUntil(run.handle, (st) => st.phase === 'Running');
    const at = run.r.calls.filter((c) => c.name === 'reconcileApplication').map((c) => c.at);
    // Timers never fire early: 1 s, then 2 s, then 4 s after each refusal.
    for (const [i, seconds] of [[1, 1], [2, 2], [3, 4]] as const) assert.ok(at[i]! - at[i - 1]! >= seconds * 1000 - 50, `retry ${i} came ${at[i]! - at[i - 1]!} ms after the refusal`);
    await change(run);
    await run.r.until('the invalid spec', (r) => r.count('reconcileApplication') === 5);
    await stateUntil(run.handle, (st) => st.phase === 'Failed');
    await sleep(2500);
    assert.equal(run.r.count('reconcileApplication'), 5, 'an invalid spec is not retried');
    const events = (await run.handle.fetchHistory()).events ?? [];
    const patches = events.filter((e) => e.markerRecordedEventAttributes?.markerName === 'core_patch')
      .flatMap((e) => Object.values(e.markerRecordedEventAttributes?.details ?? {}).flatMap((d) => d.payloads ?? []))
      .map((p) => Buffer.from(p.data ?? []).toString());
    assert.ok(patches.some((p) => p.includes('retry-refused-applies')), `the retry is behind a patch marker (histories from before waited for a change): ${JSON.stringify(patches)}`);
    await run.handle.terminate('done');
    await replayAll(run);
  });

  it('after a refusal a pass woken by child status applies too (a status-only pass would write a status that no longer says the spec was refused)', async () => {
    const run = await startApp({ reconcile: (n) => (n === 0 ? failure(FailureType.ApplyRejected, 'denied request: at most 3 replicas') : {}) }, { refusedRetrySeconds: 600 });
    await run.r.until('the refusal', (r) => r.count('reconcileApplication') === 1);
    await stateUntil(run.handle, (st) => st.phase === 'Failed');
    for (const n of [2, 3]) {
      await run.handle.signal(changedSignal, { reason: 'child-status', object: 'Deployment/app' });
      await run.r.until(`pass ${n}`, (r) => r.count('reconcileApplication') === n);
    }
    const applies = run.r.calls.filter((c) => c.name === 'reconcileApplication').map((c) => c.input['apply']);
    assert.deepEqual(applies, [true, true, false], 'applies while refused; reads status again once an apply went through');
    await run.handle.terminate('done');
    await replayAll(run);
  });

  it('any other reconcile failure is retried: a few times as a local activity, then as an activity the UI shows pending with its last failure', async () => {
    let apiDown = true;
    const run = await startApp({ fail: { reconcileApplication: () => (apiDown ? new Error('API server unavailable') : undefined) } });
    const pending = await eventually('the pass pending as an activity, with its last failure', async () => {
      const p = (await run.handle.describe()).raw.pendingActivities?.find((a) => a.activityType?.name === 'reconcileApplication');
      return p && (p.attempt ?? 0) >= 2 ? p : undefined;
    }, { timeoutMs: 60_000, intervalMs: 50 });
    assert.match(pending.lastFailure?.message ?? '', /API server unavailable/);
    apiDown = false;
    await stateUntil(run.handle, (st) => st.phase === 'Running');
    const events = (await run.handle.fetchHistory()).events ?? [];
    const localFailed = events.some((e) => e.eventType === EventType.EVENT_TYPE_MARKER_RECORDED && e.markerRecordedEventAttributes?.failure);
    assert.ok(localFailed, 'the local attempts are recorded as a failed local activity');
    assert.ok(run.r.count('reconcileApplication') >= 5, 'three local attempts, then at least two as an activity');
    await run.handle.terminate('done');
    await replayAll(run);
  });

  it('passes run as local activities: no activity task per pass', async () => {
    const run = await startApp({});
    await run.r.until('first pass', (r) => r.count('reconcileApplication') === 1);
    await run.handle.signal(changedSignal, { reason: 'child-status', object: 'Deployment/app' });
    await run.r.until('second pass', (r) => r.count('reconcileApplication') === 2);
    await stateUntil(run.handle, (st) => st.passes === 2);
    const events = (await run.handle.fetchHistory()).events ?? [];
    assert.equal(events.filter((e) => e.eventType === EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED).length, 0);
    assert.equal(events.filter((e) => e.eventType === EventType.EVENT_TYPE_MARKER_RECORDED && e.markerRecordedEventAttributes?.markerName === 'core_local_activity').length, 2);
    await run.handle.terminate('done');
    await replayAll(run);
  });

  const workflowTaskEvents = new Set([
    EventType.EVENT_TYPE_WORKFLOW_TASK_SCHEDULED, EventType.EVENT_TYPE_WORKFLOW_TASK_STARTED, EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED,
    EventType.EVENT_TYPE_WORKFLOW_TASK_TIMED_OUT, EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED,
  ]);
  it('a run started as the watcher starts it records no patch markers, and upserts AppPhase only when a pass finds another phase', async () => {
    const history = async (run: AppRun) => {
      const events = (await run.handle.fetchHistory()).events ?? [];
      const upserted = events.flatMap((e) => Object.keys(e.upsertWorkflowSearchAttributesEventAttributes?.searchAttributes?.indexedFields ?? {}));
      return {
        patchMarkers: events.filter((e) => e.markerRecordedEventAttributes?.markerName === 'core_patch').length,
        changeVersionUpserts: upserted.filter((k) => k === 'TemporalChangeVersion').length,
        phaseUpserts: upserted.filter((k) => k === 'AppPhase').length,
        // How many workflow tasks the passes took varies with the worker's timing; every other event is a command's.
        commandEvents: events.filter((e) => !workflowTaskEvents.has(e.eventType ?? EventType.EVENT_TYPE_UNSPECIFIED)).length,
      };
    };
    const phases = ['Pending', 'Running'];
    const reconcile = (n: number) => ({ phase: phases[Math.min(n, 1)]! });
    // As the watcher starts a new Application's workflow: AppPhase Pending, the current patch level.
    const fresh = await startApp({ reconcile }, {}, { phase: 'Pending' });
    // As runs started before this did: no AppPhase, no patch level.
    const bare = await startApp({ reconcile });
    for (const run of [fresh, bare]) {
      await run.r.until('first pass', (r) => r.count('reconcileApplication') === 1);
      await run.handle.signal(changedSignal, { reason: 'child-status', object: 'Deployment/app' });
      await stateUntil(run.handle, (st) => st.passes === 2 && st.phase === 'Running');
    }
    const f = await history(fresh);
    const b = await history(bare);
    assert.deepEqual({ ...f, commandEvents: undefined }, { patchMarkers: 0, changeVersionUpserts: 0, phaseUpserts: 1, commandEvents: undefined }, 'Running only');
    assert.deepEqual({ ...b, commandEvents: undefined }, { patchMarkers: 2, changeVersionUpserts: 2, phaseUpserts: 2, commandEvents: undefined }, 'two patches met, Pending then Running');
    // The two markers and at least one upsert fewer (the SDK may send a patch's upsert and a phase's as one command).
    assert.ok(f.commandEvents <= b.commandEvents - 3, `at least three events fewer for the same two passes, workflow tasks aside (${f.commandEvents} against ${b.commandEvents})`);
    await eventually('Running in visibility', async () => ((await fresh.handle.describe()).typedSearchAttributes.get(appPhaseKey) === 'Running' ? true : undefined), { timeoutMs: 10_000, intervalMs: 100 });
    for (const run of [fresh, bare]) {
      await run.handle.terminate('done');
      await replayAll(run);
    }
  });

  it('continues as new before the history grows, carrying the pass count', async () => {
    const run = await startApp({}, { maxHistoryEvents: 25 });
    await run.r.until('pass 1', (r) => r.count('reconcileApplication') === 1);
    for (let i = 0; i < 6; i++) {
      await change(run);
      await run.r.until(`pass ${i + 2}`, (r) => r.count('reconcileApplication') >= i + 2);
    }
    const firstRun = await tier.client.workflow.getHandle(run.handle.workflowId, run.handle.signaledRunId).describe();
    assert.equal(firstRun.status.name, 'CONTINUED_AS_NEW');
    const latest = tier.client.workflow.getHandle(run.handle.workflowId);
    await stateUntil(latest, (st) => st.passes >= 7);
    const markers = ((await latest.fetchHistory()).events ?? []).filter((e) => e.markerRecordedEventAttributes?.markerName === 'core_patch');
    assert.equal(markers.length, 0, 'a run continued from an older one starts at the current patch level');
    await latest.terminate('done');
    await tier.replay(latest);
    await tier.replay(tier.client.workflow.getHandle(run.handle.workflowId, run.handle.signaledRunId));
  });

  describe('rollouts that outlive runs, and rollouts that end without finishing', { concurrency: true }, () => {
    const appId = (run: AppRun) => applicationWorkflowId(run.namespace, 'app');
    const latest = (run: AppRun) => tier.client.workflow.getHandle(appId(run));
    const passes = (r: Recorder) => r.calls.filter((c) => c.name === 'reconcileApplication');

    it('continues as new while its rollout waits, forwards control from the new run, and learns of the end by the rollout\'s signal', async () => {
      const run = await startApp({ reconcile: () => ({ canary: canaryA }) }, { maxHistoryEvents: 25 });
      await run.r.until('rollout paused', (r) => r.last()?.phase === 'Paused');
      for (let i = 0; i < 8; i++) {
        await change(run);
        await run.r.until(`pass ${i + 2}`, (r) => r.count('reconcileApplication') >= i + 2);
      }
      assert.ok(await tier.runs(appId(run)) >= 2, 'the Application workflow continued as new with the rollout in flight');
      assert.equal((await tier.client.workflow.getHandle(rolloutWorkflowId(run.namespace, 'app')).describe()).status.name, 'RUNNING', 'the rollout lives on');
      await latest(run).signal(controlSignals.promote, { by: 'rita' });
      await run.r.until('promoted', (r) => r.last()?.phase === 'Promoted');
      const before = run.r.count('reconcileApplication');
      await run.r.until('a pass after the end', (r) => r.count('reconcileApplication') > before);
      await sleep(400);
      assert.equal(rolloutCalls(run.r, run.namespace, 'prepareCanary').length, 1, 'the finished rollout is not restarted');
      assert.equal(run.r.closed.length, 0, 'a rollout that finished by itself needs no closing by the Application');
      await latest(run).terminate('done');
      await tier.replayRuns(appId(run));
      await tier.replayRuns(rolloutWorkflowId(run.namespace, 'app'));
    });

    it('a rollout terminated under this run: traffic back to stable first, then status and a Warning say so', async () => {
      const run = await startApp({ reconcile: () => ({ canary: canaryA }) });
      await run.r.until('rollout paused', (r) => r.last()?.phase === 'Paused');
      const before = run.r.count('reconcileApplication');
      await tier.client.workflow.getHandle(rolloutWorkflowId(run.namespace, 'app')).terminate('history limit (scripted)');
      await run.r.until('closed', (r) => r.closed.length === 1);
      const after = passes(run.r).slice(before);
      assert.ok(after.length >= 1 && after[0]!.input['rolloutActive'] === false, 'a pass took the canary away before status was written');
      assert.equal(run.r.closed[0]!.reason, 'RolloutTerminated');
      assert.match(run.r.closed[0]!.message, /the rollout's workflow was terminated: the Application's workflow moved all traffic to stable and removed the canary/);
      await sleep(400);
      assert.equal(rolloutCalls(run.r, run.namespace, 'prepareCanary').length, 1, 'not restarted');
      await run.handle.terminate('done');
      await replayAll(run);
    });

    it('a rollout followed from an earlier run: the sweep\'s report of its end rolls it back; a stale report is ignored', async () => {
      const run = await startApp({ reconcile: () => ({ canary: canaryA }) }, { maxHistoryEvents: 25 });
      await run.r.until('rollout paused', (r) => r.last()?.phase === 'Paused');
      for (let i = 0; i < 8 && (await tier.runs(appId(run))) < 2; i++) {
        await change(run);
        await run.r.until(`pass ${i + 2}`, (r) => r.count('reconcileApplication') >= i + 2);
      }
      assert.ok(await tier.runs(appId(run)) >= 2);
      await latest(run).signal(rolloutEndedSignal, { phase: 'RolledBack', message: 'old news', abnormal: 'Terminated', closedAt: '2020-01-01T00:00:00.000Z' });
      await sleep(500);
      assert.equal(run.r.closed.length, 0, 'a report about a rollout closed before this one started is stale');
      await tier.client.workflow.getHandle(rolloutWorkflowId(run.namespace, 'app')).terminate('by hand (scripted)');
      await latest(run).signal(rolloutEndedSignal, { phase: 'RolledBack', message: 'the rollout\'s workflow was terminated', abnormal: 'Terminated', closedAt: new Date().toISOString() });
      await run.r.until('closed', (r) => r.closed.length === 1);
      assert.equal(run.r.closed[0]!.key, canaryA.key);
      await latest(run).terminate('done');
      await tier.replayRuns(appId(run));
    });

    it('a fresh run takes up a rollout in flight whose workflow Temporal lost, where status says it was', async () => {
      const last = { key: canaryA.key, phase: 'Paused', step: 1, weight: 10, startedAt: '2026-11-30T08:00:00.000Z' };
      const run = await startApp({ reconcile: () => ({ canary: canaryA, lastRollout: last }), routed: () => ({ weight: 10 }) });
      await run.r.until('taken up', (r) => r.events.includes('RolloutRecovered'));
      assert.equal(passes(run.r)[0]!.input['rolloutActive'], undefined, 'the first pass of a fresh run leaves the canary to the rollout status names');
      assert.match(run.r.statuses.find((st) => /taken up again/.test(st.message))!.message, /at step 2\/2: pause until promoted \(Paused, 10%\)/);
      await run.handle.signal(controlSignals.promote, { by: 'sam' });
      await run.r.until('promoted', (r) => r.last()?.phase === 'Promoted');
      assert.deepEqual(run.r.weights(), [0], 'traffic was never moved back to the first step');
      await run.handle.terminate('done');
      await replayAll(run);
    });

    it('a fresh run follows a rollout that still runs (only the Application\'s workflow was lost)', async () => {
      const { namespace, recorder } = tier.scenario({ reconcile: () => ({ canary: canaryA, lastRollout: { key: canaryA.key, phase: 'Paused', step: 1, weight: 10 } }) });
      const rollout = await tier.client.workflow.start(rolloutWorkflowType, {
        taskQueue: tier.taskQueue, workflowId: rolloutWorkflowId(namespace, 'app'), args: [{ namespace, name: 'app', plan: canaryA }],
      });
      await recorder.until('rollout paused', (r) => r.last()?.phase === 'Paused');
      const handle = await tier.client.workflow.signalWithStart<typeof applicationWorkflow, [ChangeSignal]>(applicationWorkflowType, {
        taskQueue: tier.taskQueue, workflowId: applicationWorkflowId(namespace, 'app'), args: [{ namespace, name: 'app', options: { progressRecheckSeconds: 1 } }],
        signal: changedSignal, signalArgs: [{ reason: 'resync' }],
      });
      await stateUntil(handle, (st) => st.rollout === canaryA.key);
      await handle.signal(controlSignals.promote, { by: 'tom' });
      assert.equal((await rollout.result() as { phase: string }).phase, 'Promoted');
      await recorder.until('a pass after the end', (r) => r.calls.filter((c) => c.name === 'reconcileApplication' && c.input['rolloutActive'] === false).length >= 1);
      assert.equal(rolloutCalls(recorder, namespace, 'prepareCanary').length, 1, 'no second rollout');
      assert.equal(recorder.count('closeCanaryStatus'), 0);
      await handle.terminate('done');
      await tier.replayRuns(applicationWorkflowId(namespace, 'app'));
    });

    it('a fresh run, a rollout in flight that no workflow runs and the spec no longer asks for: rolled back as lost', async () => {
      const run = await startApp({ reconcile: () => ({ canary: canaryB, lastRollout: { key: canaryA.key, phase: 'Paused', step: 1, weight: 10 } }) });
      await run.r.until('closed', (r) => r.closed.length === 1);
      assert.equal(run.r.closed[0]!.reason, 'RolloutLost');
      assert.equal(run.r.closed[0]!.key, canaryA.key);
      const p = passes(run.r);
      assert.ok(p.slice(1).some((c) => c.input['rolloutActive'] === false), 'a pass moved traffic back before status said so');
      await run.r.until('b started', (r) => r.statuses.some((st) => st.version === 'b'));
      await run.handle.terminate('done');
      await replayAll(run);
    });
  });
});
