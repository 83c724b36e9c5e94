import { log, proxyActivities, setHandler } from '@temporalio/workflow';
import { FailureType } from '../../api/constants.ts';
import type { Activities } from '../../activities/index.ts';
import { controlActions, controlSignals, controlUpdates, rolloutQuery, type RolloutInput, type RolloutResult } from '../contract.ts';
import { Rollout } from './rollout.ts';

// Short timeouts: a worker killed mid-activity is noticed quickly, and every canary activity is idempotent.
const acts = proxyActivities<Activities>({
  startToCloseTimeout: '20s',
  retry: {
    initialInterval: '200ms', backoffCoefficient: 2, maximumInterval: '10s',
    nonRetryableErrorTypes: [FailureType.CanaryNotReady, FailureType.ApplicationGone, FailureType.InvalidSpec, FailureType.Superseded],
  },
});

/**
 * One canary rollout, as a child of the Application's workflow: create the canary, walk the steps while health
 * gates run on durable timers, then promote; or, on an abort, failed gates or the deadline, compensate: every
 * change to the cluster registered its undo right after it succeeded, and the undos run in reverse, shielded from
 * cancellation, each verified by reading the VirtualService back. docs/architecture.md tells the whole path.
 */
export async function canaryRolloutWorkflow(input: RolloutInput): Promise<RolloutResult> {
  const rollout = new Rollout(input, acts);
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
