// The Release's activities: read the Release, claim its Applications (refusing conflicts), start, stop and revert
// their canaries by changing their specs (so each Application's CR keeps saying what runs), observe them, and write
// the Release's status. Each is idempotent; the decisions are the workflow's.
import { ApplicationFailure, Context } from '@temporalio/activity';
import { parseApplication, rolloutRouterOf, type Application } from '../api/application.ts';
import { imageAtVersion } from '../api/image.ts';
import { API_VERSION, FailureType, FINALIZER, FLEET_RELEASE_ANNOTATION, KIND, Phase, Reason, RELEASE_ANNOTATION, RolloutPhase, finalizerRelease, isTerminal } from '../api/constants.ts';
import { RELEASE_KIND, parseRelease, terminalReleasePhases } from '../api/release.ts';
import { KubeError, type Kube, type KubeObject } from '../kube/client.ts';
import { ClusterNotRegistered, type MemberCluster } from '../kube/clusters.ts';
import type { ObjectRef } from '../kube/resources.ts';
import { kinds } from '../render/children.ts';
import { appImage, rolloutProgress, type ImagedDeployment } from '../reconcile/status.ts';
import { releasePlan } from '../reconcile/release-plan.ts';
import { workflowUiLink, type ActivityDeps } from './deps.ts';
import { recordEvent } from './events.ts';
import type {
  AppObservation, ClaimInput, ClaimResult, FinalizeReleaseInput, InCluster, ObserveApplicationsInput, ReadReleaseResult, ReleaseClaimsInput, ReleaseRef,
  ReleaseStatusInput, RevertApplicationInput, SignalCanaryInput, StartCanaryInput, StopCanaryInput,
} from './types.ts';

export { RELEASE_ANNOTATION } from '../api/constants.ts';
// Where the workflows and tests found them before they moved to types.ts with every other activity's.
export type { AppObservation, ClaimInput, ClaimResult, ReadReleaseResult, ReleaseStatusInput, StartCanaryInput } from './types.ts';

const releaseRef = (namespace: string, name: string): ObjectRef => ({ apiVersion: API_VERSION, kind: RELEASE_KIND, namespace, name });
const appRef = (namespace: string, name: string): ObjectRef => ({ apiVersion: API_VERSION, kind: KIND, namespace, name });

type RawObject = KubeObject & {
  metadata: KubeObject['metadata'] & { deletionTimestamp?: string; finalizers?: string[]; annotations?: Record<string, string> };
  status?: { phase?: string; observedGeneration?: number; canary?: { phase?: string; version?: string; image?: string; message?: string; reason?: string } };
};

/** The annotation a Release claims an Application with: its own in this cluster, the fleet one in a member. */
const claimKey = (input: InCluster) => (input.cluster ? FLEET_RELEASE_ANNOTATION : RELEASE_ANNOTATION);

/**
 * Runs `work` with the client of the cluster the Application is in. In a member cluster, anything that keeps the work
 * from being done there (not registered, no answer, refused credentials, a server error) fails the activity as
 * ClusterUnreachable, at once and saying why: the Release holds, visibly, and tries again (workflows/release).
 */
async function inCluster<T>(deps: ActivityDeps, input: InCluster, work: (kube: Kube) => Promise<T>): Promise<T> {
  if (!input.cluster) return work(deps.kube);
  const cluster = input.cluster;
  const { kube, server } = await memberCluster(deps, cluster);
  try {
    return await work(kube);
  } catch (err) {
    // A compare-and-swap lost to a concurrent writer is retried like any other.
    if (err instanceof ApplicationFailure || (err instanceof KubeError && err.status === 409)) throw err;
    const why = err instanceof Error ? err.message : String(err);
    throw ApplicationFailure.nonRetryable(`cluster ${cluster} (${server}): ${why}`, FailureType.ClusterUnreachable);
  }
}

/** The registered member cluster `cluster`; one that is not (or whose Secret is unusable) is ClusterUnreachable. */
async function memberCluster(deps: ActivityDeps, cluster: string): Promise<MemberCluster> {
  if (!deps.clusters) throw ApplicationFailure.nonRetryable(`cluster ${cluster}: this operator reaches no member clusters (it runs without --clusters-namespace)`, FailureType.ClusterUnreachable);
  return deps.clusters.get(cluster).catch((err: unknown) => {
    throw err instanceof ClusterNotRegistered ? ApplicationFailure.nonRetryable(err.message, FailureType.ClusterUnreachable) : err;
  });
}

