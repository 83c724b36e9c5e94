import { ApplicationFailure, Context } from '@temporalio/activity';
import { parseApplication, type AppliedChild, type Application } from '../api/application.ts';
import { API_VERSION, ConditionType, FIELD_MANAGER, FINALIZER, FailureType, KIND, childName, finalizerRelease, isTerminal, rolloutInFlight, LABEL_NAME, LABEL_VERSION, Reason, STABLE_VERSION } from '../api/constants.ts';
import { KubeError, type KubeObject } from '../kube/client.ts';
import type { ObjectRef } from '../kube/resources.ts';
import type { RecentObjects } from '../kube/recent.ts';
import { childKinds, childRef, finalizeOrder, kinds } from '../render/children.ts';
import { renderChildren } from '../render/index.ts';
import { degradedEvent, desiredStatus, needsPods, podIssue, statusChanged, withTransitionTimes, type CanaryStatusLike, type Condition, type ObservedPod, type Scaling, type Failure, type Observed, type ObservedDeployment, type ObservedRoute, type ObservedService } from '../reconcile/status.ts';
import { rolloutKey, rolloutPlan, rolloutSpecState, type RolloutSpecState } from '../reconcile/canary-plan.ts';
import { planNotifications, type PlanNotification } from '../reconcile/notify.ts';
import type { RolloutPlan } from '../reconcile/plan.ts';
import type { FinalizeInput, FinalizeResult, ReconcileInput, ReconcileResult } from './types.ts';
import { workflowUiLink, type ActivityDeps } from './deps.ts';
import { recordEvent } from './events.ts';
import { deleteIfOurs, orForget, read, refuseTakenName, retryOnConflict } from './objects.ts';

type RawApplication = KubeObject & {
  metadata: KubeObject['metadata'] & { deletionTimestamp?: string; finalizers?: string[] };
  status?: Record<string, unknown> & { observedGeneration?: number; conditions?: Condition[] };
};

const appRef = (namespace: string, name: string): ObjectRef => ({ apiVersion: API_VERSION, kind: KIND, namespace, name });

/** Heartbeats what the pass is at; a pass run as a local activity has no heartbeat (its workflow task times out instead). */
function progress(what: string): void {
  const ctx = Context.current();
  if (!ctx.info.isLocal) ctx.heartbeat(what);
}

const describeRef = (o: { kind: string; metadata?: { name: string }; name?: string }) => `${o.kind}/${o.metadata?.name ?? o.name ?? ''}`;

/**
 * One reconcile pass: read the Application (the copy in hand when it is current), validate it, make sure our
 * finalizer is on it, server-side apply every child in dependency order (dry-run first when a changed spec meets
 * children already applied; a first apply takes back what it created instead, so a rejected child never leaves a
 * half-applied app), remove children the spec no longer asks for, then derive status from what is observed and
 * write it only when it changed.
 */
export async function reconcileApplication(deps: ActivityDeps, input: ReconcileInput): Promise<ReconcileResult> {
  const started = performance.now();
  const result = await reconcilePass(deps, input).catch((err: unknown): ReconcileResult => {
    if (err instanceof Superseded) {
      if (input.acceptsSuperseded) return { outcome: 'superseded' };
      throw err.conflict;
    }
    throw err;
  });
  const phase = result.phase ?? (result.outcome === 'reconciled' ? 'Unknown' : result.outcome);
  deps.metrics?.reconciliations.inc({ name: input.name, namespace: input.namespace, phase });
  deps.metrics?.reconcileDuration.observe((performance.now() - started) / 1000);
  deps.log?.child({ namespace: input.namespace, name: input.name, workflowId: input.workflowId, generation: result.generation })
    .info({ outcome: result.outcome, phase: result.phase, applied: result.applied, removed: result.removed, statusWritten: result.statusWritten }, 'reconciled');
  return result;
}

