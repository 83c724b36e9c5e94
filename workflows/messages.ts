// Messages and types shared by the Application workflow, its activities and the clients (watcher, CLI).
import { defineQuery, defineSignal } from '@temporalio/workflow';

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