/** Reads the Release, adds our finalizer, and plans its current generation (or says why it cannot). */
export async function readRelease(deps: ActivityDeps, input: ReleaseRef): Promise<ReadReleaseResult> {
  const ref = releaseRef(input.namespace, input.name);
  const raw = await deps.kube.get<RawObject>(ref);
  if (!raw) return { outcome: 'gone' };
  const uid = raw.metadata.uid ?? '';
  const finalizers = raw.metadata.finalizers ?? [];
  if (raw.metadata.deletionTimestamp) return finalizers.includes(FINALIZER) ? { outcome: 'deleting', uid } : { outcome: 'gone' };
  if (!finalizers.includes(FINALIZER)) {
    await deps.kube.mergePatch(ref, { metadata: { resourceVersion: raw.metadata.resourceVersion, finalizers: [...finalizers, FINALIZER] } });
  }
  const generation = raw.metadata.generation ?? 0;
  const parsed = parseRelease(raw);
  if (!parsed.ok) return { outcome: 'invalid', uid, generation, message: parsed.message };
  // A generation already run to its end is not run again (after a restart, or a new workflow run).
  const done = raw.status?.observedGeneration === generation && terminalReleasePhases.has(raw.status.phase ?? '') ? raw.status.phase : undefined;
  return { outcome: 'ready', uid, generation, plan: releasePlan(parsed.release), ...(done ? { finishedPhase: done } : {}) };
}

/**
 * Claims every Application of the Release (an annotation), or none: refused, with a message, when one does not
 * exist, has no router for a canary, belongs to another running Release, runs its own canary, or already ran this
 * very canary. Claiming again what is already ours is a no-op, so a retried activity is harmless.
 */
export async function claimApplications(deps: ActivityDeps, input: ClaimInput): Promise<ClaimResult> {
  // A cluster that is not registered refuses the Release (nothing was claimed yet); one that does not answer holds it.
  if (input.cluster && deps.clusters) {
    const problem = await deps.clusters.get(input.cluster).then(() => undefined, (err: unknown) => (err instanceof ClusterNotRegistered ? err.message : undefined));
    if (problem) return { ok: false, message: problem, refused: input.apps.map((a) => ({ name: a.name, message: problem })) };
  }
  return inCluster(deps, input, (kube) => claimIn(deps, kube, input));
}

