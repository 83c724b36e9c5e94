// The canary rollout workflow's decisions, scenario by scenario, on a real worker with scripted activities.
// Every scenario's history is replayed at the end of it.
import { WorkflowFailedError, WorkflowUpdateFailedError } from '@temporalio/client';
import { historyFromJSON } from '@temporalio/common/lib/proto-utils.js';
import { Worker } from '@temporalio/worker';
import { readFile } from 'node:fs/promises';
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { FailureType } from '../../api/constants.ts';
import { controlSignals, recheckSignal, rolloutQuery, type ControlAction, type RolloutInput } from '../../workflows/contract.ts';
import type { AnalysisMetric, PlanStep, RolloutPlan } from '../../reconcile/plan.ts';
import { eventually } from '../../lib/poll.ts';
import { workflowBundle } from '../../testkit/env.ts';
import { WorkflowTier, control, failure, gates, plan, sleep, summaryOf, type Recorder, type RolloutRun, type Script } from './stubs.ts';

const tier = new WorkflowTier();
type Run = RolloutRun;
const start = (p: RolloutPlan, script: Script = {}, extra: Partial<RolloutInput> = {}) => tier.startRollout(p, script, extra);
const finish = (run: Run) => tier.finish(run);

const paused = (r: Recorder) => r.last()?.phase === 'Paused';