async function reconcilePass(deps: ActivityDeps, input: ReconcileInput): Promise<ReconcileResult> {
  const raw = await read<RawApplication>(deps, appRef(input.namespace, input.name));
  if (!raw) return { outcome: 'gone' };
  const uid = raw.metadata.uid ?? '';
  if (raw.metadata.deletionTimestamp) {
    // Without our finalizer there is nothing left for us to clean up: the garbage collector has the children.
    if (!(raw.metadata.finalizers ?? []).includes(FINALIZER)) return { outcome: 'gone' };
    // Nothing to compensate: the children go and the finalizer is released now, with no status on the way out.
    if (input.finalize && !rolloutInFlight(raw.status)) {
      return { outcome: 'deleting', uid, finalized: await finalizeApplication(deps, { namespace: input.namespace, name: input.name, uid, ...(input.namespaceGoing ? { namespaceGoing: true } : {}) }) };
    }
    // Say so while a running canary is compensated and the children go (a namespace being deleted waits on this).
    await writeStatus(deps, raw, input, { deployment: null, service: null }, null, raw.status?.observedGeneration);
    return { outcome: 'deleting', uid };
  }

  return reconcileSpec(deps, input, raw).catch((err: unknown) => {
    // A verb the role lacks outside the apply (a prune's delete, a read of the Deployment, the finalizer's patch) is
    // said in status too; the apply's own is said there, with what a first apply took back.
    if (err instanceof KubeError && err.forbiddenByRole) return reportForbidden(deps, raw, input, err);
    throw err;
  });
}

