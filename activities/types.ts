// Inputs and outputs of the activities, shared with the workflows that call them (as types only).
import type { Check } from '../api/application.ts';
import type { FailureType, RolloutPhase, RolloutRouterName } from '../api/constants.ts';
import type { CheckContext, JobCheckState } from '../reconcile/checks.ts';
import type { CanaryRoute, RouteWeights } from '../routing/route.ts';
import type { ReleasePlan } from '../reconcile/wave-plan.ts';
import type { RolloutPlan } from '../reconcile/plan.ts';

export interface ReconcileInput {
  namespace: string;
  name: string;
  workflowId: string;
  /** Re-apply every child (spec change, drift, resync); false refreshes status only. */
  apply: boolean;
  /**
   * A rollout is in flight: the children the table marks rolloutOwned are the rollout's to manage. Absent when the
   * workflow does not know yet (a fresh run): then the Application's status decides.
   */
  rolloutActive?: boolean;
  /**
   * Children a watch saw edited or deleted since the last pass ("Deployment/web"): those the apply really changes back
   * are put back with an Event that says so (one read each before the apply, to tell a repair from an echo of our own).
   */
  drifted?: string[];
  /**
   * No rollout runs: a pass that finds the Application being deleted finalizes it at once (children, finalizer) instead
   * of writing a Deleting status for the workflow's separate finalizing step. Ignored while status names a rollout in flight.
   */
  finalize?: boolean;
  /** The watcher saw the Application's namespace being deleted: finalizing leaves the children to the namespace controller. */
  namespaceGoing?: boolean;
  /**
   * A stable pod's watch event showed a problem (ImagePullBackOff...): the pass reads the pods even when the
   * Deployment's status does not count them yet. Its controller may write that status after the pod's problem shows,
   * and that write, with nothing ready, wakes nobody: the problem would be said only at the timed re-check.
   */
  podProblem?: boolean;
  /**
   * The workflow takes a `superseded` result: a pass the Application's change crosses ends so instead of failing
   * with the 409. Absent from the workflows of releases before it, which would take that result for a deletion.
   */
  acceptsSuperseded?: boolean;
}

export interface ReconcileResult {
  /**
   * gone: the Application no longer exists; deleting: it is being deleted and the finalizer is ours to release;
   * superseded: its spec changed (or it was replaced or marked for deletion) while the pass ran, so the pass wrote no
   * status of the spec it read: the workflow passes again over the Application as it is now.
   */
  outcome: 'reconciled' | 'deleting' | 'gone' | 'superseded';
  uid?: string;
  generation?: number;
  phase?: string;
  message?: string;
  /** True while the Deployment is still rolling out, so the workflow re-checks on a timer besides events. */
  progressing?: boolean;
  applied?: string[];
  removed?: string[];
  /** Of `drifted`, what the apply changed back (re-created, or its spec put back). */
  repaired?: string[];
  statusWritten?: boolean;
  /** The rollout the spec asks for (canary enabled), or absent. */
  canary?: RolloutPlan;
  /** What status says of the last rollout: a new workflow run does not restart a finished one, and takes up one in flight. */
  lastRollout?: RecoveredRollout;
  /** Of a pass asked to finalize (input.finalize) that found the Application being deleted: what finalizing did. */
  finalized?: FinalizeResult;
}

export interface FinalizeInput {
  namespace: string;
  name: string;
  uid: string;
  /** The namespace is being deleted: its controller deletes the children, so only the finalizer is released. */
  namespaceGoing?: boolean;
}

export interface FinalizeResult {
  removed: string[];
  finalizerReleased: boolean;
  /** The children were left to the namespace controller (the namespace is being deleted). */
  leftToNamespace?: boolean;
}

/** The Application a canary activity works on. */
export interface CanaryRef {
  namespace: string;
  name: string;
}

export interface PlanInput extends CanaryRef {
  plan: RolloutPlan;
  /** prepareCanary: route this to the canary as well (a new canary's 0%); absent leaves the routes as they are. */
  route?: CanaryRoute;
}

/** What a promote waits for the stable Deployment to run. */
export interface StableRolledOutInput extends CanaryRef {
  /** The rollout's image. */
  image: string;
  /** What the promote's apply was admitted as, when admission rewrote it (promoteStable's result). */
  stored?: string;
}

