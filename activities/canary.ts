import { ApplicationFailure, Context, heartbeat } from '@temporalio/activity';
import { parseApplication, rolloutRouterOf, type Application } from '../api/application.ts';
import { runsImage } from '../api/image.ts';
import type { V1Deployment } from '@kubernetes/client-node';
import { API_VERSION, FIELD_MANAGER, FailureType, KIND, LABEL_NAME, LABEL_VERSION, canaryName, childName, isTerminal, type RolloutRouterName } from '../api/constants.ts';
import { KubeError, type KubeObject } from '../kube/client.ts';
import { ourNewestWrite, weOwn, type ManagedFieldsEntry } from '../kube/managed-fields.ts';
import type { ObjectRef } from '../kube/resources.ts';
import { kinds } from '../render/children.ts';
import { renderCanaryDeployment, renderDeployment } from '../render/deployment.ts';
import { appImage, podIssue, rolloutProgress, withCanaryCondition, withTransitionTimes, type Condition, type ImagedDeployment, type ObservedPod } from '../reconcile/status.ts';
import { reachesCanary, routable, sameRoute, type CanaryRoute, type RouteWeights } from '../routing/route.ts';
import type { RolloutPlan } from '../reconcile/plan.ts';
import { routerFor } from './routers/router.ts';
import type { CanaryDrift, CanaryHealth, CanaryObservation, CanaryRef, CanaryStatusInput, CloseCanaryStatusInput, ObserveInput, PlanInput, RemoveCanaryInput, RouteInput, StableRolledOutInput } from './types.ts';
import { rolloutKey } from '../reconcile/canary-plan.ts';
import type { ActivityDeps } from './deps.ts';
import { recordEvent } from './events.ts';
import { deleteIfOurs, orForget, read, refuseTaken, retryOnConflict } from './objects.ts';

/** The canary Deployment as a gate check reads it: its status, and what the rollout applied (size, images). */

const appRef = (c: CanaryRef): ObjectRef => ({ apiVersion: API_VERSION, kind: KIND, namespace: c.namespace, name: c.name });
const named = (c: CanaryRef) => ({ metadata: { name: c.name } });
const childRef = (c: CanaryRef, k: { apiVersion: string; kind: string }, name = childName(named(c))): ObjectRef =>
  ({ apiVersion: k.apiVersion, kind: k.kind, namespace: c.namespace, name });

async function readApp(deps: ActivityDeps, c: CanaryRef): Promise<Application> {
  const raw = await read(deps, appRef(c));
  if (!raw) throw ApplicationFailure.nonRetryable(`Application ${c.namespace}/${c.name} no longer exists`, FailureType.ApplicationGone);
  const parsed = parseApplication(raw);
  if (!parsed.ok) throw ApplicationFailure.nonRetryable(`Application ${c.namespace}/${c.name} is invalid: ${parsed.message}`, FailureType.InvalidSpec);
  return parsed.app;
}

/** The app as the plan sees it: the renderers take the canary's version and image from the spec, the plan fixes them. */
function withPlan(app: Application, plan: RolloutPlan): Application {
  return withCanary(app, { canaryVersion: plan.version, image: plan.image });
}

/** The app with the rollout's canary version, for the routers (the spec may have moved on to another canary). */
function withVersion(app: Application, version: string): Application {
  return withCanary(app, { canaryVersion: version });
}

function withCanary(app: Application, canary: { canaryVersion: string; image?: string }): Application {
  const mesh = app.spec.serviceMesh;
  return {
    ...app,
    spec: {
      ...app.spec,
      serviceMesh: {
        enabled: mesh?.enabled ?? false,
        trafficPolicy: mesh?.trafficPolicy ?? { connectionTimeout: '10s', loadBalancer: 'ROUND_ROBIN' },
        ...mesh,
        canary: { ...mesh!.canary!, enabled: true, ...canary },
      },
    },
  };
}

/**
 * Creates the canary Deployment and what its router needs to route to it (Istio's canary subset, the Gateway API's
 * canary Service), idempotently; for a new canary also its route at 0%: the routes the Application's last pass
 * applied have no canary yet, and the first gate check must find what the rollout set.
 */
