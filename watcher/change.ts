// What a watch event means to an Application's workflow, as one pure function the watcher calls for every event.
import type { AppliedChild } from '../api/application.ts';
import { ConditionType, FINALIZER, KIND, Phase, RELEASE_KIND, rolloutInFlight } from '../api/constants.ts';
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
  /** Of a child: namespace/name of the Application that owns it. */
  owner?: string;
  /** The object's resourceVersion at this event: what tells whether an object in hand is current (kube/recent.ts). */
  resourceVersion?: string;
  /**
   * Of a child whose newest write was the operator's own apply (ourNewestWrite): when that write was. A new generation
   * with a new time here is a change the operator made, not drift.
   */
  oursAt?: string;
}

export interface WatchEvent {
  type: 'add' | 'update' | 'delete';
  /** The watcher is listing Applications for the first time (after a start or a new leadership). */
  initialSync: boolean;
}

/**
 * Whether a child's status can wake its workflow: a Deployment's decides the Application's phase, an HTTPRoute's
 * whether its Gateways serve it (the RouteAccepted condition). The watcher watches these whole, the rest by metadata.
 */
export function statusMatters(kind: string): boolean {
  return kind === kinds.deployment.kind || kind === kinds.httpRoute.kind;
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
  const statusWakes = statusMatters(after.kind);
  if (event.type === 'update' && before) {
    // A new generation is drift unless the operator's own apply made it (its echo needs no pass to put it back): its
    // write is the newest, and new at this event. A scale through the /scale subresource (`kubectl scale`, the HPA)
    // records no writer: it takes spec.replicas from the operator's entry and leaves that entry, older, the newest.
    const ours = after.oursAt !== undefined && after.oursAt !== before.oursAt;
    if (after.generation !== before.generation && !ours) return 'child';
    return statusWakes && after.status !== before.status ? 'child-status' : null;
  }
  // A relist (after a 410) can show a Deployment whose status moved (or an HTTPRoute reported on) while we were not
  // watching; one we just created has nothing to report yet.
  if (event.type === 'add' && !before && !event.initialSync && statusWakes && after.status !== '' && after.status !== '[]') return 'child-status';
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

/**
 * What a settled Application's status says its stable workload and children were at its last pass: what a watcher
 * starting up (a restart, a new leader) compares its first lists against instead of signalling a full pass.
 */
export interface SettledRecord {
  /** `Kind/name@generation` of each child the last pass applied, sorted. */
  children: string[];
  /** The stable Deployment's signature (reconcile/status.ts deploymentSignature) that status was written from. */
  deployment: string;
  /**
   * Of an Application with an HTTPRoute: its RouteAccepted condition's `status/reason` ('' when status has none, as
   * after an operator that did not write it), to compare with what the listed route's Gateways report (routeVerdict).
   */
  route?: string;
}

/** A RouteAccepted condition, or the one an HTTPRoute's reports make, as a starting watcher compares them. */
export function routeVerdict(c: { status: string; reason?: string } | undefined): string {
  return c ? `${c.status}/${c.reason ?? ''}` : '';
}

/** One child as the watcher and status both name it. */
export function childLabel(c: { kind: string; name: string; generation?: number | undefined }): string {
  return `${c.kind}/${c.name}@${c.generation ?? ''}`;
}

interface SettledView {
  metadata?: { generation?: number; deletionTimestamp?: string; finalizers?: string[] };
  status?: {
    observedGeneration?: number; phase?: string; desiredReplicas?: number; readyReplicas?: number; availableReplicas?: number;
    canary?: { phase?: string }; children?: AppliedChild[]; conditions?: { type: string; status: string; reason?: string }[];
  };
}

/**
 * The record of an Application that needs nothing at start, or null: ours (finalizer), not being deleted, its spec
 * reconciled (observedGeneration), Running, no rollout in flight, and its children recorded (status.children; an
 * Application last reconciled by an operator that did not record them gets a pass, which records them).
 */
export function settledRecord(app: SettledView): SettledRecord | null {
  const m = app.metadata ?? {};
  const s = app.status;
  if (!s || m.deletionTimestamp || !(m.finalizers ?? []).includes(FINALIZER)) return null;
  if (s.observedGeneration === undefined || s.observedGeneration !== m.generation || s.phase !== Phase.Running) return null;
  if (rolloutInFlight(s)) return null;
  if (!Array.isArray(s.children)) return null;
  const routed = s.children.some((c) => c.kind === kinds.httpRoute.kind);
  return {
    children: s.children.map(childLabel).sort(),
    deployment: JSON.stringify([Phase.Running, s.desiredReplicas ?? 1, s.readyReplicas ?? 0, s.availableReplicas ?? 0]),
    ...(routed ? { route: routeVerdict(s.conditions?.find((c) => c.type === ConditionType.RouteAccepted)) } : {}),
  };
}

/**
 * Why a settled Application must have a pass after all, once every collection has been listed (null: it needs
 * none). `listed` are its children as listed (`Kind/name@generation`, of the kinds watched), `watchedKinds` the
 * kinds the watcher lists (a recorded child of another kind cannot be checked and is not), `deployment` the
 * signature of its stable Deployment as listed ('' when absent), `route` the verdict its listed HTTPRoute's reports
 * make (routeVerdict; undefined when the route was not listed or not watched whole).
 */
export function startupDrift(record: SettledRecord, listed: string[], watchedKinds: ReadonlySet<string>, deployment: string | undefined, route?: string): string | null {
  const expected = record.children.filter((c) => watchedKinds.has(c.slice(0, c.indexOf('/'))));
  const seen = [...listed].sort();
  const missing = expected.filter((c) => !seen.includes(c));
  const extra = seen.filter((c) => !expected.includes(c));
  if (missing.length || extra.length) return `children changed while away: ${[...missing.map((c) => `-${c}`), ...extra.map((c) => `+${c}`)].join(' ')}`;
  if (deployment !== record.deployment) return `stable Deployment is ${deployment || 'not listed'}, status says ${record.deployment}`;
  // The Gateways' reports moved while away (a Gateway deleted, a listener changed), or status has no RouteAccepted yet.
  if (record.route !== undefined && route !== undefined && route !== record.route) return `HTTPRoute's Gateways report ${route}, status says RouteAccepted ${record.route || 'nothing'}`;
  return null;
}

/**
 * How a plain start of a new Application's workflow went: its first task handed back in the start's answer
 * (`eager`), queued by Temporal for the task queue's pollers (`queued`: no slot free, or eager start off on the
 * server), or a workflow of that id running already, signalled instead (`running`).
 */
export const startOutcomes = ['eager', 'queued', 'running'] as const;
export type StartOutcome = typeof startOutcomes[number];
