import type { AppliedChild, Application, ApplicationStatus } from '../api/application.ts';
import { CONTAINER_NAME, ConditionType, Phase, Reason, isTerminal } from '../api/constants.ts';
import type { ParentRef } from '../render/gateway.ts';

/** What the reconcile activity observed of the children that status is derived from. */
export interface Observed {
  deployment: ObservedDeployment | null;
  service: ObservedService | null;
  /** The stable pods, read only while some are not available (to say why). */
  pods?: ObservedPod[];
  /** Of an Application routed by the Gateway API: its HTTPRoute as last read (null: not there). */
  route?: ObservedRoute | null;
}

/** The parts of an HTTPRoute its Gateways' controllers report on. */
export interface ObservedRoute {
  metadata: { name: string; namespace?: string };
  spec?: { parentRefs?: ParentRef[] };
  status?: { parents?: { parentRef: ParentRef; controllerName?: string; conditions?: { type: string; status: string; reason?: string; message?: string }[] }[] };
}

export interface ObservedPod {
  metadata: { name: string; deletionTimestamp?: string };
  status?: {
    conditions?: { type: string; status: string; reason?: string; message?: string }[];
    containerStatuses?: {
      name: string;
      image?: string;
      restartCount?: number;
      state?: { waiting?: { reason?: string; message?: string }; terminated?: { reason?: string; message?: string; exitCode?: number } };
      lastState?: { terminated?: { reason?: string; exitCode?: number } };
    }[];
  };
}

/** What keeps a pod from running, in the words `kubectl describe pod` would use. */
export interface PodIssue {
  /** The kubelet's or scheduler's reason: ImagePullBackOff, CreateContainerConfigError, CrashLoopBackOff, Unschedulable... */
  reason: string;
  /** The pod, the container, the reason and the kubelet's message, in one line. */
  message: string;
  /**
   * The same for one problem whatever pod shows it and however each retry words it (the kubelet alternates
   * ErrImagePull and ImagePullBackOff, CrashLoopBackOff and a terminated container, with changing messages): what
   * wakes the workflow and what an Event is recorded once for.
   */
  key: string;
}

/** Waiting reasons of a container that is simply on its way. */
const startingReasons = new Set(['ContainerCreating', 'PodInitializing']);

/** The kubelet's reasons that take turns while one problem lasts, as the one reason that names it. */
const sameProblem: Record<string, string> = { ErrImagePull: 'ImagePullBackOff' };

/**
 * The first thing keeping a pod from running, as `kubectl describe pod` would show it: a container waiting for a
 * reason other than starting (ImagePullBackOff, CreateContainerConfigError, CrashLoopBackOff...), a container that
 * failed, or a pod that cannot be scheduled. Pods on their way out are left aside (a container stopped by its
 * deletion keeps nothing from running). Null when every pod is merely on its way.
 */
export function podIssue(pods: ObservedPod[] | undefined): PodIssue | null {
  for (const pod of pods ?? []) {
    if (pod.metadata.deletionTimestamp) continue;
    for (const c of pod.status?.containerStatuses ?? []) {
      const key = (problem: string) => `${problem} container=${c.name} image=${c.image ?? ''}`;
      const waiting = c.state?.waiting;
      if (waiting?.reason && !startingReasons.has(waiting.reason)) {
        return {
          reason: waiting.reason,
          message: `pod ${pod.metadata.name}: container ${c.name}: ${waiting.reason}${waiting.message ? `: ${waiting.message}` : ''}`,
          key: key(sameProblem[waiting.reason] ?? waiting.reason),
        };
      }
      const term = c.state?.terminated;
      if (term && (term.exitCode ?? 0) !== 0) {
        return {
          reason: term.reason ?? 'Error',
          message: `pod ${pod.metadata.name}: container ${c.name} exited with ${term.exitCode ?? '?'}${term.message ? `: ${term.message}` : ''}`,
          // Between restarts of a crash loop: the same problem as its CrashLoopBackOff.
          key: key('CrashLoopBackOff'),
        };
      }
    }
    const unscheduled = pod.status?.conditions?.find((c) => c.type === 'PodScheduled' && c.status === 'False');
    if (unscheduled) {
      const reason = unscheduled.reason ?? 'Unschedulable';
      return { reason, message: `pod ${pod.metadata.name}: ${unscheduled.message ?? 'cannot be scheduled'}`, key: reason };
    }
  }
  return null;
}