/** A pass over an Application that is not being deleted: its children applied (or its status read) and its status written. */
async function reconcileSpec(deps: ActivityDeps, input: ReconcileInput, raw: RawApplication): Promise<ReconcileResult> {
  const { kube } = deps;
  const uid = raw.metadata.uid ?? '';
  const generation = raw.metadata.generation;
  const parsed = parseApplication(raw);
  if (!parsed.ok) {
    return reportFailure(deps, raw, input, { reason: Reason.InvalidSpec, message: parsed.message },
      ApplicationFailure.nonRetryable(`spec of ${input.namespace}/${input.name} (generation ${generation}) is invalid: ${parsed.message}`, FailureType.InvalidSpec));
  }
  const app = parsed.app;
  await ensureFinalizer(deps, raw);

  const applied: string[] = [];
  /** Children this pass created (the API server answered 201): what a refusal on a first pass takes back. */
  const created: KubeObject[] = [];
  const removed: string[] = [];
  const repaired: string[] = [];
  /** What server-side apply answered, by Kind/name: the children as they are now, so status needs no second read. */
  const answered = new Map<string, KubeObject>();
  let event: Promise<void> | undefined;
  if (input.apply) {
    const desired = renderChildren(app);
    // During a rollout the children the table marks rolloutOwned belong to the rollout workflow. A workflow that does
    // not know yet whether one is in flight (a fresh run) leaves them to the rollout status names.
    const active = input.rolloutActive ?? inFlight(app);
    const ours = (c: { child: { rolloutOwned: (a: Application) => boolean } }) => !(active && c.child.rolloutOwned(app));
    const apply = desired.apply.filter(ours).map((c) => c.object);
    const absent = desired.absent.filter(ours).map((c) => c.ref);
    const specChanged = raw.status?.observedGeneration !== generation;
    // A first pass has nothing applied yet to keep whole: instead of a dry-run ahead of every create, a refusal takes
    // back what this pass created, so it still ends with nothing of the spec applied (one write less per create).
    const firstPass = raw.status?.observedGeneration === undefined;
    // What a watch saw changed by someone else, as it is before the apply: the apply's answer tells a repair from a
    // no-op. Not for a PVC (the operator may not read PVCs: storage is immutable, nothing of it is ever read back), and
    // a read refused by a narrower role than the chart's only costs the Event.
    const drifted = new Map<string, string | null>();
    for (const obj of apply.filter((o) => o.kind !== kinds.pvc.kind && input.drifted?.includes(describeRef(o)))) {
      const ref = { apiVersion: obj.apiVersion, kind: obj.kind, namespace: obj.metadata.namespace ?? '', name: obj.metadata.name };
      const before = await kube.get<KubeObject>(ref).then((o) => (o ? contentOf(o) : null), (err: unknown) => {
        if (err instanceof KubeError && err.status === 403) return undefined;
        throw err;
      });
      if (before !== undefined) drifted.set(describeRef(obj), before);
    }
    try {
      // A spec the API server refused once is checked again before anything of it is applied: a pass that a drift or a
      // resync wakes must not apply the children ahead of the refused one.
      const refused = raw.status?.conditions?.some((c) => c.type === ConditionType.Degraded && c.status === 'True' && c.reason === Reason.ApplyFailed);
      if ((specChanged || refused) && !firstPass) await dryRunAfterFirst(deps, apply);
      // Before anything is applied: a child named after the Application (`<app>-preview`) that another holds.
      for (const obj of apply) await refuseTakenName(deps, obj, { name: app.metadata.name, uid });
      for (const obj of apply) {
        progress(describeRef(obj));
        const answer = await kube.apply(obj, { fieldManager: FIELD_MANAGER, onCreated: () => created.push(obj) });
        answered.set(describeRef(obj), answer);
        applied.push(describeRef(obj));
        const before = drifted.get(describeRef(obj));
        if (before !== undefined && before !== contentOf(answer)) repaired.push(describeRef(obj));
      }
    } catch (err) {
      if (err instanceof KubeError && err.namespaceTerminating) return namespaceGoing(deps, input, err);
      if (!(err instanceof KubeError && (err.permanent || err.forbiddenByRole))) throw err;
      const takenBack = firstPass ? await takeBack(deps, created, answered) : [];
      const more = takenBack.length ? ` (removed what this first apply had created: ${takenBack.join(', ')})` : '';
      if (err.forbiddenByRole) return reportForbidden(deps, raw, input, err, more);
      return reportFailure(deps, raw, input, { reason: Reason.ApplyFailed, message: `${err.message}${more}` },
        ApplicationFailure.nonRetryable(`the API server rejected a child of ${input.namespace}/${input.name}: ${err.message}`, FailureType.ApplyRejected));
    }
    if (specChanged) {
      // Recorded while status is derived and written (an Event is best effort and never fails the pass).
      event = recordEvent(kube, { namespace: input.namespace, name: input.name, uid, type: 'Normal', reason: Reason.ChildrenApplied, message: `generation ${generation}: applied ${applied.join(', ')}` });
    } else if (repaired.length) {
      const what = repaired.map((r) => `${r} (${drifted.get(r) === null ? 'deleted' : 'edited'})`).join(', ');
      event = recordEvent(kube, { namespace: input.namespace, name: input.name, uid, type: 'Warning', reason: Reason.DriftRepaired, message: `put back what was changed outside the Application: ${what}` });
      deps.log?.child({ namespace: input.namespace, name: input.name, workflowId: input.workflowId }).warn({ repaired }, 'put back children changed outside the Application');
    }
    // A first reconcile has nothing of ours to prune (saves a GET per absent kind on every create) unless an earlier
    // try of it applied something, and a later one reads back only what may exist: what the last pass recorded, or
    // after a rollout what the watch does not rule out, and what a try that could not record it applied (mayExist).
    for (const ref of absent.filter(mayExist(raw, deps.recent, firstPass, 'watch'))) {
      // Only what this Application controls: a same-named object someone else made is left alone.
      const existing = await kube.get<KubeObject & { metadata: { ownerReferences?: { uid: string; controller?: boolean }[] } }>(ref);
      if (!existing?.metadata.ownerReferences?.some((o) => o.uid === uid && o.controller)) continue;
      if (await kube.delete(ref, { uid: existing.metadata.uid ?? '' })) removed.push(describeRef(ref));
    }
  }

  const observed = await observe(deps, app, answered, input.podProblem ?? false);
  const observedGeneration = input.apply ? generation : raw.status?.observedGeneration;
  const plan = withNotifications(rolloutPlan(app), app, deps.notifyDefault);
  const rolloutSpec = rolloutSpecState(app, plan);
  const { status, written } = await writeStatus(deps, raw, input, observed, null, observedGeneration, scalingOf(app), rolloutSpec, input.apply ? appliedChildren(answered) : undefined);
  const warning = written ? degradedEvent(raw.status?.conditions, status.conditions, podIssue(observed.pods) ?? undefined) : null;
  // Keyed by its cause: a problem that outlives many passes is one Event (the API server refuses the same key twice).
  if (warning) await recordEvent(kube, { namespace: input.namespace, name: input.name, uid, type: 'Warning', ...warning });
  // A canary spec changed under a running rollout: said once per change (keyed by what the spec now says).
  const deferred = written && rolloutSpec.running && rolloutSpec.deferred ? status.conditions.find((c) => c.type === ConditionType.CanarySpecApplied) : undefined;
  if (deferred) await recordEvent(kube, { namespace: input.namespace, name: input.name, uid, type: 'Warning', reason: Reason.RolloutSpecDeferred, message: deferred.message, key: `spec-deferred:${plan?.specDigest ?? ''}` });
  await event;
  const last = app.status?.canary;
  return {
    ...(plan ? { canary: plan } : {}),
    ...(last?.version && last.image && last.phase ? {
      lastRollout: {
        key: rolloutKey(last.version, last.image), phase: last.phase, step: last.step ?? 0, weight: last.weight ?? 0,
        ...pick(last, ['startedAt', 'pauseEndsAt', 'pausedBy', 'abortedBy', 'reason', 'message']),
      },
    } : {}),
    outcome: 'reconciled', uid,
    ...(generation !== undefined ? { generation } : {}),
    ...(status.phase ? { phase: status.phase } : {}),
    message: status.conditions.find((c) => c.type === 'Ready')?.message ?? '',
    progressing: status.phase === 'Pending' || status.phase === 'Updating',
    applied, removed, statusWritten: written, ...(repaired.length ? { repaired } : {}),
  };
}

