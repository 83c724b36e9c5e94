// Inputs and outputs of the activities, shared with the workflows that call them (as types only).
import type { RolloutPhase } from '../api/constants.ts';
import type { CanaryRoute, RouteWeights } from '../render/istio.ts';
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

export interface RouteInput extends CanaryRef {
  version: string;
  route: CanaryRoute;
}

export interface CanaryHealth {
  exists: boolean;
  readyReplicas: number;
  desiredReplicas: number;
  restarts: number;
  /** What keeps a canary pod from running (ImagePullBackOff, CreateContainerConfigError...), naming the pod and container. */
  issue?: { reason: string; message: string };
}

/** One metric judged once: what was asked, what came back, and what it means. */
export interface AnalysisVerdict {
  metric: string;
  at: string;
  /** pass, fail or inconclusive. */
  result: 'pass' | 'fail' | 'inconclusive';
  value?: number;
  range: { min?: number; max?: number };
  /** The query as sent. */
  query: string;
  message: string;
  /** The canary's weight when it was judged. */
  weight: number;
  dryRun?: boolean;
}

/** What a gate check sees of the canary: its pods, and its routes as the mesh will use them. */
export interface CanaryObservation {
  health: CanaryHealth;
  /** The routes read back from the VirtualService; null when there is no VirtualService. */
  routed: RouteWeights | null;
  /** The VirtualService routes exactly what the rollout last set (no hand edit, nothing missing). */
  asIntended: boolean;
  /** The DestinationRule has the canary's subset. */
  subset: boolean;
}

export interface MetricsInput extends CanaryRef {
  /** The Application's own Prometheus, overriding the operator's. */
  address?: string;
  queries: { name: string; query: string }[];
}

/** One query's answer: a value, or why there is none (no data, an error, Prometheus unreachable). */
export interface MetricValue {
  name: string;
  value: number | null;
  error?: string;
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
    /** The last analysis verdicts (newest last). */
    analysis?: AnalysisVerdict[];
    /** A header route or mirror in place, in words. */
    routing?: string;
  };
  /** A Kubernetes Event to record on the Application with this transition. */
  event?: { reason: string; message: string; type: 'Normal' | 'Warning' };
}
