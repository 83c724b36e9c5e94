/** A reference to one Kubernetes object. */
export interface ObjectRef {
  apiVersion: string;
  kind: string;
  namespace?: string;
  name: string;
}

interface Resource {
  plural: string;
  namespaced: boolean;
}

// The kinds the operator reads or writes; a static table keeps every request free of discovery calls.
const resources: Record<string, Resource> = {
  'v1/Namespace': { plural: 'namespaces', namespaced: false },
  'v1/Service': { plural: 'services', namespaced: true },
  'v1/PersistentVolumeClaim': { plural: 'persistentvolumeclaims', namespaced: true },
  'v1/Pod': { plural: 'pods', namespaced: true },
  'v1/ConfigMap': { plural: 'configmaps', namespaced: true },
  'v1/Event': { plural: 'events', namespaced: true },
  'apps/v1/Deployment': { plural: 'deployments', namespaced: true },
  'apps/v1/ReplicaSet': { plural: 'replicasets', namespaced: true },
  'autoscaling/v2/HorizontalPodAutoscaler': { plural: 'horizontalpodautoscalers', namespaced: true },
  'networking.istio.io/v1/VirtualService': { plural: 'virtualservices', namespaced: true },
  'networking.istio.io/v1/DestinationRule': { plural: 'destinationrules', namespaced: true },
  'myapp.example.com/v1/Application': { plural: 'applications', namespaced: true },
  'events.k8s.io/v1/Event': { plural: 'events', namespaced: true },
  'coordination.k8s.io/v1/Lease': { plural: 'leases', namespaced: true },
};

function resourceOf(apiVersion: string, kind: string): Resource {
  const r = resources[`${apiVersion}/${kind}`];
  if (!r) throw new Error(`unknown kind ${kind} in ${apiVersion}`);
  return r;
}

/** The collection path of a kind, in one namespace or (namespace undefined) across all. */
export function collectionPath(apiVersion: string, kind: string, namespace?: string): string {
  const r = resourceOf(apiVersion, kind);
  const prefix = apiVersion.includes('/') ? `/apis/${apiVersion}` : `/api/${apiVersion}`;
  return r.namespaced && namespace ? `${prefix}/namespaces/${namespace}/${r.plural}` : `${prefix}/${r.plural}`;
}

/** The REST path of one object, optionally of its subresource. */
export function objectPath(ref: ObjectRef, subresource?: string): string {
  const r = resourceOf(ref.apiVersion, ref.kind);
  if (r.namespaced && !ref.namespace) throw new Error(`${ref.kind} ${ref.name} needs a namespace`);
  const base = `${collectionPath(ref.apiVersion, ref.kind, r.namespaced ? ref.namespace : undefined)}/${encodeURIComponent(ref.name)}`;
  return subresource ? `${base}/${subresource}` : base;
}

/** Plural resource name of a kind (for RBAC rules and events). */
export function pluralOf(apiVersion: string, kind: string): string {
  return resourceOf(apiVersion, kind).plural;
}
