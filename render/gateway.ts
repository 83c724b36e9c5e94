// Gateway API routing for an Application (spec.traffic.router: gatewayAPI): an HTTPRoute attached to the Gateways
// the spec names, whose weighted rule splits requests between two Services, `<app>-stable` (the stable pods only)
// and, while a rollout runs, `<app>-canary` (the canary's pods). A header route is a rule with header matches (more
// specific, so the Gateway prefers it for matching requests); a mirror is a RequestMirror filter with its percent,
// or, on Traefik (which has no such filter), a TraefikService `<app>-mirror` standing for `<app>-stable` and copying
// a percentage of what it serves to the canary: only requests bound for stable are mirrored, never the canary's own.
// Shapes follow gateway.networking.k8s.io/v1 as the standard channel's CRDs define it, and traefik.io/v1alpha1.

import type { V1Service } from '@kubernetes/client-node';
import type { Application } from '../api/application.ts';
import { GATEWAY_API_VERSION, LABEL_NAME, LABEL_VERSION, STABLE_VERSION, TRAEFIK_API_VERSION, canaryName, childName, mirrorServiceName, stableServiceName } from '../api/constants.ts';
import { percent, type CanaryRoute, type HeaderMatch, type RouteWeights } from '../routing/route.ts';
import { childMetadata, compact } from './meta.ts';

export interface ParentRef {
  name: string;
  namespace?: string;
  sectionName?: string;
}

export interface BackendRef {
  group?: string;
  kind?: string;
  name: string;
  port?: number;
  weight?: number;
}

export interface HeaderMatchRule {
  type: 'Exact' | 'RegularExpression';
  name: string;
  value: string;
}

export interface RouteRule {
  matches: { path: { type: 'PathPrefix'; value: string }; headers?: HeaderMatchRule[] }[];
  backendRefs: BackendRef[];
  filters?: { type: 'RequestMirror'; requestMirror: { backendRef: { name: string; port: number }; percent: number } }[];
}

export interface HTTPRoute {
  apiVersion: typeof GATEWAY_API_VERSION;
  kind: 'HTTPRoute';
  metadata: ReturnType<typeof childMetadata>;
  spec: { parentRefs: ParentRef[]; hostnames?: string[]; rules: RouteRule[] };
}

/** The port the route sends requests to: the Service port named http, else the first. */
export function routePort(app: Application): number {
  const ports = app.spec.service.ports;
  return (ports.find((p) => p.name === 'http') ?? ports[0])!.port;
}

/**
 * The Service `<app>-stable` (only the stable pods) or `<app>-canary` (only the canary's): what the route weights.
 * Always ClusterIP: the Gateway reaches it from inside the cluster; `spec.service.type` applies to `<app>`.
 */
export function renderRouteService(app: Application, which: 'stable' | 'canary'): V1Service {
  const version = which === 'stable' ? STABLE_VERSION : app.spec.serviceMesh?.canary?.canaryVersion;
  if (version === undefined) throw new Error(`Application ${app.metadata.name} has no canary version for the canary Service`);
  return {
    apiVersion: 'v1',
    kind: 'Service',
    metadata: childMetadata(app, which === 'stable' ? stableServiceName(app) : canaryName(app)),
    spec: {
      type: 'ClusterIP',
      selector: { [LABEL_NAME]: app.metadata.name, [LABEL_VERSION]: version },
      ports: app.spec.service.ports.map((p) => compact({ name: p.name, port: p.port, targetPort: p.port, protocol: 'TCP' })),
    },
  };
}

/** RE2 for a Cookie header holding `name=value` among other cookies. */
function cookieRegex(name: string, value: string): string {
  return `^(.*?;\\s*)?${quote(name)}=${quote(value)}(;.*)?$`;
}

const quote = (x: string) => x.replace(/[\\^$.|?*+()[\]{}]/g, '\\$&');

/** One condition in Gateway API terms: a prefix (which it has no type for) and a cookie become regular expressions. */
function headerMatch(m: HeaderMatch): HeaderMatchRule {
  if (m.cookie !== undefined) return { type: 'RegularExpression', name: 'cookie', value: cookieRegex(m.cookie, m.exact ?? '') };
  const name = m.header ?? '';
  if (m.prefix !== undefined) return { type: 'RegularExpression', name, value: `^${quote(m.prefix)}.*` };
  if (m.regex !== undefined) return { type: 'RegularExpression', name, value: m.regex };
  return { type: 'Exact', name, value: m.exact ?? '' };
}

/**
 * The HTTPRoute `<app>`: all requests to `<app>-stable` in the steady state (canary null); during a rollout the
 * canary's weight on the weighted rule (the two weights always sum to 100), an optional rule before it that sends
 * requests matching every header condition to the canary, and an optional mirror of a percentage of requests.
 * Throws RangeError for a weight or mirror percentage that is not an integer from 0 to 100, and Error when the
 * spec has no Gateway to attach to.
 */