/**
 * What the watcher compares of a stable pod: its problem's key, or '' while nothing keeps it from running. A pod
 * that cannot start changes nothing in its Deployment's status, so this is how its workflow hears of it at once.
 */
export function podSignature(pod: ObservedPod): string {
  return podIssue([pod])?.key ?? '';
}

export interface ObservedDeployment {
  metadata: { generation?: number };
  spec?: { replicas?: number };
  status?: {
    observedGeneration?: number;
    replicas?: number;
    updatedReplicas?: number;
    readyReplicas?: number;
    availableReplicas?: number;
    conditions?: { type: string; status: string; reason?: string; message?: string }[];
  };
}

/** A Deployment with its containers' names and images. */
export type ImagedDeployment = ObservedDeployment & { spec?: { template?: { spec?: { containers?: { name?: string; image?: string }[] } } } };

/**
 * The image a Deployment of ours runs: its container `app`'s, wherever admission put it (a policy may insert a
 * sidecar before it), else the first container's (a Deployment rendered before the container had its name).
 */
export function appImage(d: ImagedDeployment | null | undefined): string | undefined {
  const containers = d?.spec?.template?.spec?.containers ?? [];
  return (containers.find((c) => c.name === CONTAINER_NAME) ?? containers[0])?.image;
}

export interface ObservedService {
  metadata: { name: string; namespace?: string };
  spec?: { type?: string; clusterIP?: string; ports?: { name?: string; port: number; nodePort?: number }[] };
  status?: { loadBalancer?: { ingress?: { ip?: string; hostname?: string }[] } };
}

/** A problem found before or while applying, reported instead of a healthy status. */
export interface Failure {
  reason: string;
  message: string;
}

export interface Condition {
  type: string;
  status: 'True' | 'False' | 'Unknown';
  reason: string;
  message: string;
  observedGeneration?: number;
  lastTransitionTime?: string;
}

/** The stable workload's phase, with a reason and a message; `issue` when a pod problem is part of the story. */
export interface PhaseDecision {
  phase: Phase;
  reason: string;
  message: string;
  /** What keeps stable pods from running, named in the message (and the Degraded condition's reason). */
  issue?: PodIssue;
}

/** Phase, a reason and a message for the stable workload, from the Deployment's own status and, while pods are not available, theirs. */
export function decidePhase(app: Pick<Application, 'metadata'>, observed: Observed, failure: Failure | null): PhaseDecision {
  if (app.metadata.deletionTimestamp) return { phase: Phase.Deleting, reason: Reason.Deleting, message: 'removing children before releasing the finalizer' };
  if (failure) return { phase: Phase.Failed, ...failure };
  const d = observed.deployment;
  // What keeps pods from running, as kubectl rollout status users expect to see it; kept in a Failed message too,
  // where the Deployment controller's own words ("ReplicaSet ... has timed out progressing") would hide it.
  const issue = podIssue(observed.pods);
  const withIssue = (decision: Omit<PhaseDecision, 'issue'>): PhaseDecision =>
    (issue ? { ...decision, message: `${decision.message.replace(/\.$/, '')}; ${issue.message}`, issue } : decision);
  if (!d?.status) return withIssue({ phase: Phase.Pending, reason: Reason.DeploymentProgressing, message: 'waiting for the Deployment to report status' });
  const s = d.status;
  // A deadline the controller gave up on before it saw the current spec is the previous spec's: this one just started.
  const seen = (s.observedGeneration ?? 0) >= (d.metadata.generation ?? 0);
  const progressing = s.conditions?.find((c) => c.type === 'Progressing');
  if (seen && progressing?.reason === 'ProgressDeadlineExceeded') {
    return withIssue({ phase: Phase.Failed, reason: Reason.ProgressDeadlineExceeded, message: progressing.message ?? 'the Deployment exceeded its progress deadline' });
  }
  // Pods that cannot even be created (e.g. an image the kubelet-side validation refuses) never become available:
  // say so now rather than when the progress deadline runs out.
  const replicaFailure = s.conditions?.find((c) => c.type === 'ReplicaFailure' && c.status === 'True');
  if (replicaFailure) {
    return withIssue({ phase: Phase.Failed, reason: Reason.ReplicaFailure, message: replicaFailure.message ?? replicaFailure.reason ?? 'the Deployment cannot create pods' });
  }
  const { desired, available, updated, current } = rolloutProgress(d);
  if (current && available >= desired) {
    return { phase: Phase.Running, reason: Reason.AllReplicasReady, message: `${available}/${desired} replicas available` };
  }
  if (available === 0 && !current) return withIssue({ phase: Phase.Pending, reason: Reason.DeploymentProgressing, message: `0/${desired} replicas available` });
  if (available === 0) return withIssue({ phase: Phase.Pending, reason: Reason.NoReplicasReady, message: `0/${desired} replicas available` });
  return withIssue({ phase: Phase.Updating, reason: Reason.DeploymentProgressing, message: `${available}/${desired} replicas available, ${updated} updated` });
}