/** Deletes the children a refused first apply had created (each by its uid, so nothing made since goes too). */
async function takeBack(deps: ActivityDeps, created: KubeObject[], answered: ReadonlyMap<string, KubeObject>): Promise<string[]> {
  const removed: string[] = [];
  for (const obj of [...created].reverse()) {
    const uid = answered.get(describeRef(obj))?.metadata.uid;
    const ref = { apiVersion: obj.apiVersion, kind: obj.kind, namespace: obj.metadata.namespace ?? '', name: obj.metadata.name };
    if (uid && await deps.kube.delete(ref, { uid })) removed.push(describeRef(obj));
    deps.recent?.forget(ref);
  }
  return removed;
}

/**
 * An apply refused because the namespace is being deleted: its controller deletes the children before it comes to
 * the Applications, so what the watch took for drift is the namespace going. The Application, read again from the
 * API server, says what to do: gone, or being deleted (the finalizer's pass, at once instead of after the retries
 * of an apply that cannot succeed). One the namespace controller has not reached yet is retried as before.
 */
async function namespaceGoing(deps: ActivityDeps, input: ReconcileInput, err: KubeError): Promise<ReconcileResult> {
  const ref = appRef(input.namespace, input.name);
  deps.recent?.forget(ref);
  const fresh = await deps.kube.get<RawApplication>(ref);
  if (!fresh) return { outcome: 'gone' };
  if (fresh.metadata.deletionTimestamp) return reconcilePass(deps, input);
  throw err;
}

/** The children as the apply answered them, in a stable order: status.children. */
function appliedChildren(answered: Map<string, KubeObject>): AppliedChild[] {
  return [...answered.values()]
    .map((o) => ({ kind: o.kind, name: o.metadata.name, ...(o.metadata.generation !== undefined ? { generation: o.metadata.generation } : {}) }))
    .sort((a, b) => `${a.kind}/${a.name}`.localeCompare(`${b.kind}/${b.name}`));
}

/**
 * What a repair is judged on: the labels, annotations and spec, as JSON. Not the resourceVersion: an apply that
 * changes only who manages a field (once the HPA owns spec.replicas, say) writes the object without putting anything
 * back.
 */
function contentOf(o: KubeObject): string {
  const { labels, annotations } = o.metadata as { labels?: unknown; annotations?: unknown };
  return JSON.stringify([labels ?? null, annotations ?? null, (o as { spec?: unknown }).spec ?? null]);
}

/** Whether status names a rollout in flight of the canary the spec asks for. */
function inFlight(app: Application): boolean {
  const last = app.status?.canary;
  const plan = rolloutPlan(app);
  return Boolean(plan && last?.version && last.image && last.phase && !isTerminal(last.phase) && rolloutKey(last.version, last.image) === plan.key);
}

/** The named fields of `o` that are set. */
function pick<T extends object, K extends keyof T>(o: T, keys: K[]): Partial<Pick<T, K>> {
  return Object.fromEntries(keys.filter((k) => o[k] !== undefined).map((k) => [k, o[k]])) as Partial<Pick<T, K>>;
}

/**
 * A problem only the operator can see (an invalid spec, a child the API server refuses): say so in status and in an
 * Event, count and log it, then fail the activity for good so the workflow waits for the user to change something.
 */
