// Messages and types shared by the Application workflow, its activities and the clients (watcher, CLI).
import { defineQuery, defineSignal, defineUpdate } from '@temporalio/workflow';

/** Why the watcher woke the workflow. `child-status` alone never re-applies children; it only refreshes status. */
export type ChangeReason = 'spec' | 'child' | 'child-status' | 'deleted' | 'resync';

export interface ChangeSignal {
  reason: ChangeReason;
  /** Kind/name of the child that changed, for the history. */
  object?: string;
}

/** Durations of the reconcile loop; inputs so tests can use seconds. */
export interface LoopOptions {
  /** Re-check a rollout that has not finished this often even without events (SPEC: Updating 30 s). */
  progressRecheckSeconds: number;
  /** A converged app is re-applied this often as a safety net besides events (0 = never). */
  resyncSeconds: number;
  /** Continue-as-new once the history reaches this many events (or when the server suggests it). */
  maxHistoryEvents: number;
}

export const defaultLoopOptions: LoopOptions = { progressRecheckSeconds: 30, resyncSeconds: 0, maxHistoryEvents: 2000 };

export interface ApplicationWorkflowInput {
  namespace: string;
  name: string;
  options?: Partial<LoopOptions>;
  /** State carried across continue-as-new. */
  carried?: CarriedState;
}

export interface CarriedState {
  passes: number;
  lastPhase?: string;
  lastGeneration?: number;
  uid?: string;
}

/** What the workflow knows, for `temporal workflow query --name state` and the CLI. */
export interface ApplicationState {
  namespace: string;
  name: string;
  passes: number;
  phase?: string;
  generation?: number;
  message?: string;
  lastReason?: ChangeReason;
}

export const changedSignal = defineSignal<[ChangeSignal]>('changed');
export const stateQuery = defineQuery<ApplicationState>('state');

/** One workflow per Application. */
export function applicationWorkflowId(namespace: string, name: string): string {
  return `application/${namespace}/${name}`;
}

export interface ReconcileInput {
  namespace: string;
  name: string;
  workflowId: string;
  /** Re-apply every child (spec change, drift, resync); false refreshes status only. */
  apply: boolean;
  /** A rollout is in flight: the canary Deployment and the Istio routes are the rollout's to manage. */
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

// ---- Canary rollouts ----

/** One step of a rollout plan: set the canary's traffic weight, or pause (ms; null until promoted or resumed). */
export type PlanStep = { kind: 'weight'; weight: number } | { kind: 'pause'; ms: number | null };

export interface HealthGates {
  minReadyReplicas: number;
  maxRestarts: number;
  intervalMs: number;
  failureThreshold: number;
}

/** Everything a rollout needs, fixed when it starts (a later spec change starts a new rollout instead). */
export interface RolloutPlan {
  /** Identity of the canary (`<version>|<image>`): a finished rollout of the same key is never restarted by itself. */
  key: string;
  version: string;
  image: string;
  /** The stable image when the rollout started, to restore if a promote fails half-way. */
  stableImage: string;
  steps: PlanStep[];
  gates: HealthGates;
  progressDeadlineMs: number;
  /** True when spec steps were given: finishing them promotes. The seed form (a fixed weight) waits for promote. */
  promoteAfterSteps: boolean;
}

export interface RolloutInput {
  namespace: string;
  name: string;
  plan: RolloutPlan;
}

export type RolloutPhase = 'Progressing' | 'Paused' | 'Promoting' | 'Promoted' | 'Aborting' | 'Aborted' | 'RolledBack' | 'Failed';

export interface GateVerdict {
  at: string;
  ok: boolean;
  readyReplicas: number;
  restarts: number;
  reason: string;
}

/** The rollout's position, for the `rollout` query, the CLI and the UI. */
export interface RolloutState {
  namespace: string;
  name: string;
  key: string;
  phase: RolloutPhase;
  /** Index of the current step (steps.length once all are done). */
  step: number;
  totalSteps: number;
  /** Traffic percentage the canary receives now. */
  weight: number;
  message: string;
  startedAt: string;
  pauseEndsAt?: string;
  /** Milliseconds left in a timed pause, computed when queried. */
  pauseRemainingMs?: number;
  /** Paused by a user (as opposed to a pause step). */
  pausedByUser: boolean;
  deadlineAt: string;
  gates: GateVerdict[];
  consecutiveFailures: number;
  abortedBy?: string;
  reason?: string;
}

export interface RolloutResult {
  key: string;
  phase: RolloutPhase;
  message: string;
}

/** Who asked for a control action, and why (shown in status and history). */
export interface ControlRequest {
  by?: string;
  reason?: string;
}

export const promoteSignal = defineSignal<[ControlRequest?]>('promote');
export const abortSignal = defineSignal<[ControlRequest?]>('abort');
export const pauseSignal = defineSignal<[ControlRequest?]>('pause');
export const resumeSignal = defineSignal<[ControlRequest?]>('resume');
export const promoteUpdate = defineUpdate<RolloutState, [ControlRequest]>('promote');
export const abortUpdate = defineUpdate<RolloutState, [ControlRequest]>('abort');
export const pauseUpdate = defineUpdate<RolloutState, [ControlRequest]>('pause');
export const resumeUpdate = defineUpdate<RolloutState, [ControlRequest]>('resume');
export const rolloutQuery = defineQuery<RolloutState | null>('rollout');

/** The workflow id of an Application's rollout (one run per rollout). */
export function rolloutWorkflowId(namespace: string, name: string): string {
  return `application/${namespace}/${name}/canary`;
}

export interface CanaryRef {
  namespace: string;
  name: string;
}

export interface SetWeightInput extends CanaryRef {
  weight: number;
}

export interface CanaryHealth {
  exists: boolean;
  readyReplicas: number;
  desiredReplicas: number;
  restarts: number;
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