/**
 * Whether the stable pods are worth reading to say why some are not available: only once the Deployment controller
 * has created pods (before that there is nothing to explain, and a first pass would list pods that cannot exist yet)
 * and some of them are not available. Before the controller has seen a new spec, its pods are the previous spec's:
 * worth reading only when some of those are not available (a change to an app whose pods cannot start keeps saying
 * why), not on every change of a healthy one.
 */
export function needsPods(d: ObservedDeployment | null): boolean {
  if (!d?.status || (d.status.replicas ?? 0) === 0) return false;
  const { desired, available, current } = rolloutProgress(d);
  const seen = (d.status.observedGeneration ?? 0) >= (d.metadata.generation ?? 0);
  return seen ? !(current && available >= desired) : available < desired;
}

/** The Autoscaled condition: whether the HPA, not spec.replicas, sets the replica count (kubectl scale then does nothing). */
export function autoscaledCondition(scaling: Scaling | undefined, generation: number | undefined): Condition {
  if (!scaling?.hpa) return condition(ConditionType.Autoscaled, false, Reason.SpecReplicas, `spec.replicas sets the replica count (${scaling?.specReplicas ?? '?'})`, generation);
  return condition(ConditionType.Autoscaled, true, Reason.HorizontalPodAutoscaler,
    `the HorizontalPodAutoscaler sets the replica count (${scaling.hpa.min}-${scaling.hpa.max}); spec.replicas (${scaling.specReplicas}) is ignored and kubectl scale has no effect`, generation);
}

/** Who sets the stable replica count. */
export interface Scaling {
  specReplicas: number;
  hpa?: { min: number; max: number };
}

/** How far a Deployment's rollout is: `current` once the controller saw this generation, updated every replica and left no old one. */
export function rolloutProgress(d: ObservedDeployment): { desired: number; updated: number; available: number; current: boolean } {
  const desired = d.spec?.replicas ?? 1;
  const s = d.status ?? {};
  const updated = s.updatedReplicas ?? 0;
  const current = (s.observedGeneration ?? 0) >= (d.metadata.generation ?? 0) && updated >= desired && (s.replicas ?? 0) <= desired;
  return { desired, updated, available: s.availableReplicas ?? 0, current };
}

/** Whether a Deployment has rolled out its current spec and every replica is available ("kubectl rollout status" done). */
export function deploymentRolledOut(d: ObservedDeployment): boolean {
  const p = rolloutProgress(d);
  return p.current && p.available >= p.desired;
}

/**
 * What of a Deployment's status decides its Application's phase: the phase and the desired, ready and available
 * counts. The watcher wakes the workflow only when this changes, not on every status write of the Deployment
 * controller (2-3 per rollout). Empty while there is nothing to report yet (Pending, nothing ready): the pass that
 * applied the Deployment already said so, and a pod that cannot start is explained when its own watch event shows
 * the problem (podSignature), since nothing here changes then.
 */
export function deploymentSignature(d: ObservedDeployment): string {
  const { phase } = decidePhase({ metadata: { name: '' } }, { deployment: d, service: null }, null);
  const { desired, available } = rolloutProgress(d);
  const ready = d.status?.readyReplicas ?? 0;
  if (phase === Phase.Pending && ready === 0 && available === 0) return '';
  return JSON.stringify([phase, desired, ready, available]);
}

