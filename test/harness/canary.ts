import { kubeApi, type Json } from './apps.ts';

/** Weights of the VirtualService's route, by subset (a lone weightless destination gets 100). */
export function routeWeights(vs: Json | null): { stable: number; canary: number; total: number } | null {
  const routes: Json[] = vs?.spec?.http?.[0]?.route ?? [];
  if (!vs) return null;
  const w = (r: Json) => r.weight ?? (routes.length === 1 ? 100 : 0);
  const by = (subset: string) => routes.filter((r) => r.destination?.subset === subset).reduce((n, r) => n + w(r), 0);
  return { stable: by('stable'), canary: by('canary'), total: routes.reduce((n, r) => n + w(r), 0) };
}

/**
 * Records every VirtualService version seen in a namespace (polling fast) with the canary's ready replicas at that
 * moment, so a test can assert that weights always summed to 100 and no traffic went to a canary with no ready pod.
 */
export function recordRoutes(namespace: string): { stop: () => Promise<{ seen: number; violations: string[] }> } {
  const violations: string[] = [];
  const versions = new Set<string>();
  let running = true;
  const loop = (async () => {
    const kube = await kubeApi();
    while (running) {
      const list = await kube.list<Json>(`/apis/networking.istio.io/v1/namespaces/${namespace}/virtualservices`).catch(() => ({ items: [] as Json[] }));
      for (const vs of list.items) {
        const id = `${vs.metadata.name}@${vs.metadata.resourceVersion}`;
        if (versions.has(id)) continue;
        versions.add(id);
        const w = routeWeights(vs)!;
        if (w.total !== 100) violations.push(`${id}: weights sum to ${w.total}`);
        if (w.canary > 0) {
          const d = await kube.get<Json>({ apiVersion: 'apps/v1', kind: 'Deployment', namespace, name: `${vs.metadata.name}-canary` });
          if (!d || !(d.status?.readyReplicas > 0)) violations.push(`${id}: ${w.canary}% to a canary with ${d?.status?.readyReplicas ?? 0} ready replicas`);
        }
      }
      await new Promise((r) => setTimeout(r, 100));
    }
  })();
  return {
    stop: async () => {
      running = false;
      await loop;
      return { seen: versions.size, violations };
    },
  };
}
