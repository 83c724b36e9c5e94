// What a watch event means to an Application's workflow, as one pure function the watcher calls for every event.
import { KIND, RELEASE_KIND } from '../api/constants.ts';
import { kinds } from '../render/children.ts';
import type { ChangeReason } from '../workflows/contract.ts';

/** What the watcher remembers of an object between events. */
export interface Observation {
  /** Application, or the kind of a child. */
  kind: string;
  generation: number | undefined;
  deleting: boolean;
  /** What of the object's status matters, serialized ('' for nothing): of a Deployment, what decides the Application's phase. */
  status: string;
  /** The Application carries our finalizer (so its workflow, not the watcher, sees its deletion through). */
  finalizer: boolean;
}

export interface WatchEvent {
  type: 'add' | 'update' | 'delete';
  /** The watcher is listing Applications for the first time (after a start or a new leadership). */
  initialSync: boolean;
}

/** Whether a child's status can wake its workflow (only a Deployment's decides the Application's phase). */
export function statusMatters(kind: string): boolean {
  return kind === kinds.deployment.kind;
}

/**
 * The reason to wake the workflow for an event that turned `before` into `after` (after is the last state on a
 * delete), or null when the event changes nothing the workflow acts on (our own status writes, labels...).
 */
export function changeReason(before: Observation | undefined, after: Observation, event: WatchEvent): ChangeReason | null {
  if (after.kind === KIND || after.kind === RELEASE_KIND) {
    // With our finalizer the workflow itself finished the deletion; without it, a running workflow must learn the app is gone.
    if (event.type === 'delete') return after.finalizer ? null : 'deleted';
    if (!before) return event.initialSync ? 'resync' : 'spec';
    if (after.deleting && !before.deleting) return 'deleted';
    return after.generation !== before.generation ? 'spec' : null;
  }
  // A deleted or edited child is drift to put back.
  if (event.type === 'delete') return 'child';
  const deployment = statusMatters(after.kind);
  if (event.type === 'update' && before) {
    if (after.generation !== before.generation) return 'child';
    return deployment && after.status !== before.status ? 'child-status' : null;
  }
  // A relist (after a 410) can show a Deployment whose status moved while we were not watching; one we just created
  // has nothing to report yet.
  if (event.type === 'add' && !before && !event.initialSync && deployment && after.status !== '') return 'child-status';
  return null;
}

/**
 * The reason to wake the workflow when a stable pod's problem (reconcile/status.ts podSignature; '' for none) went
 * from `before` to `after`: a new problem, or another one. A pod that cannot start changes nothing in its
 * Deployment's status, so without this its Application would say why only on its next timed re-check. A problem
 * that goes away needs no signal: the pod then becomes ready or goes, and its Deployment's status says so.
 */
export function podChangeReason(before: string | undefined, after: string): ChangeReason | null {
  return after !== '' && after !== (before ?? '') ? 'child-status' : null;
}

/** When several reasons arrive in one burst, the workflow needs only the strongest (every one but child-status re-applies). */
export const reasonStrength: Record<ChangeReason, number> = { 'child-status': 0, resync: 1, child: 2, deleted: 3, spec: 4 };