async function reportFailure(deps: ActivityDeps, raw: RawApplication, input: ReconcileInput, failure: Failure, error: ApplicationFailure): Promise<never> {
  const { namespace, name } = input;
  const generation = raw.metadata.generation;
  const { written } = await writeStatus(deps, raw, input, { deployment: null, service: null }, failure, generation);
  if (written) await recordEvent(deps.kube, { namespace, name, uid: raw.metadata.uid ?? '', type: 'Warning', ...failure });
  deps.metrics?.reconciliations.inc({ name, namespace, phase: 'Failed' });
  deps.log?.child({ namespace, name, workflowId: input.workflowId, generation }).warn(failure, error.message);
  throw error;
}

/**
 * A verb the operator's role lacks: said in status like a refusal (the API server's words), but the pass is retried
 * with the activity's backoff rather than failed for good, since a grant changes nothing the operator watches.
 */
function reportForbidden(deps: ActivityDeps, raw: RawApplication, input: ReconcileInput, err: KubeError, more = ''): Promise<never> {
  return reportFailure(deps, raw, input, { reason: Reason.ApplyFailed, message: `${err.message}: the operator's role does not grant this; the pass is tried again until it does${more}` },
    ApplicationFailure.retryable(`the operator's role does not grant what ${input.namespace}/${input.name} needs: ${err.message}`, FailureType.Forbidden));
}

/**
 * Dry-runs every child but the first, all at once, before anything is applied: with the first child's real apply
 * next, a rejection anywhere still leaves nothing of this spec applied (a first apply the server rejects changes
 * nothing), at one dry-run less per change and one round trip for the rest. The first rejection in apply order is
 * the one reported.
 */
async function dryRunAfterFirst(deps: ActivityDeps, apply: KubeObject[]): Promise<void> {
  const results = await Promise.allSettled(apply.slice(1).map((obj) => deps.kube.apply(obj, { fieldManager: FIELD_MANAGER, dryRun: true })));
  const rejected = results.find((r) => r.status === 'rejected');
  if (rejected) throw rejected.reason;
}

/**
 * The Deployment and Service that status is derived from: as server-side apply answered them in this pass, else
 * the copy in hand when it is current, else read. Applied objects are what a read right after would return (the
 * controllers have not acted yet either way). The stable pods too while some are not available, or when a pod's
 * own event woke the pass to say what is wrong with it (`podProblem`).
 */
async function observe(deps: ActivityDeps, app: Application, answered: ReadonlyMap<string, KubeObject>, podProblem: boolean): Promise<Observed> {
  const ns = app.metadata.namespace ?? '';
  const name = childName(app);
  const child = <T>(k: { apiVersion: string; kind: string }): Promise<T | null> => {
    const applied = answered.get(describeRef({ kind: k.kind, name }));
    return applied ? Promise.resolve(applied as unknown as T) : read<KubeObject>(deps, { apiVersion: k.apiVersion, kind: k.kind, namespace: ns, name }) as Promise<T | null>;
  };
  // An HTTPRoute's Gateways say in its status whether they serve it (the watcher wakes a pass when they do). Best
  // effort, like the pods below: a route that cannot be read leaves the condition out, and the pass goes on.
  const routed = app.spec.traffic?.router === 'gatewayAPI';
  const [deployment, service, route] = await Promise.all([
    child<ObservedDeployment>(kinds.deployment), child<ObservedService>(kinds.service),
    routed ? child<ObservedRoute>(kinds.httpRoute).catch(() => undefined) : undefined,
  ]);
  const observed: Observed = { deployment, service, ...(route !== undefined ? { route } : {}) };
  if (!needsPods(deployment) && !(podProblem && deployment)) return observed;
  // Best effort: only to say why pods are not available; status without it is still right.
  const pods = await deps.kube.list<ObservedPod>({ apiVersion: 'v1', kind: 'Pod', namespace: ns }, `${LABEL_NAME}=${app.metadata.name},${LABEL_VERSION}=${STABLE_VERSION}`)
    .then((l) => l.items, () => undefined);
  return { ...observed, ...(pods ? { pods } : {}) };
}

