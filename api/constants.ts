// Names shared by the CRD, the renderers, the activities and the workflows. Every string that
// appears on the cluster or in a condition lives here so that a rename is one edit.

export const GROUP = 'myapp.example.com';
export const VERSION = 'v1';
export const API_VERSION = `${GROUP}/${VERSION}`;
export const KIND = 'Application';
export const PLURAL = 'applications';
export const SINGULAR = 'application';
export const SHORT_NAME = 'app';
export const CRD_NAME = `${PLURAL}.${GROUP}`;

export const LABEL_NAME = 'app.kubernetes.io/name';
export const LABEL_MANAGED_BY = 'app.kubernetes.io/managed-by';
export const MANAGED_BY = 'application-operator';
/** Pod label that tells stable pods from canary pods; the DestinationRule subsets select on it. */
export const LABEL_VERSION = 'version';

/** Value of the version label on stable pods, and the name of the stable DestinationRule subset. */
export const STABLE_VERSION = 'stable';
export const STABLE_SUBSET = 'stable';
export const CANARY_SUBSET = 'canary';
/** Name of the single HTTP route of the VirtualService, so traffic routing can find it again. */
export const ROUTE_NAME = 'primary';

export const ISTIO_API_VERSION = 'networking.istio.io/v1';
export const GATEWAY_API_VERSION = 'gateway.networking.k8s.io/v1';
/** Traefik's own CRDs: its mirroring service stands in for the Gateway API's RequestMirror, which Traefik lacks. */
export const TRAEFIK_API_VERSION = 'traefik.io/v1alpha1';

/**
 * The routers a canary's traffic can go through (spec.traffic.router). `replicas` is no proxy: the one Service
 * selects stable and canary pods alike, and the canary's share is approximated by its replica count.
 */
export const ROUTERS = ['istio', 'gatewayAPI', 'replicas'] as const;
export type RouterName = (typeof ROUTERS)[number];
/**
 * The routers a rollout may use: those a spec names, and `service`, the one a blue-green rollout without a router
 * uses (the Service's selector switches from the stable pods to the preview's).
 */
export type RolloutRouterName = RouterName | 'service';

/** The routers that move the Service `<app>`'s selector rather than a proxy's routes. */
export function routesBySelector(router: RolloutRouterName | undefined): boolean {
  return router === 'service' || router === 'replicas';
}

/** How a new version is rolled out (spec.serviceMesh.canary.strategy); each has a plan builder and a workflow type. */
export const STRATEGIES = ['canary', 'blueGreen'] as const;
export type StrategyName = (typeof STRATEGIES)[number];

/** Suffix of a blue-green rollout's preview Service `<app>-preview`, which selects the new version's pods only. */
export const PREVIEW_SERVICE_SUFFIX = '-preview';

/** Where in a rollout a check with a `phase` runs (spec.serviceMesh.canary.checks[].phase); a step runs one by name. */
export const CHECK_PHASES = ['beforeStart', 'prePromotion', 'postPromotion', 'onRollback'] as const;
export type CheckPhase = (typeof CHECK_PHASES)[number];

/** Suffix of the Services a Gateway API route weights: `<app>-stable` (stable pods only) and `<app>-canary`. */
export const STABLE_SERVICE_SUFFIX = '-stable';

export const FINALIZER = `${GROUP}/finalizer`;
/** Label of a Job check's Job: the check it runs. */
export const CHECK_LABEL = `${GROUP}/check`;
/** Annotation of a Job check's Job: the rollout version and check it was made for. */
export const CHECK_KEY_ANNOTATION = `${GROUP}/check-key`;
export const FIELD_MANAGER = 'application-operator';

export const ANNOTATION_SIDECAR_INJECT = 'sidecar.istio.io/inject';
export const ANNOTATION_EXCLUDE_INBOUND_PORTS = 'traffic.sidecar.istio.io/excludeInboundPorts';

export const CONTAINER_NAME = 'app';
export const DATA_VOLUME_NAME = 'data';
export const CONFIGMAP_VOLUME_PREFIX = 'cm-';
/** Longest Application name for which `<name>-canary` is still a valid 63-character DNS-1035 label. */
export const MAX_NAME_LENGTH = 63 - '-canary'.length;
/** The longest name of an Application whose canary is blue-green: its preview Service `<name>-preview` fits in 63 too. */
export const MAX_BLUE_GREEN_NAME_LENGTH = 63 - PREVIEW_SERVICE_SUFFIX.length;

/** Phases of an Application (status.phase). */
export const Phase = {
  Pending: 'Pending',
  Running: 'Running',
  Updating: 'Updating',
  Failed: 'Failed',
  Deleting: 'Deleting',
} as const;
export type Phase = (typeof Phase)[keyof typeof Phase];

