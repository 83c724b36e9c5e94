// The Gateway API as a router: the Service `<app>-canary` selects the canary's pods, the HTTPRoute `<app>` weights
// it against `<app>-stable` (with a header-matching rule and a RequestMirror filter). Read back and compared in the
// API's own terms, after the defaults the API server fills in.
import { heartbeat } from '@temporalio/activity';
import type { Application } from '../../api/application.ts';
import { FIELD_MANAGER, LABEL_VERSION, canaryName, childName, mirrorServiceName } from '../../api/constants.ts';
import type { KubeObject } from '../../kube/client.ts';
import type { ObjectRef } from '../../kube/resources.ts';
import { sameJson } from '../../lib/json.ts';
import { writtenLastByUs } from '../../kube/managed-fields.ts';
import { kinds } from '../../render/children.ts';
import { readHTTPRouteWeights, renderHTTPRoute, renderMirrorService, renderRouteService, type MirroringOf, type RulesOf } from '../../render/gateway.ts';
import { reachesCanary, routesToCanary, type CanaryRoute, type RouteWeights } from '../../routing/route.ts';
import type { ActivityDeps } from '../deps.ts';
import { deleteIfOurs, read as readObject, refuseTaken } from '../objects.ts';
import type { RouteObservation, TrafficRouter } from './router.ts';

const ns = (app: Application) => app.metadata.namespace ?? '';
const routeRef = (app: Application): ObjectRef => ({ apiVersion: kinds.httpRoute.apiVersion, kind: kinds.httpRoute.kind, namespace: ns(app), name: childName(app) });
const canaryServiceRef = (app: Application): ObjectRef => ({ apiVersion: kinds.service.apiVersion, kind: kinds.service.kind, namespace: ns(app), name: canaryName(app) });
const mirrorRef = (app: Application): ObjectRef => ({ apiVersion: kinds.traefikService.apiVersion, kind: kinds.traefikService.kind, namespace: ns(app), name: mirrorServiceName(app) });
const onTraefik = (app: Application) => app.spec.traffic?.gatewayAPI?.implementation === 'traefik';

/** Traefik's mirroring service, when the app is served by Traefik (null elsewhere, and when there is none). */
async function mirroring(deps: ActivityDeps, app: Application): Promise<MirroringOf | null> {
  return onTraefik(app) ? deps.kube.get<MirroringOf>(mirrorRef(app)) : null;
}

/** The route and, on Traefik, its mirroring service, read back the way a Gateway uses them. */
async function readBack(deps: ActivityDeps, app: Application) {
  const [route, mirror] = await Promise.all([deps.kube.get<RulesOf>(routeRef(app)), mirroring(deps, app)]);
  return readHTTPRouteWeights(route, app, mirror);
}
const apply = (deps: ActivityDeps, obj: unknown) => deps.kube.apply(obj as KubeObject, { fieldManager: FIELD_MANAGER });

/** An HTTPRoute as read back (or as rendered): what its shape is made of. */
interface RouteAsRead {
  spec?: {
    parentRefs?: { name?: string; namespace?: string; sectionName?: string }[];
    hostnames?: string[];
    rules?: {
      matches?: { path?: { type?: string; value?: string }; headers?: { type?: string; name?: string; value?: string }[] }[];
      backendRefs?: { group?: string; kind?: string; name?: string; port?: number; weight?: number }[];
      filters?: { type?: string; requestMirror?: { backendRef?: { name?: string; port?: number }; percent?: number } }[];
    }[];
  };
}

/**
 * What an HTTPRoute routes, in the terms that matter, with the API server's defaults made explicit (a backend's
 * weight 1, an Exact header match), so a route as rendered and as read back compare equal until someone edits it.
 */