describe('canary rollout workflow', { concurrency: true }, () => {
  before(() => tier.start());
  after(() => tier.stop());

  it('walks the steps, routing only after a passing gate, and promotes in order', async () => {
    const run = await start(plan());
    const result = await finish(run);
    assert.equal(result.phase, 'Promoted');
    assert.deepEqual(run.r.weights(), [20, 60, 0]);
    assert.deepEqual(run.r.phases(), ['Progressing', 'Paused', 'Progressing', 'Promoting', 'Promoted']);
    const order = run.r.names().filter((n) => !['observeCanary', 'writeCanaryStatus'].includes(n));
    assert.deepEqual(order, ['prepareCanary', 'setCanaryRoute', 'setCanaryRoute', 'promoteStable', 'stableRolledOut', 'setCanaryRoute', 'removeCanary', 'finishCanarySpec']);
  });

  it('its history reads as the story: every activity and timer carries a summary', async () => {
    // The pause outlasts its own status write even on a loaded machine, so its timer is in the history.
    const run = await start(plan({ steps: [{ kind: 'weight', weight: 20 }, { kind: 'pause', ms: 8000 }], gates: { ...gates, intervalMs: 60_000 } }));
    await finish(run);
    const summaries = ((await run.handle.fetchHistory()).events ?? []).map(summaryOf).filter((x) => x !== undefined);
    const inOrder = [
      /^status: Progressing at step 1\/2, 0%: creating canary v2 \(app:v2\)$/,
      /^create canary v2 \(app:v2\) at 0%$/,
      /^gate check at 0%$/,
      /^set canary weight 20%$/,
      /^paused at step 2\/2: pause ends in (\d+ms|[1-8]s)$/,
      /^promote: the stable Deployment takes app:v2$/,
      /^check that stable runs app:v2$/,
      /^set canary weight 0%$/,
      /^remove the canary$/,
      /^switch the spec's canary off$/,
      /^status: Promoted/,
    ];
    let from = 0;
    for (const re of inOrder) {
      const at = summaries.findIndex((x, i) => i >= from && re.test(x));
      assert.ok(at >= 0, `a summary matching ${re} after #${from} in ${JSON.stringify(summaries, null, 1)}`);
      from = at + 1;
    }
  });

  it('a timed pause does not count against the progress deadline', async () => {
    // The pause is longer than the whole deadline; what is not pause stays well inside it, even on a loaded machine.
    const run = await start(plan({ steps: [{ kind: 'weight', weight: 10 }, { kind: 'pause', ms: 35_000 }], progressDeadlineMs: 30_000 }));
    const result = await finish(run);
    assert.equal(result.phase, 'Promoted', result.message);
  });

  it('the progress deadline rolls back a canary that never gets ready', async () => {
    const run = await start(plan({ progressDeadlineMs: 800, gates: { ...gates, failureThreshold: 1000 } }), {
      health: () => ({ readyReplicas: 0 }),
    });
    const result = await finish(run);
    assert.equal(result.phase, 'RolledBack');
    assert.match(result.message, /progress deadline of 1 s exceeded/);
    assert.deepEqual(run.r.weights(), [], 'no traffic ever moved');
    assert.equal(run.r.count('removeCanary'), 1, 'compensated');
  });

  it('failureThreshold failed gates in a row roll back, saying why', async () => {
    const run = await start(plan({ steps: [{ kind: 'weight', weight: 20 }, { kind: 'pause', ms: null }] }), { health: (n) => (n < 2 ? {} : { restarts: 9 }) });
    const result = await finish(run);
    assert.equal(result.phase, 'RolledBack');
    assert.match(result.message, /health gate failed 3 times in a row: canary containers restarted 9 times/);
    assert.deepEqual(run.r.phases().slice(-2), ['Aborting', 'RolledBack']);
    assert.equal(run.r.count('removeCanary'), 1);
  });

  it('a gate that recovers resets the count and the rollout goes on', async () => {
    // Two failures, a pass, two failures: never three in a row.
    const run = await start(plan(), { health: (n) => ([1, 2, 4, 5].includes(n) ? { readyReplicas: 1, restarts: 5 } : {}) });
    const result = await finish(run);
    assert.equal(result.phase, 'Promoted', result.message);
  });

  it('holds the weight at 0 until a canary replica is ready', async () => {
    const run = await start(plan({ gates: { ...gates, failureThreshold: 20 } }), {
      health: (n) => (n < 6 ? { readyReplicas: 0 } : {}),
    });
    const result = await finish(run);
    assert.equal(result.phase, 'Promoted');
    const firstRoute = run.r.calls.findIndex((c) => c.name === 'setCanaryRoute');
    const checksBefore = run.r.calls.slice(0, firstRoute).filter((c) => c.name === 'observeCanary').length;
    assert.ok(checksBefore >= 7, `routed after ${checksBefore} checks`);
  });

  it('drops traffic to 0 at once when the canary loses its ready replicas, and restores it when they are back', async () => {
    const run = await start(plan({ steps: [{ kind: 'weight', weight: 30 }, { kind: 'pause', ms: null }], gates: { ...gates, failureThreshold: 50 } }), {
      health: (n) => (n >= 3 && n < 6 ? { readyReplicas: 0 } : {}),
    });
    await run.r.until('dropped to 0 and back', (r) => r.weights().join() === '30,0,30');
    await control(run, 'promote');
    assert.equal((await finish(run)).phase, 'Promoted');
  });

  it('a pause requested during a timed pause holds the rollout after the timer until resumed', async () => {
    const run = await start(plan({ steps: [{ kind: 'weight', weight: 10 }, { kind: 'pause', ms: 400 }, { kind: 'weight', weight: 50 }] }));
    await run.r.until('in the timed pause', paused);
    await control(run, 'pause');
    // The 400 ms timer ends; the rollout then holds instead of taking the next step.
    const held = await eventually('held after the timer', async () => {
      const st = await run.handle.query(rolloutQuery);
      return st?.phase === 'Paused' && !st.pauseEndsAt ? st : undefined;
    }, { timeoutMs: 60_000, intervalMs: 50 });
    assert.equal(held.pausedByUser, true);
    await sleep(500);
    assert.deepEqual(run.r.weights(), [10], 'no step after the timed pause ran while paused');
    await control(run, 'resume');
    assert.equal((await finish(run)).phase, 'Promoted');
    assert.deepEqual(run.r.weights(), [10, 50, 0]);
  });

  it('promote while paused skips the remaining steps', async () => {
    const run = await start(plan({ steps: [{ kind: 'weight', weight: 10 }, { kind: 'pause', ms: null }, { kind: 'weight', weight: 90 }] }));
    await run.r.until('paused', paused);
    const state = await control(run, 'promote', 'ann');
    assert.equal(state.phase, 'Paused', 'the update answers with the state it was accepted in');
    const result = await finish(run);
    assert.equal(result.phase, 'Promoted');
    assert.match(result.message, /by ann/);
    assert.deepEqual(run.r.weights(), [10, 0], 'the 90% step never ran');
  });

  it('a promote waits for the image the API server stored when admission rewrote it (a mirror, a pinned digest)', async () => {
    const stored = `mirror.local/app:v2@sha256:${'0'.repeat(64)}`;
    const run = await start(plan({ steps: [{ kind: 'weight', weight: 10 }] }), { stableStoredAs: stored });
    const result = await finish(run);
    assert.equal(result.phase, 'Promoted', result.message);
    const asked = run.r.calls.filter((c) => c.name === 'stableRolledOut').map((c) => c.input['stored']);
    assert.deepEqual(asked, [stored]);
  });

  it('abort during promote restores the stable image, then removes the canary', async () => {
    const run = await start(plan({ steps: [{ kind: 'weight', weight: 10 }] }), { stableDoneAt: 1_000_000 });
    await run.r.until('promoting', (r) => r.count('stableRolledOut') >= 2);
    await control(run, 'abort', 'bob', 'stable is slow');
    const result = await finish(run);
    assert.equal(result.phase, 'Aborted');
    assert.match(result.message, /aborted by bob: stable is slow/);
    const undo = run.r.names().filter((n) => n === 'restoreStableImage' || n === 'removeCanary');
    assert.deepEqual(undo, ['restoreStableImage', 'removeCanary'], 'undos run in reverse order of their steps');
  });

  // Level 1 (contract.ts rolloutPatchLevel) changed what a rollout writes; a rollout started before keeps writing
  // what its history recorded, so the old way is pinned here too (and a history recorded before replays:
  // 'a rollout recorded before level 1 replays' below).
  for (const level of [1, undefined]) {
    it(`a promotion waiting for stable at level ${level ?? 0} writes Promoting ${level ? 'once: the stable\'s progress between gate checks rewrites nothing' : 'again after gate checks, as before'}`, async () => {
      // Gates every 100 ms, the stable Deployment looked at every 100 ms and rolled out at the 8th look. Each look
      // put its progress in the message in hand, and the next clean gate check wrote the Promoting status again.
      const run = await start(plan({ steps: [{ kind: 'weight', weight: 10 }] }), { stableDoneAt: 8 }, { patchLevel: level });
      const result = await finish(run);
      assert.equal(result.phase, 'Promoted');
      assert.ok(run.r.count('stableRolledOut') >= 9);
      const promoting = run.r.statuses.filter((s) => s.phase === 'Promoting').map((s) => s.message);
      if (level) assert.equal(promoting.length, 1, promoting.join('\n'));
      else assert.ok(promoting.length > 1, promoting.join('\n'));
    });

    it(`a step after a pause whose gate already passes ${level ? 'moves traffic without' : 'writes'} a "waiting for ready canary replicas" status first at level ${level ?? 0}`, async () => {
      const run = await start(plan({ steps: [{ kind: 'weight', weight: 10 }, { kind: 'pause', ms: 500 }, { kind: 'weight', weight: 30 }] }), {}, { patchLevel: level });
      const result = await finish(run);
      assert.equal(result.phase, 'Promoted');
      assert.deepEqual(run.r.weights(), [10, 30, 0]);
      const waiting = run.r.statuses.map((s) => s.message).filter((m) => /waiting for 1 ready canary replica/.test(m));
      assert.equal(waiting.some((m) => m.startsWith('step 3/3')), !level, waiting.join('\n'));
    });
  }

  // Recorded by a worker of the release before level 1 (commit 5d96482, with test/workflows/stubs.ts's scripted
  // activities: weight 10, a 500 ms pause, weight 30 whose gate already passed, a promote that looked at the stable
  // Deployment 7 times), for a rollout whose input asks for level 1: what a rolling upgrade makes when a new
  // Application workflow starts a rollout and an old worker runs it live. Its status writes include the "waiting" of
  // step 3 and 7 Promoting writes. Taking the level from the input alone fails this replay (nondeterminism), and so
  // does taking the new way unconditionally: a rollout in flight would be stuck at its next workflow task.
  it('a rollout asked for level 1 but run by a worker before it replays on the code of today, the old way', async () => {
    const history = historyFromJSON(JSON.parse(await readFile(new URL('../fixtures/histories/rollout-before-level-1.json', import.meta.url), 'utf8')));
    const input = JSON.parse(Buffer.from(history.events?.[0]?.workflowExecutionStartedEventAttributes?.input?.payloads?.[0]?.data ?? []).toString()) as { patchLevel?: number };
    assert.equal(input.patchLevel, 1, 'the input asks for level 1');
    const scheduled = (history.events ?? []).filter((e) => e.activityTaskScheduledEventAttributes).map((e) => summaryOf(e) ?? '');
    assert.ok(scheduled.some((x) => /^status: Progressing at step 3\/3.*waiting for 1 ready canary replica/.test(x)), 'the history has the old way in it');
    await Worker.runReplayHistory({ workflowBundle: await workflowBundle() }, history, 'application/recorded/app/canary');
  });

  it('a rollout records a marker per level, first thing; one at level 0 records none', async () => {
    for (const level of [2, 1, undefined]) {
      const run = await start(plan({ steps: [{ kind: 'weight', weight: 10 }] }), {}, { patchLevel: level });
      await finish(run);
      const events = (await run.handle.fetchHistory()).events ?? [];
      const markers = events.filter((e) => e.markerRecordedEventAttributes?.markerName === 'core_patch');
      assert.equal(markers.length, level ?? 0, `level ${level ?? 0}`);
      if (level) assert.ok(events.findIndex((e) => e.markerRecordedEventAttributes?.markerName === 'core_patch') < events.findIndex((e) => e.activityTaskScheduledEventAttributes), 'before any activity');
    }
  });

  it('a promotion waiting for stable looks again as soon as the stable Deployment changes, not at the next poll', async () => {
    // Gates every hour (a gate check is made in the same wake once half an interval has passed: a loaded CI machine
    // took 90 s over this test once): between polls of the stable Deployment the rollout waits 2 s, unless told it
    // changed. The change is told while the first look is still in flight (its answer held until then), so a slow
    // machine cannot let the 2 s poll run out before the signal lands.
    let told!: () => void;
    const signalled = new Promise<void>((resolve) => { told = resolve; });
    const run = await start(plan({ steps: [{ kind: 'weight', weight: 10 }], gates: { ...gates, intervalMs: 3_600_000 } }), {
      stableDoneAt: 1, hold: { stableRolledOut: (n) => (n === 0 ? signalled : undefined) },
    });
    await run.r.until('first look at stable', (r) => r.count('stableRolledOut') >= 1);
    const gateChecks = run.r.count('observeCanary');
    await run.handle.signal(recheckSignal, { object: 'Deployment/app' });
    told();
    const result = await finish(run);
    assert.equal(result.phase, 'Promoted');
    assert.equal(run.r.count('stableRolledOut'), 2);
    assert.equal(run.r.count('observeCanary'), gateChecks, 'the stable Deployment\'s change needs no gate check');
    const events = (await run.handle.fetchHistory()).events ?? [];
    // The change came during the first look: the wait between polls never started, and no poll timer fired.
    const fired = new Set(events.filter((e) => e.timerFiredEventAttributes).map((e) => String(e.timerFiredEventAttributes?.timerId)));
    const polls = events.filter((e) => e.timerStartedEventAttributes && /next look/.test(summaryOf(e) ?? ''));
    assert.deepEqual(polls.filter((e) => fired.has(String(e.timerStartedEventAttributes?.timerId))).map((e) => summaryOf(e)), [], 'a poll timer fired');
  });

  it('cancellation compensates under a non-cancellable scope, then the workflow ends cancelled', async () => {
    const run = await start(plan({ steps: [{ kind: 'weight', weight: 40 }, { kind: 'pause', ms: null }] }));
    await run.r.until('paused', paused);
    await run.handle.cancel();
    await assert.rejects(run.result(), (err: unknown) => err instanceof WorkflowFailedError);
    await tier.replay(run.handle);
    assert.equal(run.r.count('removeCanary'), 1);
    assert.equal(run.r.last()?.phase, 'RolledBack');
    assert.match(run.r.last()?.message ?? '', /the rollout was cancelled/);
  });

  it('an abort moves all traffic to stable, lets the canary\'s pods drain on a durable timer, then removes them; a canary no request reached goes at once', async () => {
    const run = await start(plan({ steps: [{ kind: 'weight', weight: 40 }, { kind: 'pause', ms: null }], canaryDrainMs: 2000 }));
    await run.r.until('paused', paused);
    await control(run, 'abort', 'dan');
    assert.equal((await finish(run)).phase, 'Aborted');
    assert.deepEqual(run.r.calls.filter((c) => c.name === 'removeCanary').map((c) => c.input['routeOnly'] === true), [true, false], 'traffic first, the pods after');
    const drainingStatus = run.r.statuses.find((st) => /the canary's pods go in 2s/.test(st.message ?? ''));
    assert.equal(drainingStatus?.weight, 0, 'status says all traffic is on stable while the pods drain');
    assert.match(drainingStatus?.message ?? '', /^aborting: /);
    // In the history: the traffic moved, the drain's timer fired, then the canary went.
    const events = (await run.handle.fetchHistory()).events ?? [];
    const at = (pattern: RegExp) => events.findIndex((e) => pattern.test(summaryOf(e) ?? ''));
    const timer = events.find((e) => e.timerStartedEventAttributes && /let proxies follow the switch back for 2s$/.test(summaryOf(e) ?? ''));
    assert.ok(timer, 'the drain is a durable timer');
    const fired = events.findIndex((e) => String(e.timerFiredEventAttributes?.timerId ?? '') === String(timer.timerStartedEventAttributes?.timerId));
    assert.ok(at(/^all traffic to stable; the canary keeps serving/) < fired && fired < at(/^remove the canary:/), 'route, timer fired, remove');
    await tier.replay(run.handle);

    const early = await start(plan({ steps: [{ kind: 'weight', weight: 0 }, { kind: 'pause', ms: null }], canaryDrainMs: 1500 }));
    await early.r.until('paused', paused);
    await control(early, 'abort', 'dan');
    assert.equal((await finish(early)).phase, 'Aborted');
    assert.deepEqual(early.r.calls.filter((c) => c.name === 'removeCanary').map((c) => c.input['routeOnly'] === true), [false], 'nothing to drain');
  });

  it('a promote drains the new version\'s pods after the switch back (canaryDrainMs, for any router)', async () => {
    const run = await start(plan({ steps: [{ kind: 'weight', weight: 30 }], canaryDrainMs: 2000 }));
    assert.equal((await finish(run)).phase, 'Promoted');
    const summaries = ((await run.handle.fetchHistory()).events ?? []).map(summaryOf).filter((x) => x !== undefined);
    const drain = summaries.findIndex((x) => /let proxies follow the switch back for 2s$/.test(x));
    assert.ok(drain > summaries.findIndex((x) => /set canary weight 0%/.test(x)) && drain < summaries.findIndex((x) => /^remove the canary$/.test(x)), summaries.join(' | '));
  });

  for (const path of ['signal', 'update'] as const) {
    it(`control by ${path}: a pause and a resume are the user's own hold; only a promote passes a pause step`, async () => {
      const run = await start(plan({ steps: [{ kind: 'weight', weight: 25 }, { kind: 'pause', ms: null }, { kind: 'weight', weight: 50 }, { kind: 'pause', ms: null }] }));
      await run.r.until('paused at 25%', paused);
      const send = async (action: ControlAction) => {
        if (path === 'signal') await run.handle.signal(controlSignals[action], { by: 'carol' });
        else await control(run, action, 'carol');
      };
      const pausedByUser = async (want: boolean) => {
        for (let i = 0; i < 200 && (await run.handle.query(rolloutQuery))?.pausedByUser !== want; i++) await sleep(20);
      };
      await send('pause');
      await pausedByUser(true);
      assert.equal((await run.handle.query(rolloutQuery))?.pausedBy, 'carol');
      await send('resume');
      await pausedByUser(false);
      // The resume lifted carol's hold, not the approval the pause step waits for.
      await sleep(600);
      assert.deepEqual(run.r.weights(), [25], 'resume did not pass the pause step');
      assert.equal(run.r.count('promoteStable'), 0);
      await send('promote');
      const result = await finish(run);
      assert.equal(result.phase, 'Promoted');
      assert.equal(result.message, 'stable runs app:v2; all traffic on stable, canary removed by carol');
      assert.deepEqual(run.r.weights(), [25, 0]);
    });
  }

  it('update validators refuse with messages, and a refused update changes nothing', async () => {
    const refused = (pattern: RegExp) => (e: unknown) => e instanceof WorkflowUpdateFailedError && pattern.test(e.cause?.message ?? '');
    // Waiting for a ready replica that never comes: Progressing, not paused.
    const run = await start(plan({ gates: { ...gates, failureThreshold: 1000 } }), { health: () => ({ readyReplicas: 0 }) });
    await run.r.until('waiting for a ready replica', (r) => /waiting for 1 ready canary replica/.test(r.last()?.message ?? ''));
    await assert.rejects(control(run, 'resume'), refused(/the rollout is not paused/));
    assert.equal((await run.handle.query(rolloutQuery))?.pausedByUser, false);
    await control(run, 'pause');
    await assert.rejects(control(run, 'pause'), refused(/already paused/));
    await control(run, 'abort', 'dan');
    await assert.rejects(control(run, 'abort'), refused(/already being aborted/));
    await assert.rejects(control(run, 'promote'), refused(/being aborted/));
    const result = await finish(run);
    assert.equal(result.phase, 'Aborted');
    assert.equal(run.r.count('promoteStable'), 0);
  });

  it('CanaryNotReady from the routing activity rolls back with its type in the reason', async () => {
    const run = await start(plan(), { fail: { setCanaryRoute: (n) => (n === 0 ? failure(FailureType.CanaryNotReady, 'refusing to route 20% to a canary with 0 ready replicas') : undefined) } });
    const result = await finish(run);
    assert.equal(result.phase, 'RolledBack');
    assert.match(result.message, /CanaryNotReady: refusing to route 20%/);
    assert.equal(run.r.count('removeCanary'), 1);
  });

  it('ApplyRejected from creating the canary (admission denied it) rolls back at once: one try, no retries until the deadline', async () => {
    const run = await start(plan(), { fail: { prepareCanary: () => failure(FailureType.ApplyRejected, 'the API server refused the canary: denied request: at most 3 replicas') } });
    const result = await finish(run);
    assert.equal(result.phase, 'RolledBack');
    assert.match(result.message, /ApplyRejected: the API server refused the canary: denied request/);
    assert.equal(run.r.last()?.reason, 'ApplyRejected');
    assert.equal(run.r.count('prepareCanary'), 1);
    assert.equal(run.r.count('setCanaryRoute'), 0, 'no traffic moved');
    assert.equal(run.r.count('removeCanary'), 0, 'the activity took back what it prepared: no canary to remove');
  });

  it('Superseded at promote (the spec changed meanwhile) rolls back instead of promoting a stale canary', async () => {
    const run = await start(plan({ steps: [{ kind: 'weight', weight: 10 }] }), { fail: { promoteStable: () => failure(FailureType.Superseded) } });
    const result = await finish(run);
    assert.equal(result.phase, 'RolledBack');
    assert.match(result.message, /Superseded/);
    assert.equal(run.r.count('restoreStableImage'), 0, 'the stable image was never changed, so not restored');
  });

  it('failed checks during the start-up grace are recorded but not counted; once ready, failures count', async () => {
    const p = plan({ steps: [{ kind: 'weight', weight: 20 }, { kind: 'pause', ms: null }], gates: { ...gates, initialDelayMs: 60_000 } });
    // Unready for 8 checks (more than the threshold), ready for 3, then failing for good.
    const run = await start(p, { health: (n) => (n < 8 ? { readyReplicas: 0 } : n < 11 ? {} : { readyReplicas: 0 }) });
    const result = await finish(run);
    assert.equal(result.phase, 'RolledBack');
    assert.match(result.message, /health gate failed 3 times in a row/);
    const state = await run.handle.query(rolloutQuery);
    assert.ok(state?.readySince, 'the first ready check is recorded');
    assert.equal(run.r.weights().filter((w) => w > 0).length, 1, 'traffic moved up once the canary was ready');
  });

  it('a canary that never gets ready is rolled back once the grace has passed', async () => {
    const run = await start(plan({ gates: { ...gates, initialDelayMs: 600 } }), { health: () => ({ readyReplicas: 0 }) });
    const started = Date.now();
    const result = await finish(run);
    assert.equal(result.phase, 'RolledBack');
    assert.equal((await run.handle.query(rolloutQuery))?.gates.some((g) => g.grace), true, 'failures inside the grace were marked');
    assert.ok(Date.now() - started >= 600, 'not before the grace ended');
  });

  it('a hand edit of the routes is put back at the next check, and status says the weight the mesh has', async () => {
    const run = await start(plan({ steps: [{ kind: 'weight', weight: 30 }, { kind: 'pause', ms: null }] }), { routed: (n) => (n === 6 ? { weight: 100 } : undefined) });
    await run.r.until('routed again after the edit', (r) => r.weights().join() === '30,30');
    await control(run, 'promote');
    assert.equal((await finish(run)).phase, 'Promoted');
  });

  it('a deleted canary Deployment: traffic to stable at once, the canary put back, traffic restored when it is ready', async () => {
    const run = await start(plan({ steps: [{ kind: 'weight', weight: 40 }, { kind: 'pause', ms: null }], gates: { ...gates, failureThreshold: 20 } }), {
      health: (n) => (n >= 4 && n < 7 ? { exists: false, readyReplicas: 0, desiredReplicas: 0 } : {}),
    });
    await run.r.until('restored', (r) => r.weights().join() === '40,0,40');
    assert.ok(run.r.count('prepareCanary') >= 2, 'the canary was put back');
    assert.ok(run.r.statuses.some((st) => /the canary Deployment is gone/.test(st.message)), 'status said why');
    await control(run, 'promote');
    assert.equal((await finish(run)).phase, 'Promoted');
  });

  // Level 2 (contract.ts rolloutPatchLevel): a canary resized or re-imaged by hand is put back like a deleted one; a
  // rollout started before judges it as it runs, as its history recorded.
  for (const level of [2, 1]) {
    it(`a canary re-imaged by hand at level ${level}: ${level >= 2 ? 'traffic to stable at once, the canary put back, traffic restored' : 'judged as it runs'}`, async () => {
      const drift = { what: 'image', message: "the canary Deployment's container app runs evil:1, not the rollout's app:v2" } as const;
      const run = await start(plan({ steps: [{ kind: 'weight', weight: 40 }, { kind: 'pause', ms: null }], gates: { ...gates, failureThreshold: 20 } }), {
        drift: (n) => (n >= 4 && n < 6 ? drift : undefined),
      }, { patchLevel: level });
      await run.r.until('past the edit', (r) => r.count('observeCanary') >= 8);
      if (level >= 2) {
        await run.r.until('restored', (r) => r.weights().join() === '40,0,40');
        assert.ok(run.r.count('prepareCanary') >= 2, 'the canary was put back');
        assert.ok(run.r.statuses.some((st) => st.message.startsWith(`${drift.message}: all traffic moved to stable`)), 'status said why');
      } else {
        assert.equal(run.r.weights().join(), '40');
        assert.equal(run.r.count('prepareCanary'), 1);
      }
      await control(run, 'promote');
      assert.equal((await finish(run)).phase, 'Promoted');
    });
  }

  // Level 3: a weight by pod counts is reached once the canary's pods are ready; before, once they were asked for.
  for (const level of [3, 2]) {
    it(`a canary by replicas at level ${level}: ${level >= 3 ? 'the pause after a weight starts once its pods are ready' : 'the pause starts once its pods are asked for'}`, async () => {
      // Found by hand: a 10 s pause at 80% ran whole with 1 of 8 canary pods ready (about a third of the requests).
      const readyFrom = 6;
      const run = await start(plan({ router: 'replicas', steps: [{ kind: 'weight', weight: 80 }, { kind: 'pause', ms: 200 }], gates: { ...gates, intervalMs: 100 } }), {
        health: (n) => (n < readyFrom ? { readyReplicas: 1, desiredReplicas: 8 } : { readyReplicas: 8, desiredReplicas: 8 }),
      }, { patchLevel: level });
      assert.equal((await finish(run)).phase, 'Promoted');
      const messages = run.r.statuses.map((st) => st.message);
      const waiting = messages.findIndex((m) => m === 'step 1/2: set canary weight to 80%: waiting for the canary\'s pods to be ready (1/8)');
      const paused = messages.findIndex((m) => m.startsWith('step 2/2'));
      assert.ok(paused >= 0, JSON.stringify(messages, null, 1));
      // How many gate checks had been made when the pause began (its status written).
      let looks = 0;
      let writes = 0;
      for (const c of run.r.calls) {
        if (c.name === 'observeCanary') looks++;
        if (c.name === 'writeCanaryStatus' && writes++ === paused) break;
      }
      if (level >= 3) {
        assert.ok(waiting >= 0 && waiting < paused, `status said it waits for the pods, before the pause: ${JSON.stringify(messages, null, 1)}`);
        assert.ok(looks > readyFrom, `the pause began after a gate check saw every pod ready (${looks} checks)`);
      } else {
        assert.equal(waiting, -1, `no wait for the pods below level 3: ${JSON.stringify(messages, null, 1)}`);
        assert.ok(looks <= readyFrom, `the pause began before the pods were ready (${looks} checks)`);
      }
    });
  }

  for (const level of [4, 3]) {
    it(`a person's pause during a timed pause is in status ${level >= 4 ? 'at once, and a resume says the step again' : 'only once the pause is over (level 3)'}`, async () => {
      // Found by hand: status said nothing of the hold for the rest of the pause, so a rollout Temporal lost then was
      // taken up without it.
      const run = await start(plan({ steps: [{ kind: 'weight', weight: 10 }, { kind: 'pause', ms: 120_000 }, { kind: 'weight', weight: 50 }], gates: { ...gates, intervalMs: 200 } }), {}, { patchLevel: level });
      await run.r.until('the timed pause', paused);
      await control(run, 'pause', 'pia');
      const held = /^paused by request of pia during step 2\/3: pause for 2m: it holds once this step is over$/;
      if (level >= 4) {
        await run.r.until('the hold in status', (r) => r.statuses.some((st) => st.pausedBy === 'pia' && held.test(st.message)));
        assert.ok(run.r.events.includes('CanaryPaused'));
        await control(run, 'resume', 'pia');
        await run.r.until('the resume in status', (r) => r.last()?.message === 'step 2/3: pause for 2m' && r.last()?.pausedBy === undefined && r.last()?.phase === 'Paused');
      } else {
        // Gate checks go on meanwhile (every 200 ms): none of them says it.
        await sleep(1500);
        assert.ok(!run.r.statuses.some((st) => st.pausedBy === 'pia'), JSON.stringify(run.r.statuses.map((st) => st.message)));
      }
      await run.handle.terminate('scenario over');
      await tier.replayRuns(run.handle.workflowId);
    });
  }

  it('a pause in the middle of a step, held on at the step\'s end: its resume says nothing of the step that is over (level 4)', async () => {
    const run = await start(plan({ steps: [{ kind: 'weight', weight: 10 }, { kind: 'pause', ms: 1500 }, { kind: 'weight', weight: 50 }, { kind: 'pause', ms: null }], gates: { ...gates, intervalMs: 200 } }));
    await run.r.until('the timed pause', paused);
    await control(run, 'pause', 'pia');
    await run.r.until('held at the next step', (r) => /^paused by request of pia at step 3\/4/.test(r.last()?.message ?? ''));
    const heldAt = run.r.statuses.length;
    await control(run, 'resume', 'pia');
    await run.r.until('the approval', (r) => /^step 4\/4/.test(r.last()?.message ?? '') && r.last()?.phase === 'Paused');
    const after = run.r.statuses.slice(heldAt).map((st) => st.message);
    assert.ok(!after.some((m) => /^step 2\/4|during step 2\/4/.test(m)), `nothing said of step 2 after it was over: ${JSON.stringify(after, null, 1)}`);
    assert.deepEqual(run.r.weights(), [10, 50]);
    await run.handle.terminate('scenario over');
    await tier.replayRuns(run.handle.workflowId);
  });

  it('a recheck signal runs a gate check at once instead of at the next interval', async () => {
    const run = await start(plan({ steps: [{ kind: 'weight', weight: 10 }, { kind: 'pause', ms: null }], gates: { ...gates, intervalMs: 60_000 } }));
    await run.r.until('paused', paused);
    const checks = run.r.count('observeCanary');
    await run.handle.signal(recheckSignal, { object: 'VirtualService/app' });
    await run.r.until('checked again', (r) => r.count('observeCanary') === checks + 1);
    await control(run, 'abort');
    assert.equal((await finish(run)).phase, 'Aborted');
  });

  it('an accepted abort answers with the state after it: Aborting, and who asked', async () => {
    const run = await start(plan({ steps: [{ kind: 'weight', weight: 10 }, { kind: 'pause', ms: null }] }));
    await run.r.until('paused', paused);
    const state = await control(run, 'abort', 'gus', 'bad latency');
    assert.equal(state.phase, 'Aborting');
    assert.equal(state.message, 'abort requested by gus: bad latency');
    const result = await finish(run);
    assert.equal(result.phase, 'Aborted');
    assert.equal(run.r.last()?.reason, 'CanaryAborted');
  });

  it('a step that keeps failing says so in status and goes on once it passes', async () => {
    const said = (st: { message: string }) => /"promote: the stable Deployment takes app:v2" keeps failing \(attempt \d+\): .*503/.test(st.message);
    // It fails past the activity's own retries until status has said so (its write is best effort: on a loaded
    // machine the first may come late), then passes.
    let failing = true;
    let statuses: { message: string }[] = [];
    const run = await start(plan({ steps: [{ kind: 'weight', weight: 10 }] }), {
      fail: { promoteStable: (n) => (n < 7 || (failing = !statuses.some(said)) ? new Error('503 ServiceUnavailable') : undefined) },
    });
    statuses = run.r.statuses;
    const result = await finish(run);
    assert.equal(result.phase, 'Promoted');
    assert.equal(failing, false, 'status said it kept failing before the step passed');
    assert.ok(run.r.count('promoteStable') >= 7, 'it went on after more failures than the activity\'s own retries');
    const last = run.r.statuses.at(-1);
    assert.doesNotMatch(last?.message ?? '', /keeps failing/, 'once it passed, status says what is true now');
  });

  it('an abort is honoured while a forward step keeps failing', async () => {
    const run = await start(plan({ steps: [{ kind: 'weight', weight: 10 }] }), { fail: { promoteStable: () => new Error('403 Forbidden') } });
    await run.r.until('failing visibly', (r) => r.statuses.some((st) => /keeps failing/.test(st.message)));
    await control(run, 'abort', 'hal');
    const result = await finish(run);
    assert.equal(result.phase, 'Aborted');
    assert.equal(run.r.count('removeCanary'), 1);
  });

  it('an undo that keeps failing is retried until it succeeds, and status says so meanwhile', async () => {
    const run = await start(plan({ steps: [{ kind: 'weight', weight: 10 }, { kind: 'pause', ms: null }] }), {
      fail: { removeCanary: (n) => (n < 6 ? new Error('403 Forbidden: namespace is being terminated? (scripted)') : undefined) },
    });
    await run.r.until('paused', paused);
    await control(run, 'abort');
    const result = await finish(run);
    assert.equal(result.phase, 'Aborted');
    assert.equal(run.r.count('removeCanary'), 7);
    assert.ok(run.r.statuses.some((st) => st.phase === 'Aborting' && /keeps failing/.test(st.message)));
  });

  describe('analysis', { concurrency: true }, () => {
    const analysis = (metrics: Partial<AnalysisMetric>[], intervalMs = 200): RolloutPlan['analysis'] => ({
      intervalMs, metrics: metrics.map((m, i) => ({ name: `m${i}`, query: `q${i}`, range: { min: 99 }, failureLimit: 2, inconclusiveLimit: 3, dryRun: false, ...m })),
    });
    const steps = (...weights: number[]): PlanStep[] => weights.map((weight) => ({ kind: 'weight', weight }));
    const queriesBefore = (r: Recorder, routeIndex: number) => {
      const at = r.calls.filter((c) => c.name === 'setCanaryRoute')[routeIndex]!.at;
      return r.calls.filter((c) => c.name === 'queryMetrics' && c.at <= at).length;
    };

    it('moves traffic up and promotes only after a passing analysis at the current weight', async () => {
      const run = await start(plan({ steps: steps(20, 50), analysis: analysis([{}]) }), { metrics: () => ({ value: 99.9 }) });
      const result = await finish(run);
      assert.equal(result.phase, 'Promoted');
      assert.deepEqual(run.r.weights(), [20, 50, 0]);
      assert.ok(queriesBefore(run.r, 1) >= 1, 'an analysis ran at 20% before 50%');
      const promoted = run.r.calls.find((c) => c.name === 'promoteStable')!.at;
      const lastRoute = run.r.calls.filter((c) => c.name === 'setCanaryRoute')[1]!.at;
      assert.ok(run.r.calls.some((c) => c.name === 'queryMetrics' && c.at > lastRoute && c.at < promoted), 'an analysis at 50% before promoting');
      assert.ok(run.r.statuses.at(-2)?.analysis?.every((v) => v.result === 'pass'), 'verdicts in status');
    });

    it('a metric outside its range failureLimit times in a row rolls back, saying which and why', async () => {
      const run = await start(plan({ steps: steps(20, 50), analysis: analysis([{ failureLimit: 2 }]) }), { metrics: () => ({ value: 80 }) });
      const result = await finish(run);
      assert.equal(result.phase, 'RolledBack');
      assert.match(result.message, /analysis failed: m0 2 times in a row: 80 is below the minimum 99/);
      assert.equal(run.r.last()?.reason, 'AnalysisFailed');
      assert.deepEqual(run.r.weights(), [20], 'traffic never moved past 20%');
      assert.equal(run.r.count('promoteStable'), 0);
    });

    it('inconclusive results hold the rollout (never a pass), and it goes on when the metric answers again', async () => {
      // No data for 5 runs, then good values.
      const run = await start(plan({ steps: steps(20, 50), analysis: analysis([{ inconclusiveLimit: 2 }]) }), {
        metrics: (n) => (n < 5 ? { value: null, error: 'Prometheus at http://p unreachable: ECONNREFUSED' } : { value: 100 }),
      });
      await run.r.until('held', (r) => r.statuses.some((st) => st.phase === 'Paused' && /analysis inconclusive, holding: m0 inconclusive 2 times in a row: Prometheus .* unreachable/.test(st.message)));
      assert.deepEqual(run.r.weights(), [20], 'no traffic moved up while blind');
      const result = await finish(run);
      assert.equal(result.phase, 'Promoted');
      assert.ok(run.r.statuses.some((st) => /analysis answers again/.test(st.message)));
      const lastBlind = run.r.calls.filter((c) => c.name === 'queryMetrics')[4]!.at;
      assert.ok(run.r.calls.filter((c) => c.name === 'setCanaryRoute')[1]!.at > lastBlind, 'traffic moved up only after the metric answered');
    });

    it('a blind hold across the end of a timed pause stays Paused, and says Progressing once the metric answers', async () => {
      // Blind from the first analysis (at 20%, inside a 600 ms pause) until the 8th; good after.
      const run = await start(plan({ steps: [{ kind: 'weight', weight: 20 }, { kind: 'pause', ms: 600 }, { kind: 'weight', weight: 50 }], analysis: analysis([{ inconclusiveLimit: 1 }], 150) }), {
        metrics: (n) => (n < 8 ? { value: null, error: 'no data' } : { value: 100 }),
      });
      const result = await finish(run);
      assert.equal(result.phase, 'Promoted');
      const held = run.r.statuses.findIndex((st) => /analysis inconclusive, holding/.test(st.message));
      const answered = run.r.statuses.findIndex((st) => /analysis answers again/.test(st.message));
      assert.ok(held >= 0 && answered > held, 'held, then answered');
      const between = run.r.statuses.slice(held, answered).map((st) => st.phase);
      assert.deepEqual([...new Set(between)], ['Paused'], `no flip to Progressing while held: ${between.join(', ')}`);
      assert.equal(run.r.statuses[answered]!.phase, 'Progressing', 'the pause step is over: the rollout goes on');
    });

    it('a resume ends a hold for an inconclusive analysis; a promote overrides it', async () => {
      const run = await start(plan({ steps: [{ kind: 'weight', weight: 20 }, { kind: 'pause', ms: null }], analysis: analysis([{ inconclusiveLimit: 1 }]) }));
      await run.r.until('held', (r) => /analysis inconclusive/.test(r.last()?.message ?? ''));
      const resumed = await control(run, 'resume', 'ivy');
      assert.equal(resumed.analysis?.blind, undefined);
      await run.r.until('held again (still no data)', (r) => r.statuses.filter((st) => /analysis inconclusive, holding/.test(st.message)).length >= 2);
      await control(run, 'promote', 'ivy');
      const result = await finish(run);
      assert.equal(result.phase, 'Promoted');
    });

    it('dry-run metrics are recorded and never decide', async () => {
      const run = await start(plan({ steps: steps(20, 40), analysis: analysis([{}, { dryRun: true, failureLimit: 1, inconclusiveLimit: 1, range: { max: 1 } }]) }), {
        metrics: (_n, m) => (m === 'm0' ? { value: 100 } : { value: 50 }),
      });
      const result = await finish(run);
      assert.equal(result.phase, 'Promoted');
      const dry = run.r.statuses.flatMap((st) => st.analysis ?? []).filter((v) => v.metric === 'm1');
      assert.ok(dry.length > 0 && dry.every((v) => v.result === 'fail' && v.dryRun === true), 'the dry run was judged and recorded as failing');
    });

    it('no analysis while no request reaches the canary', async () => {
      const run = await start(plan({ steps: [{ kind: 'weight', weight: 0 }, { kind: 'pause', ms: 800 }], analysis: analysis([{}], 100) }), { metrics: () => ({ value: 100 }) });
      assert.equal((await finish(run)).phase, 'Promoted');
      assert.equal(run.r.count('queryMetrics'), 0);
    });
  });

  it('header and mirror steps route what they say, keep the weight, and are removed by compensation', async () => {
    const run = await start(plan({
      steps: [{ kind: 'weight', weight: 10 }, { kind: 'header', match: [{ header: 'x-canary', exact: 'yes' }] }, { kind: 'mirror', percent: 30 }, { kind: 'pause', ms: null }],
    }));
    await run.r.until('paused', (r) => r.last()?.phase === 'Paused');
    assert.deepEqual(run.r.routes(), [
      { weight: 10 },
      { weight: 10, headers: [{ header: 'x-canary', exact: 'yes' }] },
      { weight: 10, headers: [{ header: 'x-canary', exact: 'yes' }], mirror: 30 },
    ]);
    assert.match(run.r.last()?.routing ?? '', /requests with header x-canary = yes, a 30% mirror/);
    await control(run, 'abort');
    assert.equal((await finish(run)).phase, 'Aborted');
    assert.equal(run.r.count('removeCanary'), 1);
  });
});

