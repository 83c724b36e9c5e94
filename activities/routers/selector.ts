// Routers without a proxy: the Service `<app>` itself carries the traffic, and a rollout moves its selector.
// - `service` (a blue-green rollout with no router): all or nothing. At 0% the selector pins the stable pods
//   (version=stable); at 100% it selects the new version's pods only. A switch is one write, read back.
// - `replicas` (traffic.router: replicas, a canary without a mesh): at 0% as above; in between the selector takes
//   every version's pods and the canary's share is its share of the pods (approximate: kube-proxy spreads
//   connections, not requests, over the endpoints); at 100% the new version's pods only.
// The Service is the rollout's while it runs (render/children.ts marks it rolloutOwned for these routers); removing
// the canary pins the stable pods before the canary's pods go, and the reconciler's next pass writes its own
// selector back, which pins the stable pods too (the canary Deployment is deleted in the background: its pods may
// outlive the rollout for a moment).
import { ApplicationFailure } from '@temporalio/activity';
import type { Application } from '../../api/application.ts';
import { FIELD_MANAGER, FailureType, LABEL_NAME, LABEL_VERSION, STABLE_VERSION, canaryName, childName } from '../../api/constants.ts';
import type { KubeObject } from '../../kube/client.ts';
import type { ObjectRef } from '../../kube/resources.ts';
import { kinds } from '../../render/children.ts';
import { renderCanaryDeployment } from '../../render/deployment.ts';
import { renderService } from '../../render/service.ts';
import type { CanaryRoute, RouteWeights } from '../../routing/route.ts';
import type { ActivityDeps } from '../deps.ts';
import type { RouteObservation, TrafficRouter } from './router.ts';

interface ServiceOf {
  spec?: { selector?: Record<string, string> };
}
interface ReplicasOf {
  spec?: { replicas?: number };
}

const ref = (app: Application, k: { apiVersion: string; kind: string }, name = childName(app)): ObjectRef =>
  ({ apiVersion: k.apiVersion, kind: k.kind, namespace: app.metadata.namespace ?? '', name });
const apply = (deps: ActivityDeps, obj: unknown) => deps.kube.apply(obj as KubeObject, { fieldManager: FIELD_MANAGER });
const version = (app: Application) => app.spec.serviceMesh!.canary!.canaryVersion!;

/** The canary pods beside `stable` stable pods that give it about `weight`% of the pods (at least one, at most 100). */
export function canaryPodsFor(weight: number, stable: number): number {
  if (weight <= 0) return 0;
  if (weight >= 100) return Math.max(1, stable);
  return Math.min(100, Math.max(1, Math.round((stable * weight) / (100 - weight))));
}

/** The share of the pods the canary has: what a canary by replicas really gets, roughly. */
export function podShare(canary: number, stable: number): number {
  return canary + stable > 0 ? Math.round((100 * canary) / (canary + stable)) : 0;
}

/** Which pods the selector takes: the stable ones, the new version's, or every version's (name only). */
export function selected(selector: Record<string, string> | undefined, app: Application): 'stable' | 'canary' | 'both' | 'other' {
  if (!selector || selector[LABEL_NAME] !== app.metadata.name) return 'other';
  const keys = Object.keys(selector);
  if (keys.length === 1) return 'both';
  if (keys.length === 2 && selector[LABEL_VERSION] === STABLE_VERSION) return 'stable';
  if (keys.length === 2 && selector[LABEL_VERSION] === version(app)) return 'canary';
  return 'other';
}

function weights(canary: number): RouteWeights {
  return { stable: 100 - canary, canary, total: 100, headerRoute: false, mirror: 0 };
}

