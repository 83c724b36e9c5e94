// Who wrote an object last, from its metadata.managedFields: what tells the operator's own writes from anyone else's.
import { FIELD_MANAGER } from '../api/constants.ts';
import type { ObjectRef } from './resources.ts';

/** One entry of an object's metadata.managedFields, as much of it as tells who wrote last. */
export interface ManagedFieldsEntry {
  manager?: string;
  time?: string;
  subresource?: string;
  /** The fields this manager owns, as the API server writes them: {"f:spec": {"f:replicas": {}}}. */
  fieldsV1?: Record<string, unknown>;
}

/**
 * When the operator (field manager FIELD_MANAGER) last wrote an object, if that write is the newest, strictly after
 * every other writer's; otherwise undefined. The API server dates each manager's entry when that manager changes the
 * object, to the second; a tie counts as someone else's write, so a hand edit in the same second as an apply is still
 * put back. Status writes (the status subresource) never move the generation and are left out.
 */
export function ourNewestWrite(entries: readonly ManagedFieldsEntry[] | undefined): string | undefined {
  let ours: string | undefined;
  let others: string | undefined;
  for (const e of entries ?? []) {
    if (e.subresource === 'status' || !e.time) continue;
    if (e.manager === FIELD_MANAGER) ours = ours && ours > e.time ? ours : e.time;
    else others = others && others > e.time ? others : e.time;
  }
  return ours !== undefined && (others === undefined || Date.parse(ours) > Date.parse(others)) ? ours : undefined;
}

/**
 * Whether the operator wrote the object last (read whole: copies in hand keep no managedFields). One that differs
 * from what the operator would write now, yet was written last by it, was changed by no one else: what the operator
 * writes changed (the Application's spec), not the object.
 */
export async function writtenLastByUs(kube: { get<T>(ref: ObjectRef): Promise<T | null> }, ref: ObjectRef): Promise<boolean> {
  const obj = await kube.get<{ metadata?: { managedFields?: ManagedFieldsEntry[] } }>(ref);
  return ourNewestWrite(obj?.metadata?.managedFields) !== undefined;
}

/**
 * Whether the operator's (non-status) entry owns the field at `path` (["spec", "replicas"]). A write through the
 * `/scale` subresource (kubectl scale, an HPA) records no writer on this Kubernetes: it takes spec.replicas out of
 * the entry of the manager that owned it and leaves that entry's time as it was, so only the ownership tells.
 */
export function weOwn(entries: readonly ManagedFieldsEntry[] | undefined, path: readonly string[]): boolean {
  return (entries ?? []).some((e) => {
    if (e.manager !== FIELD_MANAGER || e.subresource === 'status') return false;
    let node: unknown = e.fieldsV1;
    for (const key of path) {
      node = node && typeof node === 'object' ? (node as Record<string, unknown>)[`f:${key}`] : undefined;
      if (node === undefined) return false;
    }
    return true;
  });
}