/** Who sets the stable replica count: the spec, or the HPA when autoscaling is on. */
function scalingOf(app: Application): Scaling {
  const a = app.spec.autoscaling;
  return { specReplicas: app.spec.replicas, ...(a?.enabled ? { hpa: { min: a.minReplicas, max: a.maxReplicas ?? a.minReplicas } } : {}) };
}

/** Adds our finalizer once, with optimistic concurrency (a 409 is retried by the activity); keeps raw's resourceVersion current. */
async function ensureFinalizer(deps: ActivityDeps, raw: RawApplication): Promise<void> {
  const finalizers = raw.metadata.finalizers ?? [];
  if (finalizers.includes(FINALIZER)) return;
  const ref = appRef(raw.metadata.namespace ?? '', raw.metadata.name);
  const patched = await orForget(deps, ref, deps.kube.mergePatch<RawApplication>(ref, {
    metadata: { resourceVersion: raw.metadata.resourceVersion, finalizers: [...finalizers, FINALIZER] },
  }));
  if (patched) raw.metadata.resourceVersion = patched.metadata.resourceVersion;
}

/**
 * Writes status as derived from what the pass observed, over the Application as `raw` has it. A write that conflicts
 * (the rollout wrote its status, or someone labelled the Application, since `raw` was read) is derived again over
 * the Application as it is now, as long as it is still the one the pass read with the spec the pass applied: a
 * changed spec, a replaced object or a deletion writes nothing, and the pass ends superseded (Superseded).
 */
async function writeStatus(
  deps: ActivityDeps,
  raw: RawApplication,
  input: ReconcileInput,
  ...rest: StatusOf
): Promise<{ status: ReturnType<typeof desiredStatus>; written: boolean }> {
  let over = raw;
  let movedOn = false;
  try {
    return await retryOnConflict(() => writeStatusOver(deps, over, input, ...rest), async () => {
      const now = await read<RawApplication>(deps, appRef(input.namespace, input.name));
      movedOn = !now || now.metadata.uid !== raw.metadata.uid || now.metadata.generation !== raw.metadata.generation
        || now.metadata.deletionTimestamp !== raw.metadata.deletionTimestamp;
      if (!movedOn) over = now!;
      return !movedOn;
    });
  } catch (err) {
    if (movedOn) throw new Superseded(err);
    throw err;
  }
}

/**
 * The Application moved on while a pass ran (a new spec, a replaced object, a deletion): what the pass derived is of
 * the spec it read, and is not written. Not a failure: the pass ends `superseded` and its workflow passes again over
 * the Application as it is now (a promote's spec change during a pass used to fail it with a 409, logged as a
 * failed activity and retried after a backoff).
 */
class Superseded extends Error {
  /** The 409 that told: thrown as it is to a workflow of an earlier release (it retries the pass). */
  readonly conflict: unknown;

  constructor(conflict: unknown) {
    super('the Application changed while the pass ran');
    this.name = 'Superseded';
    this.conflict = conflict;
  }
}

type StatusOf = [
  observed: Observed,
  failure: Failure | null,
  observedGeneration: number | undefined,
  scaling?: Scaling,
  rolloutSpec?: RolloutSpecState,
  /** What this pass applied; a pass that applied nothing keeps what status says. */
  applied?: AppliedChild[],
];

async function writeStatusOver(
  deps: ActivityDeps,
  raw: RawApplication,
  input: ReconcileInput,
  ...[observed, failure, observedGeneration, scaling, rolloutSpec, applied]: StatusOf
): Promise<{ status: ReturnType<typeof desiredStatus>; written: boolean }> {
  const temporalUI = workflowUiLink(deps, input.workflowId);
  const canary = raw.status?.['canary'] as CanaryStatusLike | undefined;
  const children = applied ?? (raw.status?.['children'] as AppliedChild[] | undefined);
  const next = desiredStatus(raw, observed, failure, {
    workflowId: input.workflowId, observedGeneration, ...(temporalUI ? { temporalUI } : {}), ...(canary ? { canary } : {}), ...(scaling ? { scaling } : {}),
    ...(rolloutSpec ? { rolloutSpec } : {}), ...(children ? { children } : {}),
  });
  const { canary: _canary, ...current } = raw.status ?? {};
  if (!statusChanged(current, next)) return { status: next, written: false };
  const now = new Date().toISOString();
  const conditions = withTransitionTimes(next.conditions, raw.status?.conditions, now);
  // A merge patch keeps keys it does not mention: clear the ones we no longer write (e.g. the UI link when unset).
  const stale = Object.fromEntries(Object.keys(current).filter((k) => !(k in next) && k !== 'lastUpdateTime').map((k) => [k, null]));
  // Compare-and-swap: the rollout writes status.canary and its condition too; a 409 derives it again (writeStatus).
  const ref = appRef(input.namespace, input.name);
  await orForget(deps, ref, deps.kube.mergePatch<KubeObject>(ref, {
    metadata: { resourceVersion: raw.metadata.resourceVersion }, status: { ...stale, ...next, conditions, lastUpdateTime: now },
  }, 'status'));
  return { status: next, written: true };
}

