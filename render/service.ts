import type { V1Service } from '@kubernetes/client-node';
import { canaryImage, type Application } from '../api/application.ts';
import { LABEL_NAME, LABEL_VERSION, PREVIEW_SERVICE_SUFFIX, childName, isTerminal } from '../api/constants.ts';
import { childMetadata, compact } from './meta.ts';

/** The Service `<app>`: spec type and ports, selecting the pods of every version (Istio splits the traffic). */
export function renderService(app: Application, opts: { version?: string } = {}): V1Service {
  return {
    apiVersion: 'v1',
    kind: 'Service',
    metadata: childMetadata(app, childName(app)),
    spec: {
      type: app.spec.service.type,
      selector: { [LABEL_NAME]: app.metadata.name, ...(opts.version ? { [LABEL_VERSION]: opts.version } : {}) },
      ports: app.spec.service.ports.map((p) => compact({ name: p.name, port: p.port, targetPort: p.port, protocol: 'TCP' })),
    },
  };
}

/** Name of a blue-green rollout's preview Service. */
export function previewServiceName(app: { metadata: { name: string } }): string {
  return `${app.metadata.name}${PREVIEW_SERVICE_SUFFIX}`;
}

/**
 * The preview Service `<app>-preview` of a blue-green rollout: the ports of `<app>`, selecting only the new version's
 * pods, so it can be tried (by people, a check, a load test) before any user request reaches it. None once the
 * rollout of this version and image is over: an abort or a rollback leaves the spec as it was (canary still
 * enabled) but removes the preview's pods, and a Service selecting nothing must not stay behind.
 */
export function renderPreviewService(app: Application): V1Service | null {
  const canary = app.spec.serviceMesh?.canary;
  if (!canary?.enabled || canary.strategy !== 'blueGreen' || !canary.canaryVersion) return null;
  const last = app.status?.canary;
  if (isTerminal(last?.phase) && last?.version === canary.canaryVersion && last.image === canaryImage(app.spec)) return null;
  return {
    apiVersion: 'v1',
    kind: 'Service',
    metadata: childMetadata(app, previewServiceName(app)),
    spec: {
      type: 'ClusterIP',
      selector: { [LABEL_NAME]: app.metadata.name, [LABEL_VERSION]: canary.canaryVersion },
      ports: app.spec.service.ports.map((p) => compact({ name: p.name, port: p.port, targetPort: p.port, protocol: 'TCP' })),
    },
  };
}
