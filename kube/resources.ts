import { API_VERSION, KIND, PLURAL, RELEASE_KIND, RELEASE_PLURAL } from '../api/constants.ts';
import { childKinds } from '../render/children.ts';

/** A reference to one Kubernetes object. */
export interface ObjectRef {
  apiVersion: string;
  kind: string;
  namespace?: string;
  name: string;
}

/** A reference to a collection: one kind, in one namespace or (namespace undefined) across all. */
export interface CollectionRef {
  apiVersion: string;
  kind: string;
  namespace?: string | undefined;
}

interface Resource {
  plural: string;
  namespaced: boolean;
}

// The kinds the operator reads or writes; a static table keeps every request free of discovery calls. The children's
// kinds come from their table (render/children.ts).
const resources: Record<string, Resource> = {
  'v1/Namespace': { plural: 'namespaces', namespaced: false },
  'v1/Pod': { plural: 'pods', namespaced: true },
  'v1/ConfigMap': { plural: 'configmaps', namespaced: true },
  'v1/Event': { plural: 'events', namespaced: true },
  'apps/v1/ReplicaSet': { plural: 'replicasets', namespaced: true },
  // A rollout's Job checks (activities/checks.ts).
  'batch/v1/Job': { plural: 'jobs', namespaced: true },
  // A notification's URL from a Secret (activities/notify.ts).
  'v1/Secret': { plural: 'secrets', namespaced: true },
  [`${API_VERSION}/${KIND}`]: { plural: PLURAL, namespaced: true },
  [`${API_VERSION}/${RELEASE_KIND}`]: { plural: RELEASE_PLURAL, namespaced: true },
  'events.k8s.io/v1/Event': { plural: 'events', namespaced: true },
  'coordination.k8s.io/v1/Lease': { plural: 'leases', namespaced: true },
  ...Object.fromEntries(childKinds.map((k) => [`${k.apiVersion}/${k.kind}`, { plural: k.plural, namespaced: true }])),
};

function resourceOf(apiVersion: string, kind: string): Resource {
  const r = resources[`${apiVersion}/${kind}`];
  if (!r) throw new Error(`unknown kind ${kind} in ${apiVersion}`);
  return r;
}

/** The REST path of a collection. */
export function collectionPath(ref: CollectionRef): string {
  const r = resourceOf(ref.apiVersion, ref.kind);
  const prefix = ref.apiVersion.includes('/') ? `/apis/${ref.apiVersion}` : `/api/${ref.apiVersion}`;
  return r.namespaced && ref.namespace ? `${prefix}/namespaces/${encodeURIComponent(ref.namespace)}/${r.plural}` : `${prefix}/${r.plural}`;
}

/** The REST path of one object, optionally of its subresource. */
export function objectPath(ref: ObjectRef, subresource?: string): string {
  const r = resourceOf(ref.apiVersion, ref.kind);
  if (r.namespaced && !ref.namespace) throw new Error(`${ref.kind} ${ref.name} needs a namespace`);
  const base = `${collectionPath({ apiVersion: ref.apiVersion, kind: ref.kind, namespace: r.namespaced ? ref.namespace : undefined })}/${encodeURIComponent(ref.name)}`;
  return subresource ? `${base}/${subresource}` : base;
}

/** Plural resource name of a kind (for RBAC rules and events). */
export function pluralOf(apiVersion: string, kind: string): string {
  return resourceOf(apiVersion, kind).plural;
}
