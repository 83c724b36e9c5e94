// The whole desired state of an Application in one pure call: what to apply, in dependency
// order, and which children must not exist, so the reconciler can apply and prune in one pass.

import type { V1Deployment, V1PersistentVolumeClaim, V1Service, V2HorizontalPodAutoscaler } from '@kubernetes/client-node';
import type { Application } from '../api/application.ts';
import { ISTIO_API_VERSION, canaryName, childName } from '../api/constants.ts';
import { renderCanaryDeployment, renderDeployment } from './deployment.ts';
import { renderHorizontalPodAutoscaler } from './hpa.ts';
import { renderDestinationRule, renderVirtualService } from './istio.ts';
import type { DestinationRule, VirtualService } from './istio.ts';
import { namespaceOf } from './meta.ts';
import { renderPersistentVolumeClaim } from './pvc.ts';
import { renderService } from './service.ts';

export type ChildKind = 'PersistentVolumeClaim' | 'Deployment' | 'Service' | 'HorizontalPodAutoscaler' | 'DestinationRule' | 'VirtualService';

export type DesiredChild =
  | { kind: 'PersistentVolumeClaim'; object: V1PersistentVolumeClaim }
  | { kind: 'Deployment'; object: V1Deployment }
  | { kind: 'Service'; object: V1Service }
  | { kind: 'HorizontalPodAutoscaler'; object: V2HorizontalPodAutoscaler }
  | { kind: 'DestinationRule'; object: DestinationRule }
  | { kind: 'VirtualService'; object: VirtualService };

/** A child by identity, for deletion. */
export interface ChildRef {
  apiVersion: string;
  kind: ChildKind;
  namespace: string;
  name: string;
}

export interface DesiredChildren {
  /** Objects to server-side apply, in this order: PVC, Deployments, Service, HPA, DestinationRule, VirtualService. */
  apply: DesiredChild[];
  /** Children that must not exist. Delete each only when its controller owner reference is this Application. */
  absent: ChildRef[];
}

export interface RenderOptions {
  /** Canary traffic percentage while a rollout is in flight; null renders the steady state, without a canary. */
  canaryWeight: number | null;
}

/**
 * Every child the Application should have, and the ones it must not have. A rollout in flight
 * (canaryWeight set) adds the canary Deployment, the canary subset and the weighted route.
 * The PVC is never listed as absent: storage cannot be removed from a spec, and data is only
 * released by garbage collection when the Application itself is deleted.
 */
export function renderChildren(app: Application, options: RenderOptions = { canaryWeight: null }): DesiredChildren {
  const namespace = namespaceOf(app);
  const ref = (apiVersion: string, kind: ChildKind, name: string): ChildRef => ({ apiVersion, kind, namespace, name });
  const rollout = options.canaryWeight !== null;
  const mesh = app.spec.serviceMesh?.enabled === true;
  if (rollout && !mesh) throw new Error(`Application ${app.metadata.name} cannot run a canary without serviceMesh.enabled`);

  const apply: DesiredChild[] = [];
  const absent: ChildRef[] = [];

  const pvc = renderPersistentVolumeClaim(app);
  if (pvc) apply.push({ kind: 'PersistentVolumeClaim', object: pvc });

  apply.push({ kind: 'Deployment', object: renderDeployment(app) });
  if (rollout) apply.push({ kind: 'Deployment', object: renderCanaryDeployment(app) });
  else absent.push(ref('apps/v1', 'Deployment', canaryName(app)));

  apply.push({ kind: 'Service', object: renderService(app) });

  const hpa = renderHorizontalPodAutoscaler(app);
  if (hpa) apply.push({ kind: 'HorizontalPodAutoscaler', object: hpa });
  else absent.push(ref('autoscaling/v2', 'HorizontalPodAutoscaler', childName(app)));

  if (mesh) {
    apply.push({ kind: 'DestinationRule', object: renderDestinationRule(app, { canary: rollout }) });
    apply.push({ kind: 'VirtualService', object: renderVirtualService(app, { canaryWeight: options.canaryWeight }) });
  } else {
    absent.push(ref(ISTIO_API_VERSION, 'DestinationRule', childName(app)));
    absent.push(ref(ISTIO_API_VERSION, 'VirtualService', childName(app)));
  }
  return { apply, absent };
}
