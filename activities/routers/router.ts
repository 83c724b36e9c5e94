// The traffic-router seam: what a rollout needs of whatever carries its canary's requests (Istio, the Gateway API,
// the next one), in four calls. The rollout's activities (activities/canary.ts) pick the router the Application's
// spec names and call these; the workflows never learn which one it is. A new router is one file beside these,
// its renderer in render/, its rows in render/children.ts, and one line in the table below. Two need no proxy
// (selector.ts): `service`, a blue-green switch of the Service's selector, and `replicas`, a canary by pod counts.
import { ApplicationFailure } from '@temporalio/activity';
import { rolloutRouterOf, type Application } from '../../api/application.ts';
import { FailureType, type RolloutRouterName } from '../../api/constants.ts';
import type { CanaryRoute, RouteWeights } from '../../routing/route.ts';
import type { ActivityDeps } from '../deps.ts';
import { gatewayAPIRouter } from './gateway-api.ts';
import { istioRouter } from './istio.ts';
import { replicasRouter, serviceRouter } from './selector.ts';

/** What a router's objects route now, as a gate check sees it. */
export interface RouteObservation {
  /** What they route, read back; null when they do not exist. */
  routed: RouteWeights | null;
  /** They route exactly what the rollout set, and nothing else (no hand edit, nothing missing). */
  asIntended: boolean;
  /** What the canary is routed to exists (Istio's canary subset, the Gateway API's canary Service). */
  target: boolean;
  /**
   * Not as intended, yet written last by the operator: what the Application's spec says of the routes (hosts, path,
   * Gateways) changed since the rollout wrote them, and no one edited them. Absent when false.
   */
  specChanged?: boolean;
}

/** One router. `app` is the Application with the rollout's canary version and image filled in. */
export interface TrafficRouter {
  /** Creates what routing to the canary needs (idempotent); with `route`, routes it too (a new canary's 0%). */
  prepare(deps: ActivityDeps, app: Application, route?: CanaryRoute): Promise<void>;
  /** Routes `route` to the canary and reads it back; throws when what is read back is not it. */
  setRoute(deps: ActivityDeps, app: Application, route: CanaryRoute): Promise<RouteWeights>;
  /** What is routed now, compared with `route` as rendered from today's spec. */
  observe(deps: ActivityDeps, app: Application, route: CanaryRoute): Promise<RouteObservation>;
  /**
   * All traffic to stable (read back), then what prepare created is removed; done too when the objects are gone.
   * `keepTarget`: only the traffic moves, what the canary is routed to stays (Istio's subset, the canary Service), so
   * a proxy that has not taken the change yet still reaches its pods while they drain.
   */
  remove(deps: ActivityDeps, app: Application, opts?: { keepTarget?: boolean }): Promise<void>;
}

export const routers: Record<RolloutRouterName, TrafficRouter> = {
  istio: istioRouter,
  gatewayAPI: gatewayAPIRouter,
  replicas: replicasRouter,
  service: serviceRouter,
};

/** The router a rollout chose (its plan's), else the one the Application's spec names; a spec with none cannot run a canary (the API server refuses it too). */
export function routerFor(app: Application, chosen?: RolloutRouterName): TrafficRouter {
  const name = chosen ?? rolloutRouterOf(app.spec);
  if (!name) throw ApplicationFailure.nonRetryable(`Application ${app.metadata.namespace ?? ''}/${app.metadata.name} has no router for a canary (serviceMesh.enabled or traffic.router)`, FailureType.InvalidSpec);
  return routers[name];
}