/** Phases of a canary rollout (status.canary.phase, the rollout query, the UI). */
export const RolloutPhase = {
  Progressing: 'Progressing',
  Paused: 'Paused',
  Promoting: 'Promoting',
  Promoted: 'Promoted',
  Aborting: 'Aborting',
  Aborted: 'Aborted',
  RolledBack: 'RolledBack',
  Failed: 'Failed',
} as const;
export type RolloutPhase = (typeof RolloutPhase)[keyof typeof RolloutPhase];

/** Phases in which a rollout is over: its canary is never restarted by itself. */
export const terminalRolloutPhases: ReadonlySet<string> = new Set<RolloutPhase>([
  RolloutPhase.Promoted, RolloutPhase.Aborted, RolloutPhase.RolledBack, RolloutPhase.Failed,
]);

/** True when a rollout in this phase is over. */
export function isTerminal(phase: string | undefined): boolean {
  return phase !== undefined && terminalRolloutPhases.has(phase);
}

/** True when an Application's status names a rollout in flight: one its workflow aborts and compensates first. */
export function rolloutInFlight(status: unknown): boolean {
  const phase = (status as { canary?: { phase?: string } } | undefined)?.canary?.phase;
  return Boolean(phase && !isTerminal(phase));
}

/** The merge patch that releases our finalizer, on the resourceVersion the object was read at (a 409 if it changed). */
export function finalizerRelease(metadata: { resourceVersion?: string; finalizers?: string[] }): { metadata: { resourceVersion?: string; finalizers: string[] } } {
  return { metadata: { resourceVersion: metadata.resourceVersion, finalizers: (metadata.finalizers ?? []).filter((f) => f !== FINALIZER) } };
}

// ---- Releases ----

/** The annotation that says which Release an Application belongs to while the Release runs. */
export const RELEASE_ANNOTATION = `${GROUP}/release`;
/**
 * The same claim on an Application in a member cluster, by a Release of the hub (its name; same namespace). Its own
 * key, so the member's operator does not take it for a Release of its own cluster.
 */
export const FLEET_RELEASE_ANNOTATION = `${GROUP}/fleet-release`;

export const RELEASE_KIND = 'Release';

/** An Application of a Release by where it is: its name, or cluster/name in a member cluster. */
export function releaseAppKey(a: { name: string; cluster?: string | undefined }): string {
  return a.cluster ? `${a.cluster}/${a.name}` : a.name;
}

// ---- member clusters (fleet Releases) ----

/**
 * A member cluster is registered with a Secret in the operator's namespace carrying this label, whose value is the
 * cluster's name (what a Release's `cluster` field says). docs/architecture.md tells the fleet design.
 */
export const CLUSTER_LABEL = `${GROUP}/cluster`;
/** The Secret's key holding the member's kubeconfig (one context, credentials embedded). */
export const CLUSTER_KUBECONFIG_KEY = 'kubeconfig';
/** The Secret's key naming the Temporal namespace the member's own operator runs in (its canaries are steered there). */
export const CLUSTER_TEMPORAL_NAMESPACE_KEY = 'temporalNamespace';
/** The operator writes a member's health on its Secret: a label (for `kubectl get -L`) and annotations with the details. */
export const CLUSTER_HEALTH_LABEL = `${GROUP}/cluster-health`;
export const CLUSTER_VERSION_ANNOTATION = `${GROUP}/cluster-version`;
export const CLUSTER_MESSAGE_ANNOTATION = `${GROUP}/cluster-message`;
/** When the health last changed (it is written only then, so a steady fleet costs no writes). */
export const CLUSTER_SINCE_ANNOTATION = `${GROUP}/cluster-health-since`;
/** A member's health as the operator last probed it. */
export const ClusterHealth = {
  /** Reachable, and the Application and Release CRDs are installed. */
  Ready: 'Ready',
  /** The API server did not answer, or refused the credentials. */
  Unreachable: 'Unreachable',
  /** Reachable, but without the operator's CRDs. */
  MissingCRDs: 'MissingCRDs',
  /** The Secret's kubeconfig cannot be used. */
  InvalidKubeconfig: 'InvalidKubeconfig',
} as const;
export type ClusterHealth = (typeof ClusterHealth)[keyof typeof ClusterHealth];
/** The namespace the operator reads cluster Secrets from when it runs outside a cluster (in one: its own). */
export const DEFAULT_CLUSTERS_NAMESPACE = 'application-operator';
export const RELEASE_PLURAL = 'releases';