export async function prepareCanary(deps: ActivityDeps, input: PlanInput): Promise<void> {
  const app = withPlan(await readApp(deps, input), input.plan);
  const canary = renderCanaryDeployment(app) as KubeObject;
  await refuseTaken(deps, app.metadata, canary);
  const router = routerFor(app, input.plan.router);
  try {
    // The router first: what routes to the canary must say 0% before its pods exist (a Service's selector would
    // otherwise take them the moment they are ready).
    await router.prepare(deps, app, input.route);
    heartbeat('router prepared');
    await deps.kube.apply(canary, { fieldManager: FIELD_MANAGER });
  } catch (err) {
    if (!(err instanceof KubeError && err.permanent)) throw err;
    // Refused for what it says (invalid, or denied by admission: a policy, a quota): the same apply is refused until
    // the spec or the policy changes, so the rollout ends now with the API server's words, not at its deadline. What
    // the router prepared goes first (the rollout registers its undo only once the canary exists); should that
    // fail, the activity is tried again, refusal and all.
    await router.remove(deps, app, { keepTarget: false });
    throw ApplicationFailure.nonRetryable(`the API server refused the ${input.plan.strategy === 'blueGreen' ? 'preview' : 'canary'}: ${err.message}`, FailureType.ApplyRejected);
  }
}

/**
 * What a gate check needs, read in one go: the canary's ready replicas and restarts, what its router's objects
 * really route (compared with what the rollout last set: a hand edit shows here), and whether what the canary is
 * routed to still exists. An Application that no longer parses is judged on its pods alone.
 */
export async function observeCanary(deps: ActivityDeps, input: ObserveInput): Promise<CanaryObservation> {
  const [{ health, deployment }, raw] = await Promise.all([canaryHealth(deps, input, 'in hand'), read(deps, appRef(input))]);
  const parsed = raw ? parseApplication(raw) : null;
  if (!parsed?.ok) return { health, routed: null, asIntended: true, target: true };
  const app = withVersion(parsed.app, input.version);
  const seen = await routerFor(app, input.router).observe(deps, app, input.route);
  const want = renderCanaryDeployment(input.image ? withCanary(app, { canaryVersion: input.version, image: input.image }) : app);
  let drift = deployment ? canaryDrift(deployment, want, input.router) : undefined;
  if (drift) {
    // A difference is drift only when someone changed it after the rollout's apply (kubectl set image, kubectl
    // scale): one admission put in during that apply (a registry mirror, a digest or a minimum size set by policy)
    // is what the apply made, and putting it back would never end. The copy in hand has no managedFields: read it whole.
    const fresh = await deps.kube.get<WrittenDeployment>(childRef(input, kinds.deployment, canaryName(named(input))));
    drift = fresh ? driftByOthers(fresh, want, input.router) : undefined;
  }
  return { health, ...seen, ...(drift ? { drift } : {}) };
}

/**
 * What a hand edit changed of what the rollout applies to the canary Deployment (`kubectl set image`, `kubectl
 * scale`; its image first, the graver), in words; undefined when nothing did. One running another image would be
 * judged in place of the one a promote rolls out, and one scaled to nothing would fail its gates and be rolled back
 * for an edit. The replicas router sizes the canary with the weight itself (its routes read back say so), so its
 * size is not judged here.
 */
export function canaryDrift(d: ImagedDeployment, want: V1Deployment, router: RolloutRouterName | undefined): CanaryDrift | undefined {
  const running = new Map((d.spec?.template?.spec?.containers ?? []).map((c) => [c.name, c.image]));
  for (const c of want.spec?.template.spec?.containers ?? []) {
    const image = running.get(c.name);
    if (image !== c.image) return { what: 'image', message: `the canary Deployment's container ${c.name} runs ${image ?? 'nothing'}, not the rollout's ${c.image ?? 'nothing'}` };
  }
  return sizeDrift(d, want, router);
}

/** canaryDrift of the canary's size alone. */
function sizeDrift(d: ImagedDeployment, want: V1Deployment, router: RolloutRouterName | undefined): CanaryDrift | undefined {
  const replicas = d.spec?.replicas ?? 1;
  const wanted = want.spec?.replicas ?? 1;
  if (router !== 'replicas' && replicas !== wanted) return { what: 'replicas', message: `the canary Deployment has ${replicas} replicas, not the rollout's ${wanted}` };
  return undefined;
}

/** The canary Deployment as the API server has it, with who wrote it. */
type WrittenDeployment = ImagedDeployment & { metadata: { managedFields?: ManagedFieldsEntry[] } };

/**
 * canaryDrift, but none while the operator's own write is the newest: what differs then was put in during that write
 * (admission: a registry mirror, a pinned digest, a minimum replica count), not changed after it. Except a size set
 * through `/scale` (kubectl scale), which leaves the operator's write the newest but takes spec.replicas from it.
 */
export function driftByOthers(d: WrittenDeployment, want: V1Deployment, router: RolloutRouterName | undefined): CanaryDrift | undefined {
  const entries = d.metadata.managedFields;
  if (ourNewestWrite(entries) === undefined) return canaryDrift(d, want, router);
  return weOwn(entries, ['spec', 'replicas']) ? undefined : sizeDrift(d, want, router);
}

