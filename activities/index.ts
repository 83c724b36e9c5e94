import type { FinalizeInput, ReconcileInput } from '../workflows/messages.ts';
import type { ActivityDeps } from './deps.ts';
import { finalizeApplication, reconcileApplication } from './reconcile.ts';

/** The activities a worker registers, bound to the process's clients. */
export function createActivities(deps: ActivityDeps) {
  return {
    reconcileApplication: (input: ReconcileInput) => reconcileApplication(deps, input),
    finalizeApplication: (input: FinalizeInput) => finalizeApplication(deps, input),
  };
}

export type Activities = ReturnType<typeof createActivities>;
