// Istio routing for an Application: a DestinationRule with the stable (and, during a rollout,
// canary) subset and the traffic policy, and a VirtualService whose single HTTP route splits
// traffic between the subsets. Shapes follow networking.istio.io/v1 as Istio's CRDs define it.

import type { V1ObjectMeta } from '@kubernetes/client-node';
import type { Application } from '../api/application.ts';
import { CANARY_SUBSET, ISTIO_API_VERSION, LABEL_VERSION, ROUTE_NAME, STABLE_SUBSET, STABLE_VERSION, childName } from '../api/constants.ts';
import { childMetadata, compact, namespaceOf } from './meta.ts';

export type LoadBalancer = 'ROUND_ROBIN' | 'LEAST_CONN' | 'LEAST_REQUEST' | 'RANDOM' | 'PASSTHROUGH';

export interface Subset {
  name: string;
  labels: Record<string, string>;
}

export interface TrafficPolicy {
  connectionPool: { tcp: { connectTimeout: string } };
  loadBalancer: { simple: LoadBalancer };
}

export interface DestinationRule {
  apiVersion: typeof ISTIO_API_VERSION;
  kind: 'DestinationRule';
  metadata: V1ObjectMeta;
  spec: { host: string; trafficPolicy: TrafficPolicy; subsets: Subset[] };
}

export interface RouteDestination {
  destination: { host: string; subset: string };
  weight: number;
}

export interface HTTPRetry {
  attempts?: number;
  perTryTimeout?: string;
  retryOn?: string;
}

export interface HTTPRoute {
  name: string;
  route: RouteDestination[];
  retries?: HTTPRetry;
}

export interface VirtualService {
  apiVersion: typeof ISTIO_API_VERSION;
  kind: 'VirtualService';
  metadata: V1ObjectMeta;
  spec: { hosts: string[]; http: HTTPRoute[] };
}

/** The cluster-local FQDN of the Application's Service, the host both Istio objects refer to. */
export function serviceHost(app: Application): string {
  return `${childName(app)}.${namespaceOf(app)}.svc.cluster.local`;
}

/** The DestinationRule `<app>`: subset stable, plus subset canary when `canary` is true; throws when there is no canary version. */
export function renderDestinationRule(app: Application, options: { canary: boolean }): DestinationRule {
  const subsets: Subset[] = [{ name: STABLE_SUBSET, labels: { [LABEL_VERSION]: STABLE_VERSION } }];
  if (options.canary) {
    const version = app.spec.serviceMesh?.canary?.canaryVersion;
    if (version === undefined) throw new Error(`Application ${app.metadata.name} has no canary version for the canary subset`);
    subsets.push({ name: CANARY_SUBSET, labels: { [LABEL_VERSION]: version } });
  }
  // The schema defaults trafficPolicy whenever serviceMesh is present.
  const policy = app.spec.serviceMesh?.trafficPolicy ?? { connectionTimeout: '10s', loadBalancer: 'ROUND_ROBIN' };
  return {
    apiVersion: ISTIO_API_VERSION,
    kind: 'DestinationRule',
    metadata: childMetadata(app, childName(app)),
    spec: {
      host: serviceHost(app),
      trafficPolicy: {
        connectionPool: { tcp: { connectTimeout: policy.connectionTimeout } },
        loadBalancer: { simple: policy.loadBalancer },
      },
      subsets,
    },
  };
}

/**
 * The VirtualService `<app>`: all traffic to stable when canaryWeight is null, otherwise
 * canaryWeight percent to canary and the rest to stable (always summing to 100). Throws
 * RangeError for a weight that is not an integer from 0 to 100.
 */
export function renderVirtualService(app: Application, options: { canaryWeight: number | null }): VirtualService {
  const host = serviceHost(app);
  const { canaryWeight } = options;
  let route: RouteDestination[] = [{ destination: { host, subset: STABLE_SUBSET }, weight: 100 }];
  if (canaryWeight !== null) {
    if (!Number.isInteger(canaryWeight) || canaryWeight < 0 || canaryWeight > 100) {
      throw new RangeError(`canary weight must be an integer from 0 to 100, got ${canaryWeight}`);
    }
    route = [
      { destination: { host, subset: STABLE_SUBSET }, weight: 100 - canaryWeight },
      { destination: { host, subset: CANARY_SUBSET }, weight: canaryWeight },
    ];
  }
  const retryPolicy = app.spec.serviceMesh?.trafficPolicy.retryPolicy;
  const http: HTTPRoute = compact({ name: ROUTE_NAME, route, retries: retryPolicy && compact({ ...retryPolicy }) });
  return {
    apiVersion: ISTIO_API_VERSION,
    kind: 'VirtualService',
    metadata: childMetadata(app, childName(app)),
    spec: { hosts: [host], http: [http] },
  };
}

/** The part of a VirtualService the weights are read from. */
export interface RoutesOf {
  spec?: { http?: { route?: { destination?: { subset?: string }; weight?: number }[] }[] };
}

/** The traffic split of a VirtualService's first HTTP route, by subset. */
export interface RouteWeights {
  stable: number;
  canary: number;
  total: number;
}

/**
 * Reads a VirtualService (as rendered, or as read back from the cluster) the way the mesh will route: the weights of
 * its first HTTP route by subset, a lone destination without a weight taking all the traffic. Null for no object.
 */
export function readRouteWeights(vs: RoutesOf | null): RouteWeights | null {
  if (!vs) return null;
  const routes = vs.spec?.http?.[0]?.route ?? [];
  const weightOf = (r: { weight?: number }) => r.weight ?? (routes.length === 1 ? 100 : 0);
  const bySubset = (subset: string) => routes.filter((r) => r.destination?.subset === subset).reduce((n, r) => n + weightOf(r), 0);
  return { stable: bySubset(STABLE_SUBSET), canary: bySubset(CANARY_SUBSET), total: routes.reduce((n, r) => n + weightOf(r), 0) };
}