/** One router over the Service's selector; `replicas` routes between 0 and 100 by scaling the canary. */
function selectorRouter(byReplicas: boolean): TrafficRouter {
  /** The selector and canary size `route` asks for, given the stable Deployment's size now. */
  async function intended(deps: ActivityDeps, app: Application, route: CanaryRoute): Promise<{ pods: 'stable' | 'canary' | 'both'; canaryReplicas?: number; stable: number }> {
    if (route.headers?.length || route.mirror) {
      throw ApplicationFailure.nonRetryable('without a proxy a rollout moves whole pods: header routes and mirrors need traffic.router istio or gatewayAPI', FailureType.InvalidSpec);
    }
    if (route.weight <= 0) return { pods: 'stable', stable: 0 };
    if (route.weight >= 100) return { pods: 'canary', stable: 0 };
    if (!byReplicas) {
      throw ApplicationFailure.nonRetryable(`a blue-green switch sends all or nothing, not ${route.weight}%`, FailureType.InvalidSpec);
    }
    const stable = (await deps.kube.get<ReplicasOf>(ref(app, kinds.deployment)))?.spec?.replicas ?? app.spec.replicas;
    return { pods: 'both', canaryReplicas: canaryPodsFor(route.weight, stable), stable };
  }

  async function read(deps: ActivityDeps, app: Application): Promise<{ pods: ReturnType<typeof selected>; canary: number; stable: number; exists: boolean }> {
    const [svc, canary, stable] = await Promise.all([
      deps.kube.get<ServiceOf>(ref(app, kinds.service)),
      deps.kube.get<ReplicasOf>(ref(app, kinds.deployment, canaryName(app))),
      deps.kube.get<ReplicasOf>(ref(app, kinds.deployment)),
    ]);
    return { pods: selected(svc?.spec?.selector, app), canary: canary?.spec?.replicas ?? 0, stable: stable?.spec?.replicas ?? 0, exists: svc !== null };
  }

  function routedOf(seen: Awaited<ReturnType<typeof read>>): RouteWeights | null {
    if (!seen.exists) return null;
    if (seen.pods === 'stable') return weights(0);
    if (seen.pods === 'canary') return weights(100);
    if (seen.pods === 'both') return { ...weights(podShare(seen.canary, seen.stable)), note: `approximately, by pods: ${seen.canary} canary beside ${seen.stable} stable` };
    return { stable: 0, canary: 0, total: 0, headerRoute: false, mirror: 0 };
  }

  const pin = (app: Application, pods: 'stable' | 'canary' | 'both') =>
    renderService(app, pods === 'both' ? {} : { version: pods === 'stable' ? STABLE_VERSION : version(app) });

  return {
    async prepare(deps, app, route) {
      // Before the canary's pods exist: the Service must not take them while the rollout routes 0% to them.
      if (route) await this.setRoute(deps, app, route);
    },

    async setRoute(deps, app, route) {
      const want = await intended(deps, app, route);
      // More canary pods before the selector takes them; fewer after (never a moment with the canary over its share).
      if (want.canaryReplicas !== undefined) await apply(deps, renderCanaryDeployment(app, { replicas: want.canaryReplicas }));
      await apply(deps, pin(app, want.pods));
      const seen = await read(deps, app);
      if (seen.pods !== want.pods || (want.canaryReplicas !== undefined && seen.canary !== want.canaryReplicas)) {
        throw new Error(`Service ${app.metadata.name} read back selecting ${seen.pods} pods (canary replicas ${seen.canary}), expected ${want.pods}${want.canaryReplicas !== undefined ? ` with ${want.canaryReplicas} canary replicas` : ''}`);
      }
      return routedOf(seen)!;
    },

    async observe(deps, app, route): Promise<RouteObservation> {
      const want = await intended(deps, app, route).catch(() => undefined);
      const seen = await read(deps, app);
      const asIntended = want !== undefined && seen.pods === want.pods && (want.canaryReplicas === undefined || seen.canary === want.canaryReplicas);
      return { routed: routedOf(seen), asIntended, target: true };
    },

    async remove(deps, app) {
      if (!(await deps.kube.get(ref(app, kinds.service)))) return;
      await apply(deps, pin(app, 'stable'));
      const seen = await read(deps, app);
      if (seen.pods !== 'stable') throw new Error(`Service ${app.metadata.name} read back selecting ${seen.pods} pods after pinning the stable ones`);
    },
  };
}

export const serviceRouter = selectorRouter(false);
export const replicasRouter = selectorRouter(true);