export function renderHTTPRoute(app: Application, options: { canary: CanaryRoute | null }): HTTPRoute {
  const gw = app.spec.traffic?.gatewayAPI;
  if (!gw) throw new Error(`Application ${app.metadata.name} has no traffic.gatewayAPI to attach its HTTPRoute to`);
  const { canary } = options;
  const port = routePort(app);
  const path = { type: 'PathPrefix' as const, value: gw.path };
  const stable = stableServiceName(app);
  const canaryService = canaryName(app);
  const rules: RouteRule[] = [];
  if (canary?.headers?.length) {
    rules.push({ matches: [{ path, headers: canary.headers.map(headerMatch) }], backendRefs: [{ name: canaryService, port }] });
  }
  const weight = canary ? percent('canary weight', canary.weight) : null;
  const mirror = canary?.mirror ? percent('mirror percentage', canary.mirror) : 0;
  const traefikMirror = mirror > 0 && gw.implementation === 'traefik';
  // On Traefik the stable side of the split is the mirroring service, which passes every request on to stable.
  const stableRef: BackendRef = traefikMirror ? { group: 'traefik.io', kind: 'TraefikService', name: mirrorServiceName(app) } : { name: stable, port };
  rules.push(compact({
    matches: [{ path }],
    backendRefs: weight === null ? [stableRef] : [{ ...stableRef, weight: 100 - weight }, { name: canaryService, port, weight }],
    filters: mirror > 0 && !traefikMirror ? [{ type: 'RequestMirror' as const, requestMirror: { backendRef: { name: canaryService, port }, percent: mirror } }] : undefined,
  }));
  return {
    apiVersion: GATEWAY_API_VERSION,
    kind: 'HTTPRoute',
    metadata: childMetadata(app, childName(app)),
    spec: compact({
      parentRefs: gw.parentRefs.map((p) => compact({ ...p })),
      hostnames: gw.hostnames?.length ? gw.hostnames : undefined,
      rules,
    }),
  };
}

export interface TraefikService {
  apiVersion: typeof TRAEFIK_API_VERSION;
  kind: 'TraefikService';
  metadata: ReturnType<typeof childMetadata>;
  spec: { mirroring: { name: string; port: number; mirrors: { name: string; port: number; percent: number }[] } };
}

/** Traefik's mirroring service `<app>-mirror`: every request to `<app>-stable`, and `percent`% of them copied to the canary. */
export function renderMirrorService(app: Application, mirror: number): TraefikService {
  const port = routePort(app);
  return {
    apiVersion: TRAEFIK_API_VERSION,
    kind: 'TraefikService',
    metadata: childMetadata(app, mirrorServiceName(app)),
    spec: { mirroring: { name: stableServiceName(app), port, mirrors: [{ name: canaryName(app), port, percent: percent('mirror percentage', mirror) }] } },
  };
}

/** The part of a TraefikService a mirror is read from. */
export interface MirroringOf {
  spec?: { mirroring?: { name?: string; mirrors?: { name?: string; percent?: number }[] } };
}

/** The part of an HTTPRoute the routes are read from. */
export interface RulesOf {
  metadata?: { name?: string };
  spec?: {
    rules?: {
      matches?: { headers?: unknown[] }[];
      backendRefs?: { kind?: string; name?: string; weight?: number }[];
      filters?: { type?: string; requestMirror?: { backendRef?: { name?: string }; percent?: number; fraction?: { numerator?: number; denominator?: number } } }[];
    }[];
  };
}

/**
 * Reads an HTTPRoute (as rendered, or as read back from the cluster) the way a Gateway routes: the shares of its
 * weighted rule (the one without header matches) by Service, as percentages (the API's weights are relative; a
 * backend without one counts 1), whether another rule sends requests to the canary, and the mirror: a RequestMirror
 * filter's, or that of the TraefikService standing for stable (`mirroring`, read back too). Null for no route.
 */
export function readHTTPRouteWeights(route: RulesOf | null, app: { metadata: { name: string } }, mirroring: MirroringOf | null = null): RouteWeights | null {
  if (!route) return null;
  const rules = route.spec?.rules ?? [];
  const hasHeaders = (r: (typeof rules)[number]) => (r.matches ?? []).some((m) => (m.headers ?? []).length > 0);
  const primary = rules.find((r) => !hasHeaders(r)) ?? rules.at(-1);
  const refs = primary?.backendRefs ?? [];
  const raw = (r: { weight?: number }) => r.weight ?? 1;
  const sum = refs.reduce((n, r) => n + raw(r), 0);
  const canaryService = canaryName(app);
  const viaMirror = (r: { kind?: string; name?: string }) => r.kind === 'TraefikService' && r.name === mirrorServiceName(app)
    && mirroring?.spec?.mirroring?.name === stableServiceName(app);
  // Weights are relative: as percentages of the rule's whole.
  const share = (is: (r: { kind?: string; name?: string }) => boolean) => (sum === 0 ? 0 : Math.round((refs.filter(is).reduce((n, r) => n + raw(r), 0) * 100) / sum));
  const stable = share((r) => (r.name === stableServiceName(app) && (r.kind ?? 'Service') === 'Service') || viaMirror(r));
  const canary = share((r) => r.name === canaryService && (r.kind ?? 'Service') === 'Service');
  const headerRoute = rules.some((r) => r !== primary && (r.backendRefs ?? []).some((b) => b.name === canaryService && raw(b) > 0));
  const filter = primary?.filters?.find((f) => f.type === 'RequestMirror' && f.requestMirror?.backendRef?.name === canaryService)?.requestMirror;
  const traefik = refs.some(viaMirror) ? mirroring?.spec?.mirroring?.mirrors?.find((m) => m.name === canaryService)?.percent ?? 0 : 0;
  const mirror = filter ? filter.percent ?? (filter.fraction ? Math.round(((filter.fraction.numerator ?? 0) * 100) / (filter.fraction.denominator ?? 100)) : 100) : traefik;
  return { stable, canary, total: sum === 0 ? 0 : 100, headerRoute, mirror };
}
