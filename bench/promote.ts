// The promote sample: a few Applications with serviceMesh.enabled get a canary at weight 20; once every
// VirtualService reads 80/20 each is promoted through the client library, timing promote update accepted ->
// VirtualService read back at 100% stable -> status.canary.phase Promoted.
import { API_VERSION, KIND } from '../api/constants.ts';
import { control } from '../client/control.ts';
import { eventually } from '../lib/poll.ts';
import { kinds } from '../render/children.ts';
import { readRouteWeights } from '../render/istio.ts';
import { appNames, createApps } from './apps.ts';
import type { Ctx } from './context.ts';
import type { Operators } from './operators.ts';
import { progress } from './util.ts';

export interface PromoteResult {
  sample: number;
  /** Update accepted -> VirtualService read back at 100% stable, per app (ms). */
  latenciesMs: number[];
  /** Time the promote update took to be accepted (ms). */
  updateMs: number[];
  /** Update accepted -> status.canary.phase Promoted (ms). */
  promotedMs: number[];
  errors: string[];
}

/** Times promote on `count` new canaries in the run's namespace, while its operator processes run. */
export async function promoteSample(ctx: Ctx, ns: string, count: number, ops: Operators): Promise<PromoteResult> {
  const { kube } = ctx;
  const names = appNames(count, 'promo');
  const vsRef = (name: string) => ({ apiVersion: kinds.virtualService.apiVersion, kind: kinds.virtualService.kind, namespace: ns, name });
  const appRef = (name: string) => ({ apiVersion: API_VERSION, kind: KIND, namespace: ns, name });
  const result: PromoteResult = { sample: count, latenciesMs: [], updateMs: [], promotedMs: [], errors: [] };
  await createApps(ctx, ns, names, { image: 'nginx:1.25', replicas: 1, serviceMesh: { enabled: true } });
  await eventually(`${count} mesh apps Running`, async () => {
    await ops.assertAlive();
    const apps = await Promise.all(names.map((n) => kube.get<any>(appRef(n))));
    return apps.every((a) => a?.status?.phase === 'Running' && a.status.observedGeneration === a.metadata.generation) ? true : undefined;
  }, { timeoutMs: 180_000, intervalMs: 500 });
  progress(`  ${count} mesh apps Running; enabling a canary at weight 20 on each`);
  await Promise.all(names.map((n) => kube.mergePatch(appRef(n), {
    spec: { serviceMesh: { canary: { enabled: true, canaryVersion: 'v2', weight: 20, healthGates: { interval: '1s', failureThreshold: 10 } } } },
  })));
  await eventually('every VirtualService at 20% canary', async () => {
    await ops.assertAlive();
    const weights = await Promise.all(names.map(async (n) => readRouteWeights(await kube.get<any>(vsRef(n)))));
    return weights.every((w) => w?.canary === 20 && w.stable === 80) ? true : undefined;
  }, { timeoutMs: 180_000, intervalMs: 250 });
  progress('  every VirtualService at 80/20; promoting one at a time');
  for (const name of names) {
    try {
      const sent = Date.now();
      await control(ctx.temporal, 'promote', ns, name, 'benchmark');
      const accepted = Date.now();
      await eventually(`${name} VirtualService at 100% stable`, async () => {
        const w = readRouteWeights(await kube.get<any>(vsRef(name)));
        return w && w.stable === 100 && w.canary === 0 ? true : undefined;
      }, { timeoutMs: 120_000, intervalMs: 100 });
      const routed = Date.now();
      await eventually(`${name} canary phase Promoted`, async () => ((await kube.get<any>(appRef(name)))?.status?.canary?.phase === 'Promoted' ? true : undefined), { timeoutMs: 120_000, intervalMs: 200 });
      const promoted = Date.now();
      result.updateMs.push(accepted - sent);
      result.latenciesMs.push(routed - accepted);
      result.promotedMs.push(promoted - accepted);
      progress(`  ${name}: update accepted in ${accepted - sent} ms; 100% stable after ${routed - accepted} ms; Promoted after ${promoted - accepted} ms`);
    } catch (err) {
      result.errors.push(`${name}: ${(err as Error).message}`);
      progress(`  ${name}: promote failed: ${(err as Error).message}`);
    }
  }
  return result;
}
