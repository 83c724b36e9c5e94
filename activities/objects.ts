// How activities read the objects they act on: the copy in hand when it is current (kube/recent.ts: at least as
// new as what the watcher's watch last delivered: that delivery, or a later answer of this process), else a GET.
// Writes that depend on what was read stay compare-and-swap on its resourceVersion, so a copy the watch has not
// caught up with costs a 409 and a retry that reads from the API server (orForget), never a lost update.
import { ApplicationFailure } from '@temporalio/activity';
import { API_VERSION, FailureType, KIND } from '../api/constants.ts';
import { KubeError, type KubeObject } from '../kube/client.ts';
import type { ObjectRef } from '../kube/resources.ts';
import { kinds } from '../render/children.ts';
import type { ActivityDeps } from './deps.ts';

/**
 * The kinds kept in hand (the operator's RecentObjects keeps these): the Application, the children its status is
 * derived from, and those a rollout's gate checks observe (its routes). The process keeps its own writes' answers
 * of these (Kube.onWrite) and what its reads and the watcher's watches brought.
 */
export const keptKinds: ReadonlySet<string> = new Set([
  KIND, kinds.deployment.kind, kinds.service.kind, kinds.virtualService.kind, kinds.destinationRule.kind, kinds.httpRoute.kind,
]);

/**
 * An object as it is now: the one in hand when it is current, else read from the API server (and kept). An
 * Application the watch has seen deleted is gone without a read (a pass woken by its deletion, a thousand of them
 * when a namespace goes).
 */
export async function read<T extends KubeObject>(deps: ActivityDeps, ref: ObjectRef): Promise<T | null> {
  const kept = deps.recent?.current<T>(ref);
  if (kept) return kept;
  if (ref.kind === KIND && ref.apiVersion === API_VERSION && deps.recent?.mayExist(ref) === false) return null;
  const got = await deps.kube.get<T>(ref);
  if (got && deps.recent?.keeps(ref.kind)) deps.recent.remember(got);
  return got;
}

/** A write that conflicted leaves nothing in hand of its object: the retry reads it from the API server. */
export async function orForget<T>(deps: ActivityDeps, ref: ObjectRef, write: Promise<T>): Promise<T> {
  try {
    return await write;
  } catch (err) {
    if (err instanceof KubeError && err.status === 409) deps.recent?.forget(ref);
    throw err;
  }
}

/**
 * Runs a compare-and-swap write again when it conflicts, `attempts` times at most. After a 409 nothing of the object
 * is in hand (orForget), so a read in `write` or in `fresh` goes to the API server; `fresh` reads what the next try
 * writes over and says whether to try (false: the conflict stands, and is thrown). A pass and its rollout write one
 * Application's status from the same process and conflict when their writes cross; retried here, the one that lost
 * costs a read and a write, not a failed activity retried with all it did before the write.
 */
export async function retryOnConflict<T>(write: () => Promise<T>, fresh: () => Promise<boolean> = () => Promise.resolve(true), attempts = 3): Promise<T> {
  for (let attempt = 1; ; attempt++) {
    try {
      return await write();
    } catch (err) {
      if (attempt >= attempts || !(err instanceof KubeError && err.status === 409) || !(await fresh())) throw err;
    }
  }
}

/** An owner reference, as much of it as says who controls an object. */
interface OwnerRef {
  kind?: string;
  name?: string;
  uid?: string;
  controller?: boolean;
}

/**
 * Who holds the name `existing` has, in words, when it is neither absent nor a child of the Application `app`
 * (this one, or an earlier one of its name whose children the garbage collector has not reached): another
 * Application (`web` and `web-preview` both exist, and web's blue-green preview Service would be the other's
 * Service), or an object the operator did not make. Undefined when the name is free to take.
 */
export function nameHolder(existing: KubeObject | null, app: { name: string; uid: string }): string | undefined {
  if (!existing) return undefined;
  const owners = (existing.metadata['ownerReferences'] ?? []) as OwnerRef[];
  const controller = owners.find((o) => o.controller);
  if (controller?.uid === app.uid || (controller?.kind === KIND && controller.name === app.name)) return undefined;
  return controller ? `${controller.kind ?? 'an object'} ${controller.name ?? ''}`.trim() : 'no Application (it was made by someone else)';
}

/** A child's name taken by another Application's child or a foreign object: applying it would take that over. */
export class NameTakenError extends KubeError {
  constructor(message: string) {
    super(409, 'NameTaken', message);
    this.name = 'NameTakenError';
  }

  /** Nothing the operator retries changes who holds the name: a person renames or deletes one of them. */
  override get permanent(): boolean {
    return true;
  }
}

/**
 * Refuses (NameTakenError) to apply `obj`, a child of the Application `app` whose name is not the Application's own
 * (`<app>-canary`, `<app>-preview`, `<app>-stable`), when another holds that name. Server-side apply would take it
 * over without a word: every Application applies as one field manager, so the other's owner reference and selector
 * would simply be replaced. Read from the copy in hand when current.
 */
export async function refuseTakenName(deps: ActivityDeps, obj: KubeObject, app: { name: string; uid: string }): Promise<void> {
  if (obj.metadata.name === app.name) return;
  const ref = { apiVersion: obj.apiVersion, kind: obj.kind, namespace: obj.metadata.namespace ?? '', name: obj.metadata.name };
  const holder = nameHolder(await read(deps, ref), app);
  if (holder) {
    throw new NameTakenError(`${obj.kind} ${obj.metadata.name} belongs to ${holder}, not to Application ${app.name}, which needs that name: rename one of the two Applications, or delete that ${obj.kind}`);
  }
}

/**
 * refuseTakenName for a rollout's object (its canary Deployment, the Gateway API's canary Service): the rollout cannot
 * run, and no retry changes that (non-retryable InvalidSpec: it ends at once, the holder named in status).
 */
export async function refuseTaken(deps: ActivityDeps, app: { name: string; uid?: string }, obj: KubeObject): Promise<void> {
  try {
    await refuseTakenName(deps, obj, { name: app.name, uid: app.uid ?? '' });
  } catch (err) {
    if (err instanceof NameTakenError) throw ApplicationFailure.nonRetryable(err.message, FailureType.InvalidSpec);
    throw err;
  }
}

/**
 * Deletes a child of the Application `app` ("not found" is done: false), but a child named after it
 * (`<app>-canary`...) only while it is this Application's: the same name may be another Application's own child
 * (`web-canary`'s Deployment when `web` ends a rollout) or an object someone else made, which it leaves alone. Read
 * from the copy in hand when current; deleted by its uid, so nothing made since goes instead.
 */
export async function deleteIfOurs(deps: ActivityDeps, ref: ObjectRef, app: { name: string; uid?: string }, opts: { propagationPolicy?: 'Background' } = {}): Promise<boolean> {
  if (ref.name === app.name) return deps.kube.delete(ref, opts);
  const existing = await read(deps, ref);
  if (!existing || nameHolder(existing, { name: app.name, uid: app.uid ?? '' })) return false;
  return deps.kube.delete(ref, { ...opts, ...(existing.metadata.uid ? { uid: existing.metadata.uid } : {}) });
}