/** Endpoints a user can reach the app at, from the Service. */
export function endpointsOf(svc: ObservedService | null): string[] {
  if (!svc?.spec) return [];
  const ns = svc.metadata.namespace ?? 'default';
  const out: string[] = [];
  for (const p of svc.spec.ports ?? []) {
    out.push(`${svc.metadata.name}.${ns}.svc:${p.port}`);
    if (svc.spec.type === 'NodePort' && p.nodePort) out.push(`<node>:${p.nodePort}`);
    for (const ing of svc.status?.loadBalancer?.ingress ?? []) {
      const host = ing.ip ?? ing.hostname;
      if (host) out.push(`${host}:${p.port}`);
    }
  }
  return out;
}

/** `namespace/name[/section]` of a parent Gateway, its namespace the route's when unset (as the Gateway API reads it). */
function parentName(p: ParentRef, routeNamespace: string | undefined): string {
  return `${p.namespace ?? routeNamespace ?? ''}/${p.name}${p.sectionName ? `/${p.sectionName}` : ''}`;
}

/**
 * Whether the Gateways an HTTPRoute names took it, from what their controllers wrote in its status (the Gateway API's
 * `status.parents`): False with the controller's reason when one refused it (Accepted False: NotAllowedByListeners,
 * NoMatchingListenerHostname...) or cannot resolve its backends (ResolvedRefs False); Unknown while a parent has no
 * report at all, which is what a Gateway that does not exist (a typo in parentRefs) or has no controller running
 * looks like; True when every parent accepted it. Without this an Application whose route no Gateway serves said
 * Running, and its canaries moved weights no request follows.
 */
export function routeAcceptedCondition(route: ObservedRoute | null, generation: number | undefined): Condition {
  const gen = generation !== undefined ? { observedGeneration: generation } : {};
  const type = ConditionType.RouteAccepted;
  if (!route) return { type, status: 'Unknown', reason: Reason.RouteNotReported, message: 'the HTTPRoute is not there yet', ...gen };
  const ns = route.metadata.namespace;
  const reports = route.status?.parents ?? [];
  const wanted = route.spec?.parentRefs ?? [];
  const refused: { reason: string; text: string }[] = [];
  const silent: string[] = [];
  for (const ref of wanted) {
    const name = parentName(ref, ns);
    const report = reports.find((r) => parentName(r.parentRef, ns) === name);
    if (!report) {
      silent.push(name);
      continue;
    }
    const bad = ['Accepted', 'ResolvedRefs'].map((t) => report.conditions?.find((c) => c.type === t)).find((c) => c?.status === 'False');
    if (bad) {
      refused.push({
        reason: bad.reason ?? `Not${bad.type}`,
        text: `Gateway ${name} (${report.controllerName ?? 'its controller'}): ${bad.type} False, ${bad.reason ?? 'no reason'}${bad.message ? `: ${bad.message}` : ''}`,
      });
    }
  }
  const [first] = refused;
  if (first) return { type, status: 'False', reason: first.reason, message: `HTTPRoute ${route.metadata.name} is not served by ${refused.map((r) => r.text).join('; ')}`, ...gen };
  if (silent.length) {
    return {
      type, status: 'Unknown', reason: Reason.RouteNotReported,
      message: `no Gateway controller has reported on HTTPRoute ${route.metadata.name} for ${silent.map((n) => `Gateway ${n}`).join(', ')}: check that the Gateway exists (traffic.gatewayAPI.parentRefs) and that its GatewayClass's controller runs; no request reaches the Application through it until then`,
      ...gen,
    };
  }
  return { type, status: 'True', reason: Reason.RouteAccepted, message: `HTTPRoute ${route.metadata.name} accepted by ${wanted.map((r) => `Gateway ${parentName(r, ns)}`).join(', ')}`, ...gen };
}

/**
 * What of an HTTPRoute the watcher compares, which is what its RouteAccepted condition is made of: the Gateways it
 * names and each parent's report, without times or generations (they change with every route edit). The parents it
 * names count even when the operator's own write changed them (a rollout applying a new spec's parentRefs): the
 * verdict changes with them, while a weight change leaves this as it was.
 */