/** The router a rollout started with (its plan's): today's spec may name another, or no canary at all. */
export interface RouterRef {
  router?: RolloutRouterName;
}

export interface RouteInput extends CanaryRef, RouterRef {
  version: string;
  route: CanaryRoute;
  /** The trace of the step that routes (with tracing on): the history names it beside the route. */
  traceId?: string;
}

/** observeCanary: also the rollout's image, to tell a canary running another (absent in older rollouts: the spec's). */
export interface ObserveInput extends RouteInput {
  image?: string;
}

/** removeCanary: the rollout's router and version (absent in rollouts started before they were passed: today's spec's). */
export interface RemoveCanaryInput extends CanaryRef, RouterRef {
  version?: string;
  /** Only route all traffic to stable: the canary's pods, and what routes to them, stay while proxies follow (a drain). */
  routeOnly?: boolean;
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
/** One check run once (status.canary.checks). */
export interface CheckVerdict {
  name: string;
  /** Its phase, or `step` when a step ran it. */
  phase: string;
  result: 'pass' | 'fail' | 'waiting';
  message: string;
  at: string;
}

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

/** The canary Deployment is not as the rollout applied it: resized, or running another image. */
export interface CanaryDrift {
  what: 'replicas' | 'image';
  message: string;
}

/** What a gate check sees of the canary: its pods, and its routes as its router will use them. */
export interface CanaryObservation {
  health: CanaryHealth;
  /** The routes read back from the router's objects; null when they do not exist. */
  routed: RouteWeights | null;
  /** The router's objects route exactly what the rollout last set (no hand edit, nothing missing). */
  asIntended: boolean;
  /** What the canary is routed to exists (Istio's canary subset, the Gateway API's canary Service). */
  target: boolean;
  /** Not as intended, yet written last by the operator: the Application's spec changed what the routes say (RouteObservation.specChanged). */
  specChanged?: boolean;
  /** What a hand edit changed of the canary Deployment the rollout applied (its size, its image), in words. */
  drift?: CanaryDrift;
}

export type { CheckContext } from '../reconcile/checks.ts';

/** An HTTP check (check.http) of the Application namespace/name, run as the context says. */
export interface HttpCheckInput extends CanaryRef {
  check: Check;
  context: CheckContext;
}

/** What an HTTP check got: `pass` (2xx), `fail` (every attempt failed), `waiting` (a confirm check not yet 2xx). */
export interface HttpCheckResult {
  verdict: 'pass' | 'fail' | 'waiting';
  /** The last attempt's HTTP status, when an answer came. */
  status?: number;
  /** The last attempt in one line: `HTTP 503 from http://...: <the body's start>`, `timed out after 2 s waiting for ...`. */
  detail: string;
  /** Requests sent: 1 + the retries used; 0 when refused. */
  attempts: number;
  /** Why no request was sent: the host is not in --check-allowed-hosts. */
  reason?: typeof FailureType.CheckNotAllowed;
}

/** Starts a Job check (check.job) of the Application namespace/name, run as the context says. */
export interface StartJobCheckInput extends CanaryRef {
  check: Check;
  context: CheckContext;
}

/** A Job check's Job. */
export interface JobCheckRef {
  namespace: string;
  jobName: string;
}

/** Where a Job check stands: running, or its end, in one line (a failure names the reason and the pod's message tail). */
export interface JobCheckObservation {
  state: JobCheckState;
  message: string;
}

export interface MetricsInput extends CanaryRef {
  /** The Application's own Prometheus, overriding the operator's. */
  address?: string;
  queries: { name: string; query: string }[];
}

/** Samples Prometheus writes that are no finite number: 0/0, and a division of anything else by 0. */
export type NonFiniteSample = 'NaN' | '+Inf' | '-Inf';

/** One query's answer: a finite value, or what came instead (no series, a sample that is no finite number, an error). */
export interface MetricValue {
  name: string;
  /** The finite number the query answered; null otherwise. */
  value: number | null;
  /** The query answered an empty result: it matched no series. */
  noSeries?: boolean;
  /** The query answered a sample that is no finite number (JSON carries no NaN or Infinity, so as Prometheus wrote it). */
  nonFinite?: NonFiniteSample;
  /** Why there is no answer to judge: Prometheus unreachable, the query refused, more than one series. */
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
    /** Who paused the rollout, while it is paused by request. */
    pausedBy?: string;
    abortedBy?: string;
    reason?: string;
    /** The last analysis verdicts (newest last). */
    analysis?: AnalysisVerdict[];
    /** The last check verdicts (newest last). */
    checks?: CheckVerdict[];
    /** A header route or mirror in place, in words. */
    routing?: string;
    /** What the rollout was planned from (RolloutPlan.specDigest). */
    specDigest?: string;
  };
  /** A Kubernetes Event to record on the Application with this transition. */
  event?: { reason: string; message: string; type: 'Normal' | 'Warning' };
}

