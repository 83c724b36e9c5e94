import { ContinueAsNew, isCancellation, setHandler } from '@temporalio/workflow';
import { controlUpdates, recheckSignal, rolloutQuery, type RolloutInput, type RolloutResult } from '../contract.ts';
import { wireControls } from '../kit/controls.ts';
import { Rollout } from './rollout.ts';
import { traced } from '../kit/trace.ts';
import { describeStep } from '../../reconcile/plan.ts';

/**
 * One canary rollout: create the canary, walk the steps while health gates run on durable timers, then promote; or,
 * on an abort, failed gates or the deadline, compensate: every change to the cluster registered its undo right
 * after it succeeded, and the undos run in reverse, shielded from cancellation, each verified by reading the
 * routes back. It continues as new wherever it waits, carrying its whole state, so it can wait for weeks;
 * a run takes the story up at the position the last one carried. docs/architecture.md tells the whole path.
 */
export async function canaryRolloutWorkflow(input: RolloutInput): Promise<RolloutResult> {
  return rolloutWorkflow(input);
}

/**
 * A blue-green rollout: the same engine on the steps reconcile/strategies/blue-green.ts writes (the preview judged,
 * an approval, the switch, a switch-back window), under its own type name so that the UI and searches tell them apart.
 */
export async function blueGreenRolloutWorkflow(input: RolloutInput): Promise<RolloutResult> {
  return rolloutWorkflow(input);
}

/** Any strategy's rollout: the workflow functions above are its names. */
async function rolloutWorkflow(input: RolloutInput): Promise<RolloutResult> {
  const rollout = new Rollout(input);
  wireControls(rollout, controlUpdates);
  setHandler(recheckSignal, ({ object }) => rollout.recheckNow(object));
  setHandler(rolloutQuery, () => rollout.snapshot());

  let result: RolloutResult;
  try {
    result = await story(rollout, input);
  } catch (err) {
    if (err instanceof ContinueAsNew) throw err;
    result = await rollout.compensate(err);
    // A cancelled rollout (someone cancelled its workflow) is compensated, then the cancellation goes on.
    if (isCancellation(err)) {
      await rollout.report(result);
      await rollout.notificationsStarted();
      throw err;
    }
  }
  await rollout.report(result);
  // Only their start: the notifications' own workflows deliver them, however long a receiver is down.
  await rollout.notificationsStarted();
  return result;
}

/** The rollout from wherever it stands: the canary, the steps (each possibly held), the promotion. */
async function story(rollout: Rollout, input: RolloutInput): Promise<RolloutResult> {
  await rollout.start();
  if (rollout.position.at === 'compensate') return rollout.compensate();
  if (rollout.position.at !== 'promote') {
    const from = rollout.position;
    const first = from.at === 'steps' ? from.step : 0;
    const steps = input.plan.steps;
    for (let index = first; index < steps.length; index++) {
      if (rollout.promoteRequested) {
        // A promote passes the next approval (a blue-green switch), skipping what comes before it; with none ahead
        // it ends the steps and promotes (a canary's).
        const approval = steps.findIndex((s, i) => i >= index && s.kind === 'pause' && s.approval !== undefined);
        if (approval < 0) break;
        index = approval;
      }
      if (!(from.at === 'steps' && index === from.step && from.done)) {
        // One trace per step (with tracing on): its gate checks, routes, analysis and their API requests.
        const attributes = { 'app.namespace': input.namespace, 'app.name': input.name, 'rollout.version': input.plan.version, 'rollout.step': String(index + 1) };
        await traced(`rollout ${input.plan.version} of ${input.namespace}/${input.name}: ${describeStep(steps[index], index, steps.length)}`, undefined, attributes, (traceId) => {
          rollout.traceId = traceId;
          return rollout.runStep(index, steps[index]!).finally(() => { rollout.traceId = undefined; });
        });
      }
      await rollout.holdWhilePaused(index + 1);
    }
  }
  return rollout.promote();
}
