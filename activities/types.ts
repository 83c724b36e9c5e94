// Inputs and outputs of the activities, shared with the workflows that call them (as types only).
import type { RolloutPhase } from '../api/constants.ts';
import type { RolloutPlan } from '../workflows/rollout/plan.ts';

export interface ReconcileInput {
  namespace: string;
  name: string;
  workflowId: string;
  /** Re-apply every child (spec change, drift, resync); false refreshes status only. */
  apply: boolean;
  /** A rollout is in flight: the children the table marks rolloutOwned are the rollout's to manage. */
  rolloutActive?: boolean;
}

export interface ReconcileResult {
  /** gone: the Application no longer exists; deleting: it is being deleted and the finalizer is ours to release. */
  outcome: 'reconciled' | 'deleting' | 'gone';
  uid?: string;
  generation?: number;
  phase?: string;
  message?: string;
  /** True while the Deployment is still rolling out, so the workflow re-checks on a timer besides events. */
  progressing?: boolean;
  applied?: string[];
  removed?: string[];
  statusWritten?: boolean;
  /** The rollout the spec asks for (canary enabled), or absent. */
  canary?: RolloutPlan;
  /** What status says of the last rollout, so a new workflow run does not restart a finished one. */
  lastRollout?: { key: string; phase: string };
}

export interface FinalizeInput {
  namespace: string;
  name: string;
  uid: string;
}

export interface FinalizeResult {
  removed: string[];
  finalizerReleased: boolean;
}

/** The Application a canary activity works on. */
export interface CanaryRef {
  namespace: string;
  name: string;
}

export interface PlanInput extends CanaryRef {
  plan: RolloutPlan;
}

export interface SetWeightInput extends CanaryRef {
  weight: number;
  version: string;
}

export interface CanaryHealth {
  exists: boolean;
  readyReplicas: number;
  desiredReplicas: number;
  restarts: number;
}

/** What a gate check sees of the canary: its pods, and its routes as the mesh will use them. */
export interface CanaryObservation {
  health: CanaryHealth;
  /** The canary's weight read back from the VirtualService; null when there is no VirtualService. */
  routedWeight: number | null;
  /** The DestinationRule has the canary's subset. */
  subset: boolean;
}

export interface CanaryStatusInput extends CanaryRef {
  status: {
    phase: RolloutPhase;
    step: number;
    totalSteps: number;
    weight: number;
    message: string;
    version: string;
    image: string;
    startedAt: string;
    pauseEndsAt?: string;
    abortedBy?: string;
    reason?: string;
  };
  /** A Kubernetes Event to record on the Application with this transition. */
  event?: { reason: string; message: string; type: 'Normal' | 'Warning' };
}
