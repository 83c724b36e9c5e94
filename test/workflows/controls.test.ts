// Every control in every state of a rollout, as a table: which requests are accepted, the refusal each other one
// gets, and what an accepted one does. A pause and a resume are a person's own hold; a pause step is an approval
// that only a promote passes; an analysis hold is lifted by a resume.
import { WorkflowUpdateFailedError } from '@temporalio/client';
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { eventually } from '../../lib/poll.ts';
import { rolloutQuery, type ControlAction, type RolloutState } from '../../workflows/contract.ts';
import { WorkflowTier, control, gates, plan, sleep, type Recorder, type RolloutRun } from './stubs.ts';

const tier = new WorkflowTier();
const paused = (r: Recorder) => r.last()?.phase === 'Paused';
const analysis = { intervalMs: 150, metrics: [{ name: 'm0', query: 'q0', range: { min: 99 }, failureLimit: 2, inconclusiveLimit: 1, dryRun: false }] };

/** Each state a rollout can be asked in, and how a scenario gets there. */
const states: Record<string, () => Promise<RolloutRun>> = {
  'waiting for a ready replica': async () => {
    const run = await tier.startRollout(plan({ gates: { ...gates, failureThreshold: 1000 } }), { health: () => ({ readyReplicas: 0 }) });
    await run.r.until('waiting', (r) => /waiting for 1 ready canary replica/.test(r.last()?.message ?? ''));
    return run;
  },
  'in a timed pause': async () => {
    const run = await tier.startRollout(plan({ steps: [{ kind: 'weight', weight: 10 }, { kind: 'pause', ms: 120_000 }, { kind: 'weight', weight: 50 }] }));
    await run.r.until('paused', paused);
    return run;
  },
  'at an approval': async () => {
    const run = await tier.startRollout(plan({ steps: [{ kind: 'weight', weight: 10 }, { kind: 'pause', ms: null }, { kind: 'weight', weight: 50 }] }));
    await run.r.until('paused', paused);
    return run;
  },
  'paused by request at an approval': async () => {
    const run = await states['at an approval']!();
    await control(run, 'pause', 'pia');
    return run;
  },
  'held by an inconclusive analysis': async () => {
    const run = await tier.startRollout(plan({ steps: [{ kind: 'weight', weight: 20 }, { kind: 'weight', weight: 40 }], analysis }));
    await run.r.until('held', (r) => r.events.includes('AnalysisInconclusive'));
    return run;
  },
  promoting: async () => {
    const run = await tier.startRollout(plan({ steps: [{ kind: 'weight', weight: 10 }] }), { stableDoneAt: 1_000_000 });
    await run.r.until('promoting', (r) => r.count('stableRolledOut') >= 1);
    return run;
  },
  // Level 4: past this point an abort would undo nothing (found by hand: accepted, said Aborting, and ignored).
  'promoting, the stable Deployment rolled out': async () => {
    const run = await tier.startRollout(plan({ steps: [{ kind: 'weight', weight: 10 }] }), { fail: { removeCanary: () => new Error('503 (scripted)') } });
    await run.r.until('past the stable Deployment', (r) => r.count('removeCanary') >= 1);
    return run;
  },
  aborting: async () => {
    const run = await tier.startRollout(plan({ steps: [{ kind: 'weight', weight: 10 }, { kind: 'pause', ms: null }] }), { fail: { removeCanary: () => new Error('503 (scripted)') } });
    await run.r.until('paused', paused);
    await control(run, 'abort', 'abe');
    await run.r.until('aborting', (r) => r.statuses.some((s) => s.phase === 'Aborting' && /keeps failing/.test(s.message)));
    return run;
  },
};

