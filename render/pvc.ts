import type { V1PersistentVolumeClaim } from '@kubernetes/client-node';
import type { Application } from '../api/application.ts';
import { childName } from '../api/constants.ts';
import { childMetadata, compact } from './meta.ts';

/** The PersistentVolumeClaim `<app>` for spec.storage, or null when the Application has no storage. */
export function renderPersistentVolumeClaim(app: Application): V1PersistentVolumeClaim | null {
  const storage = app.spec.storage;
  if (!storage) return null;
  return {
    apiVersion: 'v1',
    kind: 'PersistentVolumeClaim',
    metadata: childMetadata(app, childName(app)),
    spec: compact({
      accessModes: [storage.accessMode],
      resources: { requests: { storage: storage.size } },
      storageClassName: storage.storageClass,
    }),
  };
}