/**
 * Ready replicas and container restarts of the canary's pods, and what keeps one from running (the pods go with a
 * rollback: the verdict that names the problem is what is left of it). The canary Deployment as the watch last
 * delivered it when that copy is current and all its replicas are ready (`in hand`: a gate check, every interval; the
 * watch wakes the rollout when its status changes), or from the API server (`fresh`: right before traffic is routed
 * to the canary; and whenever the copy in hand says a replica is not ready).
 */
async function canaryHealth(deps: ActivityDeps, input: CanaryRef & { version: string }, from: 'in hand' | 'fresh'): Promise<{ health: CanaryHealth; deployment: ImagedDeployment | null }> {
  const ref = childRef(input, kinds.deployment, canaryName(named(input)));
  const kept = from === 'in hand' ? await read<KubeObject & ImagedDeployment>(deps, ref) : undefined;
  // A copy in hand is as new as the watch's last delivery, and a watch can lag behind a loaded API server: a copy
  // that says fewer replicas are ready than wanted is asked again, so no failure is counted on the word of a late watch.
  // (null: read() already asked the API server, which has no such Deployment.)
  const believed = kept === null || (kept !== undefined && (kept.status?.readyReplicas ?? 0) >= (kept.spec?.replicas ?? 0));
  const d = believed ? kept : await deps.kube.get<ImagedDeployment>(ref);
  if (!d) return { health: { exists: false, readyReplicas: 0, desiredReplicas: 0, restarts: 0 }, deployment: null };
  const pods = await deps.kube.list<ObservedPod>(
    { apiVersion: 'v1', kind: 'Pod', namespace: input.namespace },
    `${LABEL_NAME}=${input.name},${LABEL_VERSION}=${input.version}`,
  );
  const restarts = pods.items.reduce((n, p) => n + (p.status?.containerStatuses ?? []).reduce((m, c) => m + (c.restartCount ?? 0), 0), 0);
  const issue = podIssue(pods.items);
  const health = {
    exists: true, readyReplicas: d.status?.readyReplicas ?? 0, desiredReplicas: d.spec?.replicas ?? 0, restarts,
    ...(issue ? { issue: { reason: issue.reason, message: issue.message } } : {}),
  };
  return { health, deployment: d };
}

/**
 * Routes to the canary what `route` says (a weight, a header route, a mirror) through the Application's router, and
 * verifies it by reading the routes back. Refuses (non-retryable CanaryNotReady) to send any request to a canary
 * without a ready replica.
 */
export async function setCanaryRoute(deps: ActivityDeps, input: RouteInput): Promise<RouteWeights> {
  const { route } = input;
  if (reachesCanary(route)) {
    // Read from the API server: no request goes to a canary on the word of a copy a watch may not have updated yet.
    const { health } = await canaryHealth(deps, input, 'fresh');
    if (!sameRoute(routable(route, health.readyReplicas), route)) {
      throw ApplicationFailure.nonRetryable(`refusing to route to a canary with 0 ready replicas (${describeRoute(route)})`, FailureType.CanaryNotReady);
    }
  }
  const app = withVersion(await readApp(deps, input), input.version);
  try {
    return await routerFor(app, input.router).setRoute(deps, app, route);
  } catch (err) {
    if (!(err instanceof KubeError && err.permanent)) throw err;
    // Refused for what it says (a header value the route's schema refuses, a policy): the same write is refused until
    // the spec or the policy changes, so the rollout rolls back now with the API server's words, not at its deadline
    // (a rollout retrying this write looks at neither its gates nor its deadline).
    throw ApplicationFailure.nonRetryable(`the API server refused the route (${describeRoute(route)}): ${err.message}`, FailureType.ApplyRejected);
  }
}

/** A route in words, for messages. */
function describeRoute(r: CanaryRoute): string {
  return [`${r.weight}%`, r.headers?.length ? 'a header route' : '', r.mirror ? `a ${r.mirror}% mirror` : ''].filter(Boolean).join(', ');
}

/**
 * Undo of the whole canary: all traffic to stable through the Application's router (verified), what the router
 * added for the canary removed, the canary Deployment deleted. Routes that no longer exist route nothing and are
 * not re-created; in a namespace being deleted, nothing can be created and everything goes anyway, so there the
 * undo is done. `routeOnly`: the traffic alone, the first half of a drained undo (the rollout waits, then calls again).
 */