/** Phases of a Release (status.phase). */
export const ReleasePhase = {
  Pending: 'Pending',
  Progressing: 'Progressing',
  Paused: 'Paused',
  /** Stopping the canaries and putting the earlier waves back, after an abort... */
  Aborting: 'Aborting',
  /** ...or after a canary failed. */
  RollingBack: 'RollingBack',
  Promoted: 'Promoted',
  Aborted: 'Aborted',
  RolledBack: 'RolledBack',
  Failed: 'Failed',
} as const;
export type ReleasePhase = (typeof ReleasePhase)[keyof typeof ReleasePhase];

/** Phases in which a Release is over for its generation. */
export const terminalReleasePhases: ReadonlySet<string> = new Set<ReleasePhase>([
  ReleasePhase.Promoted, ReleasePhase.Aborted, ReleasePhase.RolledBack, ReleasePhase.Failed,
]);

/** Where each Application of a Release stands (status.applications[].phase). */
export const ReleaseAppPhase = {
  /** Its wave has not started. */
  Waiting: 'Waiting',
  /** Its canary runs. */
  Progressing: 'Progressing',
  Promoted: 'Promoted',
  /** Its canary was rolled back or aborted: the Release fails. */
  Failed: 'Failed',
  /** The Release stopped its canary (another failed, or an abort). */
  Stopped: 'Stopped',
  /** The Release put its previous image back. */
  Reverted: 'Reverted',
  /** The Release was refused (a conflict named in its message) and never claimed it. */
  Refused: 'Refused',
} as const;
export type ReleaseAppPhase = (typeof ReleaseAppPhase)[keyof typeof ReleaseAppPhase];

export const ConditionType = {
  Ready: 'Ready',
  Progressing: 'Progressing',
  Degraded: 'Degraded',
  InvalidSpec: 'InvalidSpec',
  /** True while a canary rollout runs; after it ends, False with the outcome as its reason. */
  CanaryProgressing: 'CanaryProgressing',
  /** While a rollout runs: whether it runs with the canary spec of this generation (a change applies to the next one). */
  CanarySpecApplied: 'CanarySpecApplied',
  /** True when the HorizontalPodAutoscaler, not spec.replicas, sets the replica count. */
  Autoscaled: 'Autoscaled',
  /** Of an Application routed by the Gateway API: whether every Gateway in parentRefs accepted its HTTPRoute, as their controllers report. */
  RouteAccepted: 'RouteAccepted',
} as const;
export type ConditionType = (typeof ConditionType)[keyof typeof ConditionType];

/** Reasons of conditions and Events, CamelCase as Kubernetes writes them. */
export const Reason = {
  Reconciled: 'Reconciled',
  InvalidSpec: 'InvalidSpec',
  ValidSpec: 'ValidSpec',
  ApplyFailed: 'ApplyFailed',
  ChildrenApplied: 'ChildrenApplied',
  AllReplicasReady: 'AllReplicasReady',
  NoReplicasReady: 'NoReplicasReady',
  DeploymentProgressing: 'DeploymentProgressing',
  ProgressDeadlineExceeded: 'ProgressDeadlineExceeded',
  ReplicaFailure: 'ReplicaFailure',
  Deleting: 'Deleting',
  HorizontalPodAutoscaler: 'HorizontalPodAutoscaler',
  SpecReplicas: 'SpecReplicas',
  /** RouteAccepted: every parent Gateway accepted the HTTPRoute; or none of their controllers has reported on it yet. */
  RouteAccepted: 'Accepted',
  RouteNotReported: 'NoGatewayReport',
  CanaryStarted: 'CanaryStarted',
  CanaryStepCompleted: 'CanaryStepCompleted',
  CanaryPaused: 'CanaryPaused',
  CanaryResumed: 'CanaryResumed',
  CanaryPromoting: 'CanaryPromoting',
  CanaryPromoted: 'CanaryPromoted',
  CanaryAborting: 'CanaryAborting',
  CanaryAborted: 'CanaryAborted',
  CanaryRollingBack: 'CanaryRollingBack',
  CanaryRolledBack: 'CanaryRolledBack',
  /** Why a rollout was rolled back (status.canary.reason). */
  HealthGateFailed: 'HealthGateFailed',
  AnalysisFailed: 'AnalysisFailed',
  /** A check (spec.serviceMesh.canary.checks) passed, failed (it rolls the rollout back), or waits for a confirmation. */
  CheckPassed: 'CheckPassed',
  CheckFailed: 'CheckFailed',
  CheckWaiting: 'CheckWaiting',
  /** Events of the analysis that decide something. */
  AnalysisInconclusive: 'AnalysisInconclusive',
  AnalysisRecovered: 'AnalysisRecovered',
  RolloutCancelled: 'RolloutCancelled',
  RolloutError: 'RolloutError',
  /** The rollout put back what a hand edit or a deletion changed (its routes, the canary Deployment or subset). */
  CanaryRepaired: 'CanaryRepaired',
  /** A rollout whose workflow Temporal lost, taken up again from the Application's status. */
  RolloutRecovered: 'RolloutRecovered',
  /** A rollout whose workflow ended without finishing (terminated, timed out, failed): the Application's workflow rolled it back. */
  RolloutTerminated: 'RolloutTerminated',
  RolloutTimedOut: 'RolloutTimedOut',
  RolloutFailed: 'RolloutFailed',
  /** A rollout in flight whose workflow Temporal lost, no longer wanted by the spec: rolled back. */
  RolloutLost: 'RolloutLost',
  /** A Release put back the image it had promoted (status.canary of the Application says which Release and why). */
  ReleaseReverted: 'ReleaseReverted',
  /** The children were put back after a hand edit or a deletion changed them. */
  DriftRepaired: 'DriftRepaired',
  /** The canary's steps, analysis, checks, health gates or progress deadline changed while a rollout ran: they apply to the next one. */
  RolloutSpecDeferred: 'RolloutSpecDeferred',
  /** The rollout in flight runs with the canary spec of this generation. */
  RolloutSpecCurrent: 'RolloutSpecCurrent',
} as const;
export type Reason = (typeof Reason)[keyof typeof Reason];

