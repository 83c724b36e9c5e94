// Istio as a router: the DestinationRule's canary subset selects the canary's pods, the VirtualService's weighted
// route splits requests between the subsets (with a header route before it and a mirror on it). Both are read back.
import { heartbeat } from '@temporalio/activity';
import type { Application } from '../../api/application.ts';
import { CANARY_SUBSET, FIELD_MANAGER, LABEL_VERSION, childName } from '../../api/constants.ts';
import type { KubeObject } from '../../kube/client.ts';
import type { ObjectRef } from '../../kube/resources.ts';
import { sameJson } from '../../lib/json.ts';
import { writtenLastByUs } from '../../kube/managed-fields.ts';
import { kinds } from '../../render/children.ts';
import { readRouteWeights, renderDestinationRule, renderVirtualService, type RoutesOf, type VirtualService } from '../../render/istio.ts';
import { reachesCanary, routesToCanary, type CanaryRoute, type RouteWeights } from '../../routing/route.ts';
import type { ActivityDeps } from '../deps.ts';
import { read } from '../objects.ts';
import type { RouteObservation, TrafficRouter } from './router.ts';

const ref = (app: Application, k: { apiVersion: string; kind: string }): ObjectRef => ({ apiVersion: k.apiVersion, kind: k.kind, namespace: app.metadata.namespace ?? '', name: childName(app) });
const apply = (deps: ActivityDeps, obj: unknown) => deps.kube.apply(obj as KubeObject, { fieldManager: FIELD_MANAGER });

interface SubsetsOf {
  spec?: { subsets?: { name?: string; labels?: Record<string, string> }[] };
}

export const istioRouter: TrafficRouter = {
  async prepare(deps, app, route?: CanaryRoute) {
    await apply(deps, renderDestinationRule(app, { canary: true }));
    if (route && !reachesCanary(route)) await apply(deps, renderVirtualService(app, { canary: route }));
  },

  async setRoute(deps, app, route): Promise<RouteWeights> {
    const rendered = renderVirtualService(app, { canary: route });
    await apply(deps, rendered);
    const read = readRouteWeights(await deps.kube.get<RoutesOf>(ref(app, kinds.virtualService)));
    const expected = readRouteWeights(rendered);
    if (!read || !sameJson(read, expected)) throw new Error(`VirtualService read back as ${JSON.stringify(read)}, expected ${JSON.stringify(expected)}`);
    return read;
  },

  async observe(deps, app, route): Promise<RouteObservation> {
    // A gate check's look: what is in hand while current (the watch delivered no change since, activities/objects.ts).
    const [vs, dr] = await Promise.all([
      read<VirtualService & KubeObject>(deps, ref(app, kinds.virtualService)),
      read<SubsetsOf & KubeObject>(deps, ref(app, kinds.destinationRule)),
    ]);
    const version = app.spec.serviceMesh?.canary?.canaryVersion;
    const target = (dr?.spec?.subsets ?? []).some((s) => s.name === CANARY_SUBSET && s.labels?.[LABEL_VERSION] === version);
    // What the VirtualService should route, rendered from today's spec (a changed retry policy shows as drift too).
    const asIntended = vs !== null && sameJson(vs.spec.http, renderVirtualService(app, { canary: route }).spec.http);
    const specChanged = !asIntended && vs !== null && await writtenLastByUs(deps.kube, ref(app, kinds.virtualService));
    return { routed: readRouteWeights(vs), asIntended, target, ...(specChanged ? { specChanged } : {}) };
  },

  async remove(deps, app, opts) {
    // Without the mesh nothing of Istio's routes this app any more; routes that are gone are not re-created.
    if (!app.spec.serviceMesh?.enabled) return;
    if (await deps.kube.get(ref(app, kinds.virtualService))) {
      await apply(deps, renderVirtualService(app, { canary: null }));
      const read = readRouteWeights(await deps.kube.get<RoutesOf>(ref(app, kinds.virtualService)));
      if (read && (read.stable !== 100 || routesToCanary(read))) throw new Error(`VirtualService read back as ${JSON.stringify(read)} after routing everything to stable`);
      heartbeat('traffic restored to stable');
    }
    if (!opts?.keepTarget && await deps.kube.get(ref(app, kinds.destinationRule))) await apply(deps, renderDestinationRule(app, { canary: false }));
  },
};