export function routeSignature(route: ObservedRoute): string {
  const ns = route.metadata.namespace;
  const wanted = (route.spec?.parentRefs ?? []).map((r) => parentName(r, ns)).sort();
  const reports = (route.status?.parents ?? []).map((p) => [parentName(p.parentRef, ns), p.controllerName ?? '', (p.conditions ?? []).map((c) => [c.type, c.status, c.reason ?? '']).sort()])
    .sort((a, b) => String(a[0]).localeCompare(String(b[0])));
  return JSON.stringify([wanted, reports]);
}

function condition(type: string, on: boolean, reason: string, message: string, generation: number | undefined): Condition {
  return { type, status: on ? 'True' : 'False', reason, message, ...(generation !== undefined ? { observedGeneration: generation } : {}) };
}

/**
 * The conditions for a phase; InvalidSpec and Degraded carry the failure's reason. Degraded is True too while a pod
 * problem (`issue`: ImagePullBackOff, CreateContainerConfigError...) keeps stable pods from running, with that
 * problem as its reason, Failed or not: the phase says how far the Deployment got, Degraded what is wrong.
 */
export function decideConditions(phase: Phase, reason: string, message: string, generation: number | undefined, issue?: PodIssue): Condition[] {
  const invalid = reason === Reason.InvalidSpec;
  const failed = phase === Phase.Failed;
  const running = phase === Phase.Running;
  const degraded = failed || issue !== undefined;
  return [
    condition(ConditionType.Ready, running, running ? Reason.AllReplicasReady : reason, message, generation),
    condition(ConditionType.Progressing, phase === Phase.Pending || phase === Phase.Updating, running ? Reason.Reconciled : reason, message, generation),
    condition(ConditionType.Degraded, degraded, issue?.reason ?? (failed ? reason : Reason.Reconciled), degraded ? message : 'no problems', generation),
    condition(ConditionType.InvalidSpec, invalid, invalid ? Reason.InvalidSpec : Reason.ValidSpec, invalid ? message : 'spec is valid', generation),
  ];
}

/** A Warning Event to record on the Application: `key` names its cause, and an Event is recorded once per key. */
export interface WarningEvent {
  reason: string;
  message: string;
  key: string;
}

/**
 * The Warning Event a status write calls for: one when Degraded turns True or says something new, none while it is
 * False or unchanged. Its key is the pod problem's (else the reason and message), so a problem that outlives many
 * passes, pods and kubelet retries, or a progress deadline, gets one Event, not one per pass.
 */
export function degradedEvent(previous: Condition[] | undefined, next: Condition[], issue: PodIssue | undefined): WarningEvent | null {
  const now = next.find((c) => c.type === ConditionType.Degraded);
  if (now?.status !== 'True') return null;
  const before = previous?.find((c) => c.type === ConditionType.Degraded);
  if (before?.status === 'True' && before.reason === now.reason && before.message === now.message) return null;
  return { reason: now.reason, message: now.message, key: issue?.key ?? `${now.reason}: ${now.message}` };
}

/** What status.canary says, as far as the CanaryProgressing condition needs it. */
export interface CanaryStatusLike {
  phase?: string;
  reason?: string;
  message?: string;
}

/**
 * The CanaryProgressing condition from status.canary: True while a rollout runs (its phase as the reason), False
 * once it is over, with the outcome's reason (CanaryPromoted, CanaryAborted, HealthGateFailed...) and message, so a
 * rolled-back canary shows in the conditions and not only in status.canary. None before the first rollout.
 */
export function canaryCondition(canary: CanaryStatusLike | undefined, generation: number | undefined): Condition | null {
  if (!canary?.phase) return null;
  const over = isTerminal(canary.phase);
  const reason = over ? canary.reason ?? canary.phase : canary.phase;
  return condition(ConditionType.CanaryProgressing, !over, reason, canary.message ?? '', generation);
}

/**
 * The CanarySpecApplied condition while a rollout runs: True when it runs with the canary spec of this generation,
 * False (RolloutSpecDeferred) when steps, analysis, checks, health gates or the progress deadline changed under it:
 * a rollout keeps to the spec it started with, and the change applies to the next one. None between rollouts.
 */
export function canarySpecCondition(state: { running: false } | { running: true; version: string; deferred?: string[] }, generation: number | undefined): Condition | null {
  if (!state.running) return null;
  if (!state.deferred) return condition(ConditionType.CanarySpecApplied, true, Reason.RolloutSpecCurrent, `the rollout of ${state.version} runs with the canary spec of this generation`, generation);
  return condition(ConditionType.CanarySpecApplied, false, Reason.RolloutSpecDeferred,
    `canary ${state.deferred.join(', ')} changed while the rollout of ${state.version} runs${generation !== undefined ? ` (generation ${generation})` : ''}: it keeps the spec it started with; the change applies to the next rollout (abort this one to start again with it)`, generation);
}

