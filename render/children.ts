// Every kind of child an Application has, in one table: how it is named and rendered, whether the watcher watches
// it, whether the reconciler prunes it, who owns it during a rollout, and its place in the apply and finalize order.
// The renderer, the Kubernetes client's resource table, the watcher, finalization, the chaos orphan check and the
// RBAC test all derive from it: adding a kind is one row here (plus its renderer and its RBAC rule).

import {
  canaryName, childName, GATEWAY_API_VERSION, ISTIO_API_VERSION, STABLE_VERSION, TRAEFIK_API_VERSION, mirrorServiceName, routesBySelector, stableServiceName,
} from '../api/constants.ts';
import { rolloutRouterOf, routerOf, type Application } from '../api/application.ts';
import type { CanaryRoute } from '../routing/route.ts';
import { renderCanaryDeployment, renderDeployment } from './deployment.ts';
import { renderHTTPRoute, renderMirrorService, renderRouteService } from './gateway.ts';
import { renderHorizontalPodAutoscaler } from './hpa.ts';
import { renderDestinationRule, renderVirtualService } from './istio.ts';
import { renderPersistentVolumeClaim } from './pvc.ts';
import { previewServiceName, renderPreviewService, renderService } from './service.ts';

/** A rendered child, as sent to server-side apply. */
export interface ChildObject {
  apiVersion: string;
  kind: string;
  metadata: { name: string; namespace?: string; [k: string]: unknown };
  [k: string]: unknown;
}

export interface RenderOptions {
  /** What a rollout in flight routes to the canary; null renders the steady state, without a canary. */
  canary: CanaryRoute | null;
}

/** One kind of child. */
export interface ChildKind {
  apiVersion: string;
  kind: string;
  plural: string;
  /** The watcher wakes the Application's workflow when one changes (drift is put back). */
  watched: boolean;
  /** The operator reads it back (status, pruning, the canary's health); PVCs are immutable and never read. */
  read: boolean;
}

/** One child of an Application: its kind, its name, how it is rendered and who looks after it. */
export interface Child {
  of: ChildKind;
  /** Its name, from the Application's name. */
  name(app: { metadata: { name: string } }): string;
  /** Its desired object, or null when the spec asks for none. */
  render(app: Application, options: RenderOptions): ChildObject | null;
  /** Deleted by the reconciler when the spec stops asking for it (only when this Application controls it). */
  pruned: boolean;
  /** While a rollout runs, the rollout workflow owns it (under the app's router) and the reconciler leaves it alone. */
  rolloutOwned(app: Application): boolean;
}

const kind = (apiVersion: string, k: string, plural: string, opts: { watched?: boolean; read?: boolean } = {}): ChildKind =>
  ({ apiVersion, kind: k, plural, watched: opts.watched ?? true, read: opts.read ?? true });

export const kinds = {
  pvc: kind('v1', 'PersistentVolumeClaim', 'persistentvolumeclaims', { read: false }),
  deployment: kind('apps/v1', 'Deployment', 'deployments'),
  service: kind('v1', 'Service', 'services'),
  hpa: kind('autoscaling/v2', 'HorizontalPodAutoscaler', 'horizontalpodautoscalers'),
  destinationRule: kind(ISTIO_API_VERSION, 'DestinationRule', 'destinationrules'),
  virtualService: kind(ISTIO_API_VERSION, 'VirtualService', 'virtualservices'),
  httpRoute: kind(GATEWAY_API_VERSION, 'HTTPRoute', 'httproutes'),
  // Exists only while a mirror is set on Traefik: the rollout's gate checks look after it, not the watcher.
  traefikService: kind(TRAEFIK_API_VERSION, 'TraefikService', 'traefikservices', { watched: false }),
} as const;

/** Every kind of child, once each. */
export const childKinds: readonly ChildKind[] = Object.values(kinds);

const mesh = (app: Application) => app.spec.serviceMesh?.enabled === true;
const istio = (app: Application) => routerOf(app.spec) === 'istio';
const gatewayAPI = (app: Application) => routerOf(app.spec) === 'gatewayAPI';
const inRollout = (o: RenderOptions) => o.canary !== null;
const asObject = <T>(o: T): ChildObject => o as unknown as ChildObject;
const never = () => false;
const always = () => true;

