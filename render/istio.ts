// Istio routing for an Application: a DestinationRule with the stable (and, during a rollout,
// canary) subset and the traffic policy, and a VirtualService whose single HTTP route splits
// traffic between the subsets. Shapes follow networking.istio.io/v1 as Istio's CRDs define it.

import type { V1ObjectMeta } from '@kubernetes/client-node';
import type { Application } from '../api/application.ts';
import { CANARY_SUBSET, ISTIO_API_VERSION, LABEL_VERSION, ROUTE_NAME, STABLE_SUBSET, STABLE_VERSION, childName } from '../api/constants.ts';
import { percent, type CanaryRoute, type HeaderMatch, type RouteWeights } from '../routing/route.ts';
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

export type StringMatch = { exact: string } | { prefix: string } | { regex: string };

export interface HTTPRoute {
  name: string;
  match?: { headers: Record<string, StringMatch> }[];
  route: RouteDestination[];
  mirror?: { host: string; subset: string };
  mirrorPercentage?: { value: number };
  retries?: HTTPRetry;
}

export interface VirtualService {
  apiVersion: typeof ISTIO_API_VERSION;
  kind: 'VirtualService';
  metadata: V1ObjectMeta;
  spec: { hosts: string[]; http: HTTPRoute[] };
}

/** Name of the A/B route, before the weighted one, so the VirtualService can be read back. */
export const HEADER_ROUTE_NAME = 'canary-match';

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

/** RE2 for a Cookie header holding `name=value` among other cookies. */
function cookieRegex(name: string, value: string): string {
  const quote = (x: string) => x.replace(/[\\^$.|?*+()[\]{}]/g, '\\$&');
  return `^(.*?;\\s*)?${quote(name)}=${quote(value)}(;.*)?$`;
}

function stringMatch(m: HeaderMatch): StringMatch {
  if (m.cookie !== undefined) return { regex: cookieRegex(m.cookie, m.exact ?? '') };
  if (m.prefix !== undefined) return { prefix: m.prefix };
  if (m.regex !== undefined) return { regex: m.regex };
  return { exact: m.exact ?? '' };
}

/**
 * The VirtualService `<app>`: all traffic to stable in the steady state (canary null); during a rollout the
 * canary's weight on the primary route (always summing to 100), with an optional A/B route before it that sends
 * requests matching every header condition to the canary, and an optional mirror of a percentage of requests.
 * Throws RangeError for a weight or mirror percentage that is not an integer from 0 to 100.
 */
export function renderVirtualService(app: Application, options: { canary: CanaryRoute | null }): VirtualService {
  const host = serviceHost(app);
  const { canary } = options;
  const retryPolicy = app.spec.serviceMesh?.trafficPolicy.retryPolicy;
  const retries = retryPolicy && compact({ ...retryPolicy });
  const stable = (weight: number): RouteDestination => ({ destination: { host, subset: STABLE_SUBSET }, weight });
  const toCanary = (weight: number): RouteDestination => ({ destination: { host, subset: CANARY_SUBSET }, weight });
  const http: HTTPRoute[] = [];
  if (canary?.headers?.length) {
    const headers: Record<string, StringMatch> = {};
    for (const m of canary.headers) headers[m.cookie !== undefined ? 'cookie' : m.header ?? ''] = stringMatch(m);
    http.push(compact({ name: HEADER_ROUTE_NAME, match: [{ headers }], route: [toCanary(100)], retries }));
  }
  const weight = canary ? percent('canary weight', canary.weight) : null;
  const mirror = canary?.mirror ? percent('mirror percentage', canary.mirror) : 0;
  http.push(compact({
    name: ROUTE_NAME,
    route: weight === null ? [stable(100)] : [stable(100 - weight), toCanary(weight)],
    ...(mirror > 0 ? { mirror: { host, subset: CANARY_SUBSET }, mirrorPercentage: { value: mirror } } : {}),
    retries,
  }));
  return {
    apiVersion: ISTIO_API_VERSION,
    kind: 'VirtualService',
    metadata: childMetadata(app, childName(app)),
    spec: { hosts: [host], http },
  };
}

/** The part of a VirtualService the routes are read from. */
export interface RoutesOf {
  spec?: {
    http?: {
      name?: string;
      match?: { headers?: Record<string, { exact?: string; prefix?: string; regex?: string }> }[];
      route?: { destination?: { subset?: string }; weight?: number }[];
      mirror?: { subset?: string };
      mirrorPercentage?: { value?: number };
    }[];
  };
}

/**
 * Reads a VirtualService (as rendered, or as read back from the cluster) the way the mesh will route: the weights of
 * its primary (weighted) route by subset, a lone destination without a weight taking all the traffic, whether a
 * header route sends requests to the canary, and the mirror. Null for no object.
 */
export function readRouteWeights(vs: RoutesOf | null): RouteWeights | null {
  if (!vs) return null;
  const http = vs.spec?.http ?? [];
  const primary = http.find((h) => h.name === ROUTE_NAME) ?? http.at(-1);
  const routes = primary?.route ?? [];
  const weightOf = (r: { weight?: number }) => r.weight ?? (routes.length === 1 ? 100 : 0);
  const bySubset = (subset: string) => routes.filter((r) => r.destination?.subset === subset).reduce((n, r) => n + weightOf(r), 0);
  const headerRoute = http.some((h) => h !== primary && (h.route ?? []).some((r) => r.destination?.subset === CANARY_SUBSET));
  const mirror = primary?.mirror?.subset === CANARY_SUBSET ? primary.mirrorPercentage?.value ?? 100 : 0;
  return { stable: bySubset(STABLE_SUBSET), canary: bySubset(CANARY_SUBSET), total: routes.reduce((n, r) => n + weightOf(r), 0), headerRoute, mirror };
}