async function claimIn(deps: ActivityDeps, kube: Kube, input: ClaimInput): Promise<ClaimResult> {
  const problems: { name: string; message: string }[] = [];
  const found: { raw: RawObject; app: Application; image: string }[] = [];
  const where = input.cluster ? ` of cluster ${input.cluster}` : '';
  const key = claimKey(input);
  for (const want of input.apps) {
    const raw = await kube.get<RawObject>(appRef(input.namespace, want.name));
    if (!raw || raw.metadata.deletionTimestamp) {
      problems.push({ name: want.name, message: `Application ${want.name} does not exist in namespace ${input.namespace}${where}` });
      continue;
    }
    const parsed = parseApplication(raw);
    if (!parsed.ok) {
      problems.push({ name: want.name, message: `Application ${want.name} is invalid: ${parsed.message}` });
      continue;
    }
    const app = parsed.app;
    const owner = raw.metadata.annotations?.[key];
    // A fleet claim names a Release of this (the hub's) cluster; a member's own Release may hold it too.
    if (owner && owner !== input.release && await releaseRuns(deps.kube, input.namespace, owner)) {
      problems.push({ name: want.name, message: `Application ${want.name}${where} is already in Release ${owner}, which is running` });
      continue;
    }
    const local = input.cluster ? raw.metadata.annotations?.[RELEASE_ANNOTATION] : undefined;
    if (local && await releaseRuns(kube, input.namespace, local)) {
      problems.push({ name: want.name, message: `Application ${want.name}${where} is in that cluster's own Release ${local}, which is running` });
      continue;
    }
    // A Release rolls out through each Application's own canary, on whatever router its spec names (Istio, the
    // Gateway API, replica counts; a blue-green switch of its Service): one without any cannot run a canary.
    if (!rolloutRouterOf(app.spec)) {
      problems.push({ name: want.name, message: `Application ${want.name} has no router for a canary: set serviceMesh.enabled (Istio), or traffic.router gatewayAPI or replicas` });
      continue;
    }
    // What the Release will write into its spec must be a spec the API server and the operator take (a header or
    // mirror step on replica counts is not): refused now, before anything is claimed, rather than halfway through.
    const mesh = (raw['spec'] as { serviceMesh?: { canary?: object } } | undefined)?.serviceMesh;
    const started = parseApplication({ ...raw, spec: { ...raw['spec'] as object, serviceMesh: { ...mesh, canary: { ...mesh?.canary, enabled: true, canaryVersion: want.canaryVersion, ...(want.steps ? { steps: want.steps } : {}) } } } });
    if (!started.ok) {
      problems.push({ name: want.name, message: `Application ${want.name} cannot run this Release's canary: ${started.message}` });
      continue;
    }
    const own = app.status?.canary;
    const canary = app.spec.serviceMesh?.canary;
    const image = releaseCanaryImage(app, want.canaryVersion, want.image);
    if (owner !== input.release) {
      if (own?.phase && !isTerminal(own.phase)) {
        problems.push({ name: want.name, message: `Application ${want.name} already runs its own canary (${own.version ?? '?'}, ${own.phase}): finish or abort it first` });
        continue;
      }
      if (canary?.enabled) {
        problems.push({ name: want.name, message: `Application ${want.name} has its own canary enabled in its spec (${canary.canaryVersion ?? '?'}): disable it first` });
        continue;
      }
      if (own?.version === want.canaryVersion && own.image === image && own.phase !== RolloutPhase.Promoted) {
        problems.push({ name: want.name, message: `Application ${want.name} already ran canary ${want.canaryVersion} (${image}), which ended ${own.phase}; a canary does not run twice: use a new canaryVersion or image` });
        continue;
      }
    }
    found.push({ raw, app, image });
  }
  if (problems.length) return { ok: false, message: problems.map((p) => p.message).join('; '), refused: problems };
  for (const { raw } of found) {
    if (raw.metadata.annotations?.[key] === input.release) continue;
    // Compare-and-swap: a concurrent claim by another Release gives a 409 and the activity retries on fresh state.
    await kube.mergePatch(appRef(input.namespace, raw.metadata.name), {
      metadata: { resourceVersion: raw.metadata.resourceVersion, annotations: { [key]: input.release } },
    });
  }
  // What each stable Deployment runs now: the previous image as admission stored it, for a rollback to wait for.
  const running = await Promise.all(found.map(({ app }) => kube.get<ImagedDeployment>({ ...kinds.deployment, namespace: input.namespace, name: app.metadata.name })));
  return {
    ok: true,
    apps: found.map(({ app, image }, i) => {
      const stored = appImage(running[i]);
      return { name: app.metadata.name, image, previousImage: app.spec.image, ...(stored ? { previousDeploymentImage: stored } : {}) };
    }),
  };
}

/** Whether a Release exists and has not finished (a claim of a finished or deleted Release is stale). */
async function releaseRuns(kube: Kube, namespace: string, name: string): Promise<boolean> {
  const other = await kube.get<RawObject>(releaseRef(namespace, name));
  return Boolean(other && !terminalReleasePhases.has(other.status?.phase ?? ''));
}

/** Lets go of the Release's Applications (only those it still holds). */
export async function releaseClaims(deps: ActivityDeps, input: ReleaseClaimsInput): Promise<void> {
  const key = claimKey(input);
  await inCluster(deps, input, async (kube) => {
    for (const name of input.apps) {
      const raw = await kube.get<RawObject>(appRef(input.namespace, name));
      if (raw?.metadata.annotations?.[key] !== input.release) continue;
      await kube.mergePatch(appRef(input.namespace, name), { metadata: { annotations: { [key]: null } } }).catch(notFoundIsDone);
    }
  });
}

/** Starts an Application's canary by writing it into the Application's spec (its workflow runs the rollout). */
export async function startCanary(deps: ActivityDeps, input: StartCanaryInput): Promise<void> {
  await inCluster(deps, input, (kube) => startCanaryIn(kube, input));
}