const pvc: Child = { of: kinds.pvc, name: childName, pruned: false, rolloutOwned: never, render: (app) => nullable(renderPersistentVolumeClaim(app)) };
const stable: Child = { of: kinds.deployment, name: childName, pruned: false, rolloutOwned: never, render: (app) => asObject(renderDeployment(app)) };
const canary: Child = {
  of: kinds.deployment, name: canaryName, pruned: true, rolloutOwned: always,
  render: (app, o) => (inRollout(o) ? asObject(renderCanaryDeployment(app)) : null),
};
// Without a proxy (a blue-green switch, a canary by replicas) the Service's selector is what a rollout moves. Between
// rollouts it pins the stable pods too: a rollout that ends deletes its canary Deployment in the background, and a
// selector of every version written by the next pass would take the canary's pods for as long as they outlive it.
const selectorRouted = (app: Application) => routesBySelector(rolloutRouterOf(app.spec));
const service: Child = {
  of: kinds.service, name: childName, pruned: false, rolloutOwned: selectorRouted,
  render: (app) => asObject(renderService(app, selectorRouted(app) ? { version: STABLE_VERSION } : {})),
};
const previewService: Child = { of: kinds.service, name: previewServiceName, pruned: true, rolloutOwned: never, render: (app) => nullable(renderPreviewService(app)) };
const hpa: Child = { of: kinds.hpa, name: childName, pruned: true, rolloutOwned: never, render: (app) => nullable(renderHorizontalPodAutoscaler(app)) };
// Istio: the mesh's routing objects; the canary's subset and weights only when Istio is the app's router.
const destinationRule: Child = {
  of: kinds.destinationRule, name: childName, pruned: true, rolloutOwned: istio,
  render: (app, o) => (mesh(app) ? asObject(renderDestinationRule(app, { canary: inRollout(o) && istio(app) })) : null),
};
const virtualService: Child = {
  of: kinds.virtualService, name: childName, pruned: true, rolloutOwned: istio,
  render: (app, o) => (mesh(app) ? asObject(renderVirtualService(app, { canary: istio(app) ? o.canary : null })) : null),
};
// The Gateway API: a Service per version for the route to weight, and the HTTPRoute.
const stableService: Child = {
  of: kinds.service, name: stableServiceName, pruned: true, rolloutOwned: never,
  render: (app) => (gatewayAPI(app) ? asObject(renderRouteService(app, 'stable')) : null),
};
const canaryService: Child = {
  of: kinds.service, name: canaryName, pruned: true, rolloutOwned: gatewayAPI,
  render: (app, o) => (gatewayAPI(app) && inRollout(o) ? asObject(renderRouteService(app, 'canary')) : null),
};
const traefikMirror: Child = {
  of: kinds.traefikService, name: mirrorServiceName, pruned: true, rolloutOwned: gatewayAPI,
  render: (app, o) => (gatewayAPI(app) && app.spec.traffic?.gatewayAPI?.implementation === 'traefik' && o.canary?.mirror ? asObject(renderMirrorService(app, o.canary.mirror)) : null),
};
const httpRoute: Child = {
  of: kinds.httpRoute, name: childName, pruned: true, rolloutOwned: gatewayAPI,
  render: (app, o) => (gatewayAPI(app) ? asObject(renderHTTPRoute(app, { canary: o.canary })) : null),
};

/**
 * The children in apply order: storage before the pods that mount it, the Deployments before the Services and the
 * HPA that point at them, the DestinationRule's subsets before the VirtualService routes to them, the Services a
 * route weights before the HTTPRoute. The PVC is never pruned: storage cannot be removed from a spec, and its data
 * goes only with the Application itself.
 */
export const children: readonly Child[] = [pvc, stable, canary, service, previewService, stableService, canaryService, hpa, destinationRule, virtualService, traefikMirror, httpRoute];

/** Deletion order on finalize: routes first (no traffic to what is going away), storage last. */
export const finalizeOrder: readonly Child[] = [httpRoute, traefikMirror, virtualService, destinationRule, hpa, canaryService, canary, stable, stableService, previewService, service, pvc];

function nullable<T>(o: T | null): ChildObject | null {
  return o === null ? null : asObject(o);
}

/** A child by identity, for reads and deletion. */
export interface ChildRef {
  apiVersion: string;
  kind: string;
  namespace: string;
  name: string;
}

/** The reference of a child of the Application named `name` in `namespace`. */
export function childRef(child: Child, namespace: string, name: string): ChildRef {
  return { apiVersion: child.of.apiVersion, kind: child.of.kind, namespace, name: child.name({ metadata: { name } }) };
}

/** The RBAC verbs the operator needs on a kind of child, for what the table says it does with it. */
export function requiredVerbs(k: ChildKind): string[] {
  const verbs = ['create', 'patch', 'delete'];
  if (k.watched) verbs.push('list', 'watch');
  if (k.read) verbs.push('get');
  return verbs.sort();
}
