// Metadata every child carries: the common labels and the controller owner reference that makes
// Kubernetes garbage-collect the children when their Application is deleted.

import type { V1ObjectMeta, V1OwnerReference } from '@kubernetes/client-node';
import type { Application } from '../api/application.ts';
import { API_VERSION, KIND, LABEL_MANAGED_BY, LABEL_NAME, MANAGED_BY } from '../api/constants.ts';

/** Labels on every child and every pod of an Application. */
export function childLabels(app: Application): Record<string, string> {
  return { [LABEL_NAME]: app.metadata.name, [LABEL_MANAGED_BY]: MANAGED_BY };
}

/** The namespace of an Application read from the cluster; rendering anything else is a caller bug. */
export function namespaceOf(app: Application): string {
  const { namespace } = app.metadata;
  if (!namespace) throw new Error(`Application ${app.metadata.name} has no metadata.namespace: render only objects read from the API server`);
  return namespace;
}

/** The controller owner reference pointing at the Application. */
export function ownerReference(app: Application): V1OwnerReference {
  const { uid, name } = app.metadata;
  if (!uid) throw new Error(`Application ${name} has no metadata.uid: render only objects read from the API server`);
  return { apiVersion: API_VERSION, kind: KIND, name, uid, controller: true, blockOwnerDeletion: true };
}

/** Metadata of a child named `name`: namespace, common labels and the owner reference. */
export function childMetadata(app: Application, name: string): V1ObjectMeta {
  return { name, namespace: namespaceOf(app), labels: childLabels(app), ownerReferences: [ownerReference(app)] };
}

/** A shallow copy without the keys whose value is undefined, so rendered objects compare and serialize cleanly. */
export function compact<T extends object>(value: T): T {
  return Object.fromEntries(Object.entries(value).filter(([, v]) => v !== undefined)) as T;
}