type Want = 'accepted' | RegExp;
const table: Record<string, Record<ControlAction, Want>> = {
  'waiting for a ready replica': { promote: 'accepted', abort: 'accepted', pause: 'accepted', resume: /the rollout is not paused/ },
  'in a timed pause': { promote: 'accepted', abort: 'accepted', pause: 'accepted', resume: /not paused by request: it waits at step 2\/3: pause for 2m; promote to go on/ },
  'at an approval': { promote: 'accepted', abort: 'accepted', pause: 'accepted', resume: /not paused by request: it waits at step 2\/3: pause until promoted; promote to go on/ },
  'paused by request at an approval': { promote: 'accepted', abort: 'accepted', pause: /already paused \(by pia\)/, resume: 'accepted' },
  'held by an inconclusive analysis': { promote: 'accepted', abort: 'accepted', pause: 'accepted', resume: 'accepted' },
  promoting: { promote: /already being promoted/, abort: 'accepted', pause: /cannot pause a rollout that is Promoting/, resume: /the rollout is not paused/ },
  'promoting, the stable Deployment rolled out': { promote: /already being promoted/, abort: /stable Deployment already runs app:v2, too late to abort/, pause: /cannot pause a rollout that is Promoting/, resume: /the rollout is not paused/ },
  aborting: { promote: /being aborted/, abort: /already being aborted/, pause: /cannot pause a rollout that is Aborting/, resume: /the rollout is not paused/ },
};

const query = (run: RolloutRun) => run.handle.query(rolloutQuery) as Promise<RolloutState>;
const stateUntil = (run: RolloutRun, what: string, ok: (s: RolloutState) => boolean) =>
  eventually(what, async () => { const s = await query(run); return ok(s) ? s : undefined; }, { timeoutMs: 60_000, intervalMs: 50 });

/** What an accepted request must have done; `after` is the state the update answered with. */
async function effect(state: string, action: ControlAction, run: RolloutRun, after: RolloutState): Promise<void> {
  if (action === 'promote') {
    assert.equal((await run.result()).phase, 'Promoted');
    // Promptly: in the run that was asked, not whenever the step it interrupted would have ended.
    assert.equal(await tier.runs(run.handle.workflowId), 1, 'promoted without waiting for the step to end');
  } else if (action === 'abort') {
    assert.equal((await run.result()).phase, 'Aborted');
  } else if (action === 'pause') {
    const s = await stateUntil(run, 'paused by request', (x) => x.pausedByUser);
    assert.equal(s.pausedBy, 'tester');
  } else {
    // The answer, not a later query: an analysis still blind may hold the rollout again a moment later.
    assert.equal(after.pausedByUser, false);
    assert.equal(after.pausedBy, undefined);
    assert.equal(after.analysis?.blind, undefined);
    if (state === 'paused by request at an approval') {
      // Resuming undid pia's hold; the approval still waits for a promote.
      await sleep(500);
      assert.equal((await query(run)).phase, 'Paused');
      assert.deepEqual(run.r.weights(), [10]);
      assert.equal(run.r.count('promoteStable'), 0);
    }
  }
}

describe('every control in every state', { concurrency: 6 }, () => {
  before(() => tier.start());
  after(() => tier.stop());

  for (const [state, row] of Object.entries(table)) {
    for (const [action, want] of Object.entries(row) as [ControlAction, Want][]) {
      it(`${action} ${state}: ${want === 'accepted' ? 'accepted' : `refused (${want.source})`}`, async () => {
        const run = await states[state]!();
        const before = await query(run);
        if (want === 'accepted') {
          await effect(state, action, run, await control(run, action));
        } else {
          await assert.rejects(control(run, action), (e: unknown) => e instanceof WorkflowUpdateFailedError && want.test(e.cause?.message ?? ''));
          const after = await query(run);
          assert.equal(after.pausedByUser, before.pausedByUser, 'a refused request changed nothing');
          assert.equal(after.phase, before.phase);
        }
        await run.handle.terminate('table cell done').catch(() => undefined);
        await tier.replayRuns(run.handle.workflowId);
      });
    }
  }
});