/** A rollout's end that its own workflow could not write (it was terminated, timed out, failed, or lost). */
export interface CloseCanaryStatusInput extends CanaryRef {
  /** The rollout's key: status is changed only while it still describes this rollout in flight. */
  key: string;
  phase: RolloutPhase;
  reason: string;
  message: string;
}

/** What the Application's status says of a rollout in flight, enough to take it up again. */
export interface RecoveredRollout {
  key: string;
  phase: string;
  step: number;
  weight: number;
  startedAt?: string;
  pauseEndsAt?: string;
  pausedBy?: string;
  abortedBy?: string;
  reason?: string;
  message?: string;
}

// Releases.

/** A Release by name. */
export interface ReleaseRef {
  namespace: string;
  name: string;
}

/** What readRelease found: the Release's plan, or why there is none. */
export type ReadReleaseResult =
  | { outcome: 'gone' }
  | { outcome: 'deleting'; uid: string }
  | { outcome: 'invalid'; uid: string; generation: number; message: string }
  | { outcome: 'ready'; uid: string; generation: number; plan: ReleasePlan; finishedPhase?: string };

/** Where an Application of a Release is: absent, the operator's own cluster; else a registered member cluster. */
export interface InCluster {
  cluster?: string;
}

export interface ClaimInput extends InCluster {
  namespace: string;
  release: string;
  /** `steps`: the canary steps of the Application's wave, which its spec must take (absent: its own or the defaults). */
  apps: { name: string; canaryVersion: string; image?: string; steps?: unknown[] }[];
}

export type ClaimResult =
  | { ok: true; apps: { name: string; image: string; previousImage: string; previousDeploymentImage?: string }[] }
  /** Refused: every problem in one message, and each Application's own. */
  | { ok: false; message: string; refused: { name: string; message: string }[] };

export interface ReleaseClaimsInput extends InCluster {
  namespace: string;
  release: string;
  apps: string[];
}

export interface StartCanaryInput extends InCluster {
  namespace: string;
  release: string;
  app: string;
  canaryVersion: string;
  image?: string;
  steps?: unknown[];
  analysis?: unknown;
}

export interface StopCanaryInput extends InCluster {
  namespace: string;
  app: string;
  canaryVersion: string;
}

export interface RevertApplicationInput extends InCluster {
  namespace: string;
  app: string;
  image: string;
  previousImage: string;
  /** The Release that reverts it, and why: said in the Application's status.canary and an Event on it. */
  release?: string;
  why?: string;
}

export interface ObserveApplicationsInput extends InCluster {
  namespace: string;
  apps: string[];
}

/** One Application as the Release follows it. */
export interface AppObservation {
  name: string;
  /** The member cluster it is in (absent: the operator's own). */
  cluster?: string;
  exists: boolean;
  specImage?: string;
  canary?: { enabled: boolean; phase?: string; version?: string; image?: string; message?: string; reason?: string };
  /** The Application is Running at its current generation and its stable Deployment runs `deploymentImage`. */
  running: boolean;
  deploymentImage?: string;
}

export interface ReleaseStatusInput {
  namespace: string;
  name: string;
  status: Record<string, unknown>;
  event?: { reason: string; message: string; type: 'Normal' | 'Warning' };
}

/** A control signal to the rollout of an Application in a member cluster (sent to its operator's Temporal namespace). */
export interface SignalCanaryInput {
  cluster: string;
  /** The Application's namespace and name (the workflow id says them too; kept for the history's reader). */
  namespace: string;
  app: string;
  /** The rollout's workflow id (the same in every cluster's Temporal namespace). */
  workflowId: string;
  signal: 'promote' | 'pause' | 'resume' | 'abort';
  request: { by?: string; reason?: string };
}

export interface FinalizeReleaseInput extends ReleaseRef {
  uid: string;
}