async function startCanaryIn(kube: Kube, input: StartCanaryInput): Promise<void> {
  const raw = await kube.get<RawObject>(appRef(input.namespace, input.app));
  if (!raw || raw.metadata.deletionTimestamp) throw ApplicationFailure.nonRetryable(`Application ${input.app} was deleted`, FailureType.ApplicationGone);
  if (raw.metadata.annotations?.[claimKey(input)] !== input.release) {
    throw ApplicationFailure.nonRetryable(`Application ${input.app} is no longer claimed by Release ${input.release}`, FailureType.ReleaseConflict);
  }
  if (alreadyStarted(raw, input)) return;
  await kube.mergePatch(appRef(input.namespace, input.app), {
    metadata: { resourceVersion: raw.metadata.resourceVersion },
    spec: {
      serviceMesh: {
        canary: {
          enabled: true, canaryVersion: input.canaryVersion, image: input.image ?? null,
          ...(input.steps ? { steps: input.steps } : {}), ...(input.analysis ? { analysis: input.analysis } : {}),
        },
      },
    },
  });
}

/**
 * Whether this canary was already started: its spec runs it, or its rollout has begun or ended (status.canary names
 * this version and image). A retry of startCanary whose first try wrote the spec but was never heard of (the worker
 * died) must not write it again: the canary may have run and been switched off meanwhile, and writing it again
 * would switch it back on.
 */
function alreadyStarted(raw: RawObject, input: StartCanaryInput): boolean {
  const spec = (raw['spec'] as { serviceMesh?: { canary?: { enabled?: boolean; canaryVersion?: string; image?: string | null } } } | undefined)?.serviceMesh?.canary;
  if (spec?.enabled && spec.canaryVersion === input.canaryVersion && (spec.image ?? undefined) === input.image) return true;
  const ran = raw.status?.canary;
  if (ran?.version !== input.canaryVersion || !ran.phase) return false;
  const parsed = parseApplication(raw);
  return parsed.ok && ran.image === releaseCanaryImage(parsed.app, input.canaryVersion, input.image);
}

/** The image a Release's canary of `canaryVersion` runs on an Application: the Release's, else its image at that version. */
function releaseCanaryImage(app: Application, canaryVersion: string, image: string | undefined): string {
  return image ?? imageAtVersion(app.spec.image, canaryVersion);
}

/** Stops an Application's canary the Release started (switching it off in the spec aborts the rollout, which compensates). */
export async function stopCanary(deps: ActivityDeps, input: StopCanaryInput): Promise<void> {
  await inCluster(deps, input, (kube) => stopCanaryIn(kube, input));
}

async function stopCanaryIn(kube: Kube, input: StopCanaryInput): Promise<void> {
  const raw = await kube.get<RawObject & { spec?: { serviceMesh?: { canary?: { enabled?: boolean; canaryVersion?: string } } } }>(appRef(input.namespace, input.app));
  const canary = raw?.spec?.serviceMesh?.canary;
  if (!raw || !canary?.enabled || canary.canaryVersion !== input.canaryVersion) return;
  await kube.mergePatch(appRef(input.namespace, input.app), {
    metadata: { resourceVersion: raw.metadata.resourceVersion }, spec: { serviceMesh: { canary: { enabled: false } } },
  }).catch(notFoundIsDone);
}

/** Puts an Application's previous image back, unless someone changed its image since the Release promoted it. */
export async function revertApplication(deps: ActivityDeps, input: RevertApplicationInput): Promise<boolean> {
  return inCluster(deps, input, (kube) => revertIn(kube, input));
}

async function revertIn(kube: Kube, input: RevertApplicationInput): Promise<boolean> {
  const raw = await kube.get<RawObject & { spec?: { image?: string } }>(appRef(input.namespace, input.app));
  if (!raw || raw.metadata.deletionTimestamp || raw.spec?.image !== input.image) return false;
  const patched = await kube.mergePatch(appRef(input.namespace, input.app), {
    metadata: { resourceVersion: raw.metadata.resourceVersion }, spec: { image: input.previousImage, serviceMesh: { canary: { enabled: false } } },
  });
  if (!input.release) return true;
  // The Application says what happened to the rollout it last reported Promoted, and who undid it.
  const message = `Release ${input.release} put ${input.previousImage} back${input.why ? `: ${input.why}` : ''}`;
  const canary = raw.status?.canary;
  if (canary?.phase === RolloutPhase.Promoted && canary.image === input.image) {
    await kube.mergePatch(appRef(input.namespace, input.app), {
      status: { canary: { phase: RolloutPhase.RolledBack, reason: Reason.ReleaseReverted, message, weight: 0 } },
    }, 'status').catch(notFoundIsDone);
  }
  await recordEvent(kube, {
    namespace: input.namespace, name: input.app, uid: patched?.metadata.uid ?? raw.metadata.uid ?? '', type: 'Warning', reason: Reason.ReleaseReverted, message,
  });
  return true;
}

