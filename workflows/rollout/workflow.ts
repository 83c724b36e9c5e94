import { log, setHandler } from '@temporalio/workflow';
import { controlActions, controlSignals, controlUpdates, recheckSignal, rolloutQuery, type RolloutInput, type RolloutResult } from '../contract.ts';
import { Rollout } from './rollout.ts';

/**
 * One canary rollout, as a child of the Application's workflow: create the canary, walk the steps while health
 * gates run on durable timers, then promote; or, on an abort, failed gates or the deadline, compensate: every
 * change to the cluster registered its undo right after it succeeded, and the undos run in reverse, shielded from
 * cancellation, each verified by reading the VirtualService back. docs/architecture.md tells the whole path.
 */
export async function canaryRolloutWorkflow(input: RolloutInput): Promise<RolloutResult> {
  const rollout = new Rollout(input);
  for (const action of controlActions) {
    setHandler(controlUpdates[action], (r) => rollout.accept(action, r), { validator: (_r: unknown) => rollout.validate(action) });
    setHandler(controlSignals[action], (r) => {
      try {
        rollout.validate(action);
        rollout.accept(action, r);
      } catch (err) {
        log.warn(`ignored ${action} signal: ${(err as Error).message}`);
      }
    });
  }
  setHandler(recheckSignal, ({ object }) => rollout.recheckNow(object));
  setHandler(rolloutQuery, () => rollout.snapshot());

  try {
    await rollout.start();
    for (const [index, step] of input.plan.steps.entries()) {
      if (rollout.promoteRequested) break;
      await rollout.runStep(index, step);
      await rollout.holdWhilePaused(index + 1);
    }
    return await rollout.promote();
  } catch (err) {
    return await rollout.compensate(err);
  }
}
