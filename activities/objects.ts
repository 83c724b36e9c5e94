// How activities read the objects they act on: the copy in hand when it is current (kube/recent.ts: at least as
// new as what the watcher's watch last delivered: that delivery, or a later answer of this process), else a GET.
// Writes that depend on what was read stay compare-and-swap on its resourceVersion, so a copy the watch has not
// caught up with costs a 409 and a retry that reads from the API server (orForget), never a lost update.
import { API_VERSION, KIND } from '../api/constants.ts';
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