export async function removeCanary(deps: ActivityDeps, input: RemoveCanaryInput): Promise<void> {
  try {
    const raw = await deps.kube.get(appRef(input));
    const parsed = raw ? parseApplication(raw) : null;
    if (parsed?.ok && (input.router ?? rolloutRouterOf(parsed.app.spec))) {
      const app = input.version ? withVersion(parsed.app, input.version) : parsed.app;
      await routerFor(app, input.router).remove(deps, app, { keepTarget: input.routeOnly === true });
    }
    if (input.routeOnly) return;
    // Only this Application's: the name may be another Application's own Deployment (web-canary's).
    await deleteIfOurs(deps, childRef(input, kinds.deployment, canaryName(named(input))), { name: input.name, uid: raw?.metadata.uid });
  } catch (err) {
    if (err instanceof KubeError && err.namespaceTerminating) return;
    throw err;
  }
}

/**
 * Promote, first half: the spec's image becomes the canary's (so no later reconcile reverts it), and the stable
 * Deployment runs it. Returns the image the API server stored, which admission may have rewritten (a pinned digest,
 * a registry mirror): what stableRolledOut then waits for.
 */
export async function promoteStable(deps: ActivityDeps, input: PlanInput): Promise<{ image?: string }> {
  const app = await readApp(deps, input);
  if (app.spec.serviceMesh?.canary?.canaryVersion !== input.plan.version) {
    throw ApplicationFailure.nonRetryable(`the spec's canary changed to ${app.spec.serviceMesh?.canary?.canaryVersion ?? 'none'} during the rollout of ${input.plan.version}`, FailureType.Superseded);
  }
  let current = app;
  if (app.spec.image !== input.plan.image) {
    // resourceVersion makes this a compare-and-swap: a concurrent user edit gives a 409 and the activity retries on fresh state.
    const patched = await orForget(deps, appRef(input), deps.kube.mergePatch(appRef(input), { metadata: { resourceVersion: app.metadata.resourceVersion }, spec: { image: input.plan.image } }));
    const reparsed = parseApplication(patched);
    if (reparsed.ok) current = reparsed.app;
  }
  const stored = await deps.kube.apply<KubeObject & ImagedDeployment>(renderDeployment(current) as KubeObject, { fieldManager: FIELD_MANAGER });
  const image = appImage(stored);
  return image === undefined ? {} : { image };
}

/**
 * Whether the stable Deployment has rolled out `image` (or `stored`, what the promote's apply was admitted as, or
 * `image` pinned to a digest) and is fully available.
 */
export async function stableRolledOut(deps: ActivityDeps, input: StableRolledOutInput): Promise<{ done: boolean; message: string }> {
  // The copy in hand when current: the watch that delivers its status is what wakes the promote to look again.
  const d = await read<KubeObject & ImagedDeployment>(deps, childRef(input, kinds.deployment));
  if (!d) return { done: false, message: 'the stable Deployment does not exist' };
  const image = appImage(d);
  const p = rolloutProgress(d);
  return {
    done: (runsImage(image, input.image) || (input.stored !== undefined && image === input.stored)) && p.current && p.available >= p.desired,
    message: `stable runs ${image ?? '?'}: ${p.updated}/${p.desired} updated, ${p.available} available`,
  };
}

/** Compensation for promoteStable: put the stable image back, unless someone changed the spec since or the Application is going. */
export async function restoreStableImage(deps: ActivityDeps, input: PlanInput): Promise<void> {
  const raw = await deps.kube.get<{ metadata: { resourceVersion?: string; deletionTimestamp?: string }; spec?: { image?: string } }>(appRef(input));
  if (!raw || raw.metadata.deletionTimestamp || raw.spec?.image !== input.plan.image) return;
  await deps.kube.mergePatch(appRef(input), { metadata: { resourceVersion: raw.metadata.resourceVersion }, spec: { image: input.plan.stableImage } });
}

/** Promote, last step: the spec's canary is switched off so the finished rollout is what the spec says. */
export async function finishCanarySpec(deps: ActivityDeps, input: PlanInput): Promise<void> {
  // Read from the API server each try: a status write in between conflicts, and the spec is judged again.
  await retryOnConflict(async () => {
    const raw = await deps.kube.get<{ metadata: { resourceVersion?: string }; spec?: { serviceMesh?: { canary?: { enabled?: boolean; canaryVersion?: string } } } }>(appRef(input));
    const canary = raw?.spec?.serviceMesh?.canary;
    if (!raw || !canary?.enabled || canary.canaryVersion !== input.plan.version) return;
    await deps.kube.mergePatch(appRef(input), { metadata: { resourceVersion: raw.metadata.resourceVersion }, spec: { serviceMesh: { canary: { enabled: false } } } });
  });
}