/**
 * Whether a child of this Application may exist: one its last pass recorded as applied (status.children). A pass can
 * also apply a child and fail before its status write records it (a conflict with the user's next change, a crash):
 * what this process wrote or its watch sees counts too, and where nothing follows a watched kind (a worker without a
 * watcher) a read tells, except on a first pass (`first`: nothing recorded yet), where only this process's own writes
 * do. When status cannot tell (a rollout ran: its canary, Services and routes are not recorded; or nothing is
 * recorded, an Application last reconciled before status.children), finalizing takes any child as possible, and a
 * pass (`unrecorded` 'watch') any but one the watch rules out: a listed watch of its kind that does not see it, in
 * a process that did not write it (every pass during and after a rollout read each absent kind before: six GETs a
 * pass for a mesh app, three of them Services). A child another process created that the watch has not delivered
 * yet waits for the next pass; a rollout's own are not pruned while it runs.
 */
function mayExist(raw: RawApplication | null | undefined, recent: RecentObjects | undefined, first = false, unrecorded: 'all' | 'watch' = 'all'): (ref: ObjectRef) => boolean {
  const recorded = raw?.status?.['canary'] ? undefined : raw?.status?.['children'] as AppliedChild[] | undefined;
  if (!first && !Array.isArray(recorded)) return unrecorded === 'watch' ? (ref) => recent?.mayExist(ref) ?? true : () => true;
  return (ref) => (!first && recorded!.some((c) => c.kind === ref.kind && c.name === ref.name))
    || (recent?.mayExist(ref) ?? (!first && childKinds.some((k) => k.watched && k.kind === ref.kind && k.apiVersion === ref.apiVersion)));
}

/**
 * Deletes the children this Application may have (mayExist; "not found" is done), then releases our finalizer.
 * Anything else it owns, the garbage collector takes by its owner reference. In a namespace being deleted it
 * deletes nothing: the namespace controller does.
 */
export async function finalizeApplication(deps: ActivityDeps, input: FinalizeInput): Promise<FinalizeResult> {
  const { kube } = deps;
  const ns = input.namespace;
  const ref = appRef(ns, input.name);
  const raw = await read<RawApplication>(deps, ref);
  const exists = mayExist(raw, deps.recent);
  const removed: string[] = [];
  // In a namespace being deleted the namespace controller deletes every child (it began with their pods); deleting
  // them too would only race it, one request each.
  for (const child of input.namespaceGoing ? [] : finalizeOrder) {
    const target = childRef(child, ns, input.name);
    if (!exists(target)) continue;
    progress(describeRef(target));
    try {
      if (await deleteIfOurs(deps, target, { name: input.name, uid: input.uid })) removed.push(describeRef(target));
    } catch (err) {
      // A cluster without Istio has no such resource type: nothing to delete.
      if (!(err instanceof KubeError && err.status === 404)) throw err;
    }
  }
  if (!raw || raw.metadata.uid !== input.uid || !(raw.metadata.finalizers ?? []).includes(FINALIZER)) {
    return { removed, finalizerReleased: false };
  }
  await orForget(deps, ref, kube.mergePatch(ref, finalizerRelease(raw.metadata)));
  return { removed, finalizerReleased: true, ...(input.namespaceGoing ? { leftToNamespace: true } : {}) };
}

/** The plan with where its notifications go: the spec's receivers and the operator's default. */
function withNotifications(plan: RolloutPlan | undefined, app: Application, operatorDefault: PlanNotification | undefined): RolloutPlan | undefined {
  const notifications = plan && planNotifications(app.spec.notifications, operatorDefault);
  return plan && notifications ? { ...plan, notifications } : plan;
}