export function routeShape(route: RouteAsRead | null): unknown {
  if (!route) return null;
  const spec = route.spec ?? {};
  return {
    parentRefs: (spec.parentRefs ?? []).map((p) => [p.name, p.namespace ?? '', p.sectionName ?? '']),
    hostnames: [...(spec.hostnames ?? [])].sort(),
    rules: (spec.rules ?? []).map((rule) => {
      return {
        matches: (rule.matches ?? []).map((m) => ({
          path: [m.path?.type ?? 'PathPrefix', m.path?.value ?? '/'],
          headers: (m.headers ?? []).map((h) => [h.type ?? 'Exact', (h.name ?? '').toLowerCase(), h.value ?? '']),
        })),
        backendRefs: (rule.backendRefs ?? []).map((b) => [b.group ?? '', b.kind ?? 'Service', b.name, b.port, b.weight ?? 1]),
        filters: (rule.filters ?? []).map((f) => [f.type, f.requestMirror?.backendRef?.name, f.requestMirror?.backendRef?.port, f.requestMirror?.percent ?? 100]),
      };
    }),
  };
}

export const gatewayAPIRouter: TrafficRouter = {
  async prepare(deps, app, route?: CanaryRoute) {
    const canaryService = renderRouteService(app, 'canary') as unknown as KubeObject;
    await refuseTaken(deps, app.metadata, canaryService);
    await apply(deps, canaryService);
    if (route && !reachesCanary(route)) await apply(deps, renderHTTPRoute(app, { canary: route }));
  },

  async setRoute(deps, app, route): Promise<RouteWeights> {
    const rendered = renderHTTPRoute(app, { canary: route });
    const traefikMirror = onTraefik(app) && Boolean(route.mirror);
    // The mirroring service exists before the route names it, and goes only after the route no longer does.
    if (traefikMirror) await apply(deps, renderMirrorService(app, route.mirror ?? 0));
    await apply(deps, rendered);
    if (onTraefik(app) && !traefikMirror) await deleteIfOurs(deps, mirrorRef(app), app.metadata);
    const read = await readBack(deps, app);
    const expected = readHTTPRouteWeights(rendered, app, traefikMirror ? renderMirrorService(app, route.mirror ?? 0) : null);
    if (!read || !sameJson(read, expected)) throw new Error(`HTTPRoute read back as ${JSON.stringify(read)}, expected ${JSON.stringify(expected)}`);
    return read;
  },

  async observe(deps, app, route): Promise<RouteObservation> {
    // A gate check's look: what is in hand while current (the watch delivered no change since, activities/objects.ts).
    const [read, svc, mirror] = await Promise.all([
      readObject<RouteAsRead & KubeObject>(deps, routeRef(app)),
      deps.kube.get<{ spec?: { selector?: Record<string, string> } }>(canaryServiceRef(app)),
      mirroring(deps, app),
    ]);
    const target = svc?.spec?.selector?.[LABEL_VERSION] === app.spec.serviceMesh?.canary?.canaryVersion;
    const traefikMirror = onTraefik(app) && Boolean(route.mirror);
    const mirrorAsIntended = !traefikMirror || sameJson(mirror?.spec?.mirroring, renderMirrorService(app, route.mirror ?? 0).spec.mirroring);
    const asIntended = read !== null && mirrorAsIntended && sameJson(routeShape(read), routeShape(renderHTTPRoute(app, { canary: route })));
    const specChanged = !asIntended && read !== null && mirrorAsIntended && await writtenLastByUs(deps.kube, routeRef(app));
    return { routed: readHTTPRouteWeights(read, app, mirror), asIntended, target, ...(specChanged ? { specChanged } : {}) };
  },

  async remove(deps, app, opts) {
    if (await deps.kube.get(routeRef(app))) {
      await apply(deps, renderHTTPRoute(app, { canary: null }));
      const read = await readBack(deps, app);
      if (read && (read.stable !== 100 || routesToCanary(read))) throw new Error(`HTTPRoute read back as ${JSON.stringify(read)} after routing everything to stable`);
      heartbeat('traffic restored to stable');
    }
    if (opts?.keepTarget) return;
    if (onTraefik(app)) await deleteIfOurs(deps, mirrorRef(app), app.metadata);
    await deleteIfOurs(deps, canaryServiceRef(app), app.metadata);
  },
};