/**
 * Writes status.canary and the CanaryProgressing condition (only those parts of status), compare-and-swap against
 * the reconciler's status writes, and records the transition as an Event.
 */
export async function writeCanaryStatus(deps: ActivityDeps, input: CanaryStatusInput): Promise<void> {
  const { pauseEndsAt, pausedBy, abortedBy, reason, routing, analysis, checks, ...rest } = input.status;
  // A write that crosses the pass's (both write status) is written again over the Application as it is now.
  const raw = await retryOnConflict(async () => {
    const raw = await read<KubeObject & { status?: { observedGeneration?: number; conditions?: Condition[] } }>(deps, appRef(input));
    // The Application is gone (deleted mid-rollout): nothing left to report on.
    if (!raw) return null;
    const previous = raw.status?.conditions ?? [];
    const conditions = withTransitionTimes(withCanaryCondition(previous, input.status, raw.status?.observedGeneration), previous, new Date().toISOString());
    try {
      // A merge patch with null clears fields of an earlier state (e.g. the pause end once resumed).
      await orForget(deps, appRef(input), deps.kube.mergePatch(appRef(input), {
        metadata: { resourceVersion: raw.metadata.resourceVersion },
        status: {
          canary: { ...rest, pauseEndsAt: pauseEndsAt ?? null, pausedBy: pausedBy ?? null, abortedBy: abortedBy ?? null, reason: reason ?? null, routing: routing ?? null, analysis: analysis ?? null, checks: checks ?? null },
          conditions,
        },
      }, 'status'));
    } catch (err) {
      if (err instanceof KubeError && err.status === 404) return null;
      throw err;
    }
    return raw;
  });
  if (!raw) return;
  const uid = raw.metadata.uid;
  // kubectl describe finds events by the object's uid.
  if (input.event) await recordEvent(deps.kube, { namespace: input.namespace, name: input.name, ...(uid ? { uid } : {}), ...input.event });
  const { phase } = input.status;
  deps.log?.child({ namespace: input.namespace, name: input.name, workflowId: activityWorkflowId(), canary: input.status.version })
    .info({ phase, step: input.status.step, weight: input.status.weight }, input.status.message);
  if (isTerminal(phase)) {
    deps.metrics?.rollouts.inc({ outcome: phase });
    deps.metrics?.rolloutDuration.observe({ outcome: phase }, (Date.now() - Date.parse(input.status.startedAt)) / 1000);
  }
}

/**
 * Writes the end of a rollout whose own workflow could not (terminated, timed out, failed, lost with Temporal's
 * state): status.canary turns terminal with the reason and message, and a Warning Event says so. Only while status
 * still describes that rollout in flight, so a late or repeated call changes nothing.
 */
export async function closeCanaryStatus(deps: ActivityDeps, input: CloseCanaryStatusInput): Promise<boolean> {
  const raw = await deps.kube.get<{ metadata: { uid?: string; resourceVersion?: string }; status?: { observedGeneration?: number; conditions?: Condition[]; canary?: CanaryStatusInput['status'] } }>(appRef(input));
  const canary = raw?.status?.canary;
  if (!raw || !canary?.version || !canary.image || isTerminal(canary.phase) || (input.key && rolloutKey(canary.version, canary.image) !== input.key)) return false;
  const status = { ...canary, phase: input.phase, reason: input.reason, message: input.message, weight: 0 };
  const previous = raw.status?.conditions ?? [];
  const conditions = withTransitionTimes(withCanaryCondition(previous, status, raw.status?.observedGeneration), previous, new Date().toISOString());
  try {
    await deps.kube.mergePatch(appRef(input), {
      metadata: { resourceVersion: raw.metadata.resourceVersion },
      status: { canary: { phase: input.phase, reason: input.reason, message: input.message, weight: 0, pauseEndsAt: null, pausedBy: null, routing: null }, conditions },
    }, 'status');
  } catch (err) {
    if (err instanceof KubeError && err.status === 404) return false;
    throw err;
  }
  await recordEvent(deps.kube, {
    namespace: input.namespace, name: input.name, ...(raw.metadata.uid ? { uid: raw.metadata.uid } : {}),
    type: 'Warning', reason: input.reason, message: `canary ${canary.version}: ${input.message}`,
  });
  deps.log?.child({ namespace: input.namespace, name: input.name, canary: canary.version }).warn({ phase: input.phase, reason: input.reason }, input.message);
  deps.metrics?.rollouts.inc({ outcome: input.phase });
  return true;
}

function activityWorkflowId(): string | undefined {
  try {
    return Context.current().info.workflowExecution?.workflowId;
  } catch {
    return undefined;
  }
}