/** Reads each Application, its canary's status and its stable Deployment. */
export async function observeApplications(deps: ActivityDeps, input: ObserveApplicationsInput): Promise<AppObservation[]> {
  const seen = await inCluster(deps, input, (kube) => observeIn(kube, input));
  return input.cluster ? seen.map((o) => ({ ...o, cluster: input.cluster })) : seen;
}

function observeIn(kube: Kube, input: ObserveApplicationsInput): Promise<AppObservation[]> {
  return Promise.all(input.apps.map(async (name): Promise<AppObservation> => {
    const [raw, deployment] = await Promise.all([
      kube.get<RawObject>(appRef(input.namespace, name)),
      kube.get<ImagedDeployment>({ ...kinds.deployment, namespace: input.namespace, name }),
    ]);
    if (!raw || raw.metadata.deletionTimestamp) return { name, exists: false, running: false };
    const spec = raw['spec'] as { image?: string; serviceMesh?: { canary?: { enabled?: boolean } } } | undefined;
    const status = raw.status;
    const c = status?.canary;
    const deploymentImage = appImage(deployment);
    const rolledOut = deployment ? rolloutProgress(deployment) : undefined;
    return {
      name, exists: true,
      ...(spec?.image ? { specImage: spec.image } : {}),
      canary: {
        enabled: spec?.serviceMesh?.canary?.enabled === true,
        ...(c?.phase ? { phase: c.phase } : {}), ...(c?.version ? { version: c.version } : {}), ...(c?.image ? { image: c.image } : {}),
        ...(c?.message ? { message: c.message } : {}), ...(c?.reason ? { reason: c.reason } : {}),
      },
      running: status?.phase === Phase.Running && status.observedGeneration === raw.metadata.generation && Boolean(rolledOut?.current && rolledOut.available >= rolledOut.desired),
      ...(deploymentImage ? { deploymentImage } : {}),
    };
  }));
}

/**
 * Sends a control signal to the rollout of an Application in a member cluster, in the Temporal namespace its
 * operator runs in (the cluster's Secret names it). A rollout that is over or not started takes none: not an error.
 */
export async function signalCanary(deps: ActivityDeps, input: SignalCanaryInput): Promise<boolean> {
  const member = await memberCluster(deps, input.cluster);
  if (!member.temporalNamespace || !deps.signalWorkflow) return false;
  return deps.signalWorkflow(member.temporalNamespace, input.workflowId, input.signal, input.request);
}

/** Writes the Release's status (a merge patch of what changed) and records a transition as an Event on it. */
export async function writeReleaseStatus(deps: ActivityDeps, input: ReleaseStatusInput): Promise<void> {
  let uid: string | undefined;
  const workflowId = Context.current().info.workflowExecution?.workflowId ?? '';
  const temporalUI = workflowUiLink(deps, workflowId);
  try {
    const patched = await deps.kube.mergePatch(releaseRef(input.namespace, input.name), {
      status: { ...input.status, workflowId, ...(temporalUI ? { temporalUI } : {}), lastUpdateTime: new Date().toISOString() },
    }, 'status');
    uid = patched?.metadata.uid;
  } catch (err) {
    if (err instanceof KubeError && err.status === 404) return;
    throw err;
  }
  if (input.event) await recordEvent(deps.kube, { namespace: input.namespace, name: input.name, kind: RELEASE_KIND, ...(uid ? { uid } : {}), ...input.event });
}

/** Releases our finalizer from a Release being deleted (once its run is compensated). */
export async function finalizeRelease(deps: ActivityDeps, input: FinalizeReleaseInput): Promise<void> {
  const ref = releaseRef(input.namespace, input.name);
  const raw = await deps.kube.get<RawObject>(ref);
  if (!raw || raw.metadata.uid !== input.uid || !(raw.metadata.finalizers ?? []).includes(FINALIZER)) return;
  await deps.kube.mergePatch(ref, finalizerRelease(raw.metadata));
}

function notFoundIsDone(err: unknown): void {
  if (!(err instanceof KubeError && err.status === 404)) throw err;
}
