// Every VirtualService version a namespace goes through, judged as it is seen: the weights must sum to 100 and no
// traffic may go to a canary without a ready replica. Used by the canary tests and the chaos run.
import { setTimeout as sleep } from 'node:timers/promises';
import { canaryName, ISTIO_API_VERSION } from '../api/constants.ts';
import { kinds } from '../render/children.ts';
import { readRouteWeights } from '../render/istio.ts';
import { routesToCanary } from '../routing/route.ts';
import { kubeApi, type Json } from './apps.ts';

export interface RouteRecord {
  /** VirtualService versions seen. */
  seen: number;
  /** Versions with canary traffic whose canary could not be read before the VirtualService changed again. */
  unjudged: number;
  violations: string[];
}

/**
 * Polls the namespace's VirtualServices fast and records every version with the canary's ready replicas at that
 * moment. Tolerates API server outages (a fault in progress). A version with canary traffic is a violation only if
 * the VirtualService still says the same after its canary was read; otherwise it is counted as unjudged.
 */
export function recordRoutes(namespace: string): { stop: () => Promise<RouteRecord> } {
  const violations: string[] = [];
  const versions = new Set<string>();
  let unjudged = 0;
  let running = true;
  const loop = (async () => {
    const kube = await kubeApi();
    while (running) {
      try {
        for (const vs of (await kube.list<Json>({ ...kinds.virtualService, namespace })).items) {
          const id = `${vs.metadata.name}@${vs.metadata.resourceVersion}`;
          if (versions.has(id)) continue;
          versions.add(id);
          const w = readRouteWeights(vs)!;
          if (w.total !== 100) violations.push(`route ${id}: weights sum to ${w.total} (${JSON.stringify(vs.spec?.http?.[0]?.route)})`);
          if (!routesToCanary(w)) continue;
          const d = await kube.get<Json>({ apiVersion: kinds.deployment.apiVersion, kind: kinds.deployment.kind, namespace, name: canaryName(vs as { metadata: { name: string } }) });
          const ready = d?.status?.readyReplicas ?? 0;
          if (ready > 0) continue;
          const again = await kube.get<Json>({ apiVersion: ISTIO_API_VERSION, kind: kinds.virtualService.kind, namespace, name: vs.metadata.name });
          if (again?.metadata.resourceVersion === vs.metadata.resourceVersion) {
            violations.push(`route ${id}: ${JSON.stringify(w)} to a canary with ${ready} ready replicas (canary Deployment ${d ? 'exists' : 'absent'})`);
          } else {
            unjudged++;
          }
        }
      } catch {
        // API server down (a fault in progress): try again.
      }
      await sleep(100);
    }
  })();
  return {
    stop: async () => {
      running = false;
      await loop;
      return { seen: versions.size, unjudged, violations };
    },
  };
}
