import type { CanaryRef, CanaryStatusInput, FinalizeInput, ReconcileInput, RolloutPlan, SetWeightInput } from '../workflows/messages.ts';
import {
  canaryHealth, finishCanarySpec, prepareCanary, promoteStable, removeCanary, restoreStableImage, setCanaryWeight, stableRolledOut, writeCanaryStatus,
} from './canary.ts';
import type { ActivityDeps } from './deps.ts';
import { finalizeApplication, reconcileApplication } from './reconcile.ts';

/** The activities a worker registers, bound to the process's clients. */
export function createActivities(deps: ActivityDeps) {
  return {
    reconcileApplication: (input: ReconcileInput) => reconcileApplication(deps, input),
    finalizeApplication: (input: FinalizeInput) => finalizeApplication(deps, input),
    prepareCanary: (input: CanaryRef & { plan: RolloutPlan }) => prepareCanary(deps, input),
    canaryHealth: (input: CanaryRef & { version: string }) => canaryHealth(deps, input),
    setCanaryWeight: (input: SetWeightInput & { version: string }) => setCanaryWeight(deps, input),
    removeCanary: (input: CanaryRef) => removeCanary(deps, input),
    promoteStable: (input: CanaryRef & { plan: RolloutPlan }) => promoteStable(deps, input),
    stableRolledOut: (input: CanaryRef & { image: string }) => stableRolledOut(deps, input),
    restoreStableImage: (input: CanaryRef & { plan: RolloutPlan }) => restoreStableImage(deps, input),
    finishCanarySpec: (input: CanaryRef & { plan: RolloutPlan }) => finishCanarySpec(deps, input),
    writeCanaryStatus: (input: CanaryStatusInput) => writeCanaryStatus(deps, input),
  };
}

export type Activities = ReturnType<typeof createActivities>;