/** The conditions with the canary's replaced (or added, or kept out when there is none). */
export function withCanaryCondition(conditions: Condition[], canary: CanaryStatusLike | undefined, generation: number | undefined): Condition[] {
  const c = canaryCondition(canary, generation);
  const rest = conditions.filter((x) => x.type !== ConditionType.CanaryProgressing);
  return c ? [...rest, c] : rest;
}

/** Carries lastTransitionTime over from the previous conditions unless a condition's status flipped. */
export function withTransitionTimes(next: Condition[], previous: Condition[] | undefined, now: string): Condition[] {
  return next.map((c) => {
    const old = previous?.find((p) => p.type === c.type);
    return { ...c, lastTransitionTime: old && old.status === c.status && old.lastTransitionTime ? old.lastTransitionTime : now };
  });
}

/** Everything status says about the stable workload, without timestamps. */
export function desiredStatus(
  app: Pick<Application, 'metadata'>,
  observed: Observed,
  failure: Failure | null,
  info: {
    workflowId: string; temporalUI?: string; observedGeneration: number | undefined; canary?: CanaryStatusLike; scaling?: Scaling;
    /** Whether the rollout in flight runs with today's canary spec (canary-plan.ts rolloutSpecState). */
    rolloutSpec?: { running: false } | { running: true; version: string; deferred?: string[] };
    /** The children as the last apply left them (kept from status by a pass that applies nothing). */
    children?: AppliedChild[];
  },
): Omit<ApplicationStatus, 'lastUpdateTime' | 'canary' | 'conditions'> & { conditions: Condition[] } {
  const { phase, reason, message, issue } = decidePhase(app, observed, failure);
  const d = observed.deployment;
  const s = d?.status;
  const spec = info.rolloutSpec ? canarySpecCondition(info.rolloutSpec, info.observedGeneration) : null;
  const conditions = [
    ...decideConditions(phase, reason, message, info.observedGeneration, issue), ...(info.scaling ? [autoscaledCondition(info.scaling, info.observedGeneration)] : []), ...(spec ? [spec] : []),
    ...(observed.route !== undefined ? [routeAcceptedCondition(observed.route, info.observedGeneration)] : []),
  ];
  return {
    ...(info.observedGeneration !== undefined ? { observedGeneration: info.observedGeneration } : {}),
    phase,
    message,
    ...(d?.spec?.replicas !== undefined ? { desiredReplicas: d.spec.replicas } : {}),
    replicas: s?.replicas ?? 0,
    readyReplicas: s?.readyReplicas ?? 0,
    availableReplicas: s?.availableReplicas ?? 0,
    selector: `app.kubernetes.io/name=${app.metadata.name}`,
    conditions: withCanaryCondition(conditions, info.canary, info.observedGeneration),
    endpoints: endpointsOf(observed.service),
    workflowId: info.workflowId,
    ...(info.temporalUI ? { temporalUI: info.temporalUI } : {}),
    ...(info.children ? { children: info.children } : {}),
  };
}

type LooseStatus = Record<string, unknown> & { conditions?: { type: string; lastTransitionTime?: string }[] };

function comparable(status: LooseStatus | undefined): string {
  if (!status) return '';
  const { lastUpdateTime: _t, conditions, ...rest } = status;
  const conds = (conditions ?? []).map(({ lastTransitionTime: _l, ...c }) => c).sort((a, b) => a.type.localeCompare(b.type));
  return JSON.stringify({ ...sortKeys(rest), conditions: conds.map(sortKeys) });
}

function sortKeys<T extends object>(o: T): T {
  return Object.fromEntries(Object.entries(o).filter(([, v]) => v !== undefined).sort(([a], [b]) => a.localeCompare(b))) as T;
}

/** True when writing `next` would change what `current` says (timestamps aside): status is patched only then. */
export function statusChanged(current: LooseStatus | undefined, next: LooseStatus): boolean {
  return comparable(current) !== comparable(next);
}