/**
 * Types of the non-retryable failures activities raise (ApplicationFailure.type). The workflows decide on them:
 * each is listed in the retry policy of the activities that raise it.
 */
export const FailureType = {
  /** The spec does not parse; a status condition says why. */
  InvalidSpec: 'InvalidSpec',
  /** The API server refused a child for good (400/422); a status condition says why. */
  ApplyRejected: 'ApplyRejected',
  /** The operator's role does not grant what a pass needs (403); a status condition says so and the pass is retried. */
  Forbidden: 'Forbidden',
  /** Refused to route traffic to a canary without a ready replica. */
  CanaryNotReady: 'CanaryNotReady',
  /** The spec's canary changed while this rollout ran. */
  Superseded: 'Superseded',
  /** The Application was deleted. */
  ApplicationGone: 'ApplicationGone',
  /** An Application the Release started a canary on is no longer claimed by it (another Release, or a person, took it). */
  ReleaseConflict: 'ReleaseConflict',
  /** A check or an Application's analysis would call a host the operator's --check-allowed-hosts does not allow. */
  CheckNotAllowed: 'CheckNotAllowed',
  /** A member cluster a Release names could not be reached (or refused the operator's credentials): the Release holds. */
  ClusterUnreachable: 'ClusterUnreachable',
} as const;
export type FailureType = (typeof FailureType)[keyof typeof FailureType];

interface Named {
  metadata: { name: string };
}

/** Name of the stable Deployment, the Service, the PVC, the HPA and the Istio objects of an Application. */
export function childName(app: Named): string {
  return app.metadata.name;
}

/** Name of the canary Deployment of an Application (and of its canary Service, under the Gateway API router). */
export function canaryName(app: Named): string {
  return `${app.metadata.name}-canary`;
}

/** Name of Traefik's mirroring service of an Application (the Gateway API router on Traefik, while a mirror is set). */
export function mirrorServiceName(app: Named): string {
  return `${app.metadata.name}-mirror`;
}

/** Name of the Service that selects only an Application's stable pods (the Gateway API router weights it). */
export function stableServiceName(app: Named): string {
  return `${app.metadata.name}${STABLE_SERVICE_SUFFIX}`;
}

/**
 * What a notification may be sent for: the rollout's Events, in kinds people subscribe to (activities/notify.ts maps
 * them). Here rather than beside the schema: the workflows need it, and nothing of the schema (zod) may reach their
 * bundle, where every cached workflow would build its own copy.
 */
export const NOTIFICATION_EVENTS = ['started', 'step', 'paused', 'checkFailed', 'analysisFailed', 'promoted', 'aborted', 'rolledBack'] as const;
export type NotificationEvent = (typeof NOTIFICATION_EVENTS)[number];

/**
 * How long the new version's pods keep serving after all traffic was routed away from them (a promote, an abort, a
 * rollback), by default: proxies take a route change a moment after it is written (Envoy from istiod, Traefik after
 * its providers' throttle, kube-proxy), and a request they still send to a pod that is gone fails.
 */
export const DEFAULT_DRAIN_SECONDS = 5;
