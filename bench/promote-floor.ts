// The rollouts scenario's floor: N canaries promoted at once with no operator and no Temporal. The same Applications
// (a mesh and the scenario's canary), their children rendered by the operator's own renderers as they stand at the
// approval (the canary Deployment running, the routes at the second weight) and server-side applied; then, for all
// N at the same moment, the writes a promote cannot do without, each app's in order: the Application's spec.image
// merge-patched to the canary's image, the stable Deployment applied with it, a wait until that Deployment has
// rolled out (a watch of the namespace's Deployments, no polling), and the VirtualService applied at 100% stable.
// No status, no Event, no read-back, no canary removal: what this machine cannot do faster, which the operator's
// promote -> 100% stable is compared with.
import { randomBytes } from 'node:crypto';
import { canaryImage, type Application } from '../api/application.ts';
import { API_VERSION, KIND } from '../api/constants.ts';
import type { KubeObject } from '../kube/client.ts';
import { Reflector } from '../kube/reflector.ts';
import { collectionPath } from '../kube/resources.ts';
import { eventually } from '../lib/poll.ts';
import { deploymentRolledOut, type ObservedDeployment } from '../reconcile/status.ts';
import { kinds } from '../render/children.ts';
import { renderChildren } from '../render/index.ts';
import { noCanaryRoute, type CanaryRoute } from '../routing/route.ts';
import { appNames, applyCounted, createApps, createNamespace, readBackApps } from './apps.ts';
import type { Ctx } from './context.ts';
import { cpuDelta, cpuSnapshot, stackPids, type CpuSnapshot } from './cpu.ts';
import type { LoadSummary } from './load.ts';
import { canarySpec, meshAppSpec, plan } from './rollout-plan.ts';
import { phase, pool, progress, retrying } from './util.ts';

export interface PromoteFloorResult {
  namespace: string;
  apps: number;
  /** Creating the Applications, applying their children at the approval and waiting for every Deployment (s). */
  setupSeconds: number;
  /** Per app: from the common start to the VirtualService at 100% stable answered (ms). */
  promoteMs: number[];
  /** From the common start to the last app's VirtualService (s). */
  promoteSeconds: number;
  /** Requests each promote made: the Application's patch and two applies (the wait is a watch). */
  writesPerApp: number;
  /** CPU seconds by component, and the machine's load, over the promotes. */
  cpu: CpuSnapshot;
  load: LoadSummary;
  errors: string[];
}

/** The one child of `kind` named like the app, rendered as the app's rollout stands at `route`. */
function renderedChild(app: Application, kind: string, route: CanaryRoute): KubeObject {
  const found = renderChildren(app, { canary: route }).apply.find((c) => c.object.kind === kind && c.object.metadata.name === app.metadata.name);
  if (!found) throw new Error(`Application ${app.metadata.name} renders no ${kind} of its name`);
  return found.object;
}

/** Resolves each waiter once the watch shows its Deployment rolled out at its image. */
class RolledOut {
  private readonly seen = new Map<string, ObservedDeployment & KubeObject>();
  private readonly waiters = new Map<string, { image: string; resolve: () => void }>();
  readonly reflector: Reflector;

  constructor(ctx: Ctx, ns: string) {
    this.reflector = new Reflector({ kube: ctx.kube, path: collectionPath({ ...kinds.deployment, namespace: ns }), onEvent: (type, d) => {
      if (type === 'delete') return;
      this.seen.set(d.metadata.name, d);
      this.check(d.metadata.name);
    } });
  }

  count(done: (d: ObservedDeployment) => boolean): number {
    return [...this.seen.values()].filter(done).length;
  }

  until(name: string, image: string, timeoutMs: number): Promise<void> {
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => {
        this.waiters.delete(name);
        reject(new Error(`Deployment ${name} did not roll out ${image} within ${timeoutMs / 1000} s`));
      }, timeoutMs);
      this.waiters.set(name, { image, resolve: () => (clearTimeout(timer), resolve()) });
      this.check(name);
    });
  }

  private check(name: string): void {
    const w = this.waiters.get(name);
    const d = this.seen.get(name) as (ObservedDeployment & { spec?: { template?: { spec?: { containers?: { image?: string }[] } } } }) | undefined;
    if (!w || !d || d.spec?.template?.spec?.containers?.[0]?.image !== w.image || !deploymentRolledOut(d)) return;
    this.waiters.delete(name);
    w.resolve();
  }
}

/** Measures the promote floor in a fresh namespace, which it leaves for the caller to delete. */
export async function runPromoteFloor(ctx: Ctx): Promise<PromoteFloorResult> {
  const { opts, api, kube } = ctx;
  const ns = `bench-promote-floor-${randomBytes(3).toString('hex')}`;
  const errors: string[] = [];
  await createNamespace(ctx, ns);
  const names = appNames(opts.apps);
  const atApproval: CanaryRoute = { weight: plan.secondWeight };
  const watch = new RolledOut(ctx, ns);
  await watch.reflector.start();
  try {
    const t0 = Date.now();
    const apps = await phase(`promote floor: ${opts.apps} Applications with their children as at the approval (weight ${plan.secondWeight}), no operator running`, async () => {
      await createApps(ctx, ns, names, { ...meshAppSpec, serviceMesh: { ...meshAppSpec.serviceMesh, canary: canarySpec } });
      const parsed = await readBackApps(ctx, ns, opts.apps, 'promote floor');
      await pool(parsed, opts.applyConcurrency, async (app) => {
        for (const { object } of renderChildren(app, { canary: atApproval }).apply) await applyCounted(ctx, object);
      });
      // The stable and the canary Deployment of each.
      await eventually(`every Deployment available (timeout ${opts.timeoutSeconds} s)`, () => {
        const ready = watch.count(deploymentRolledOut);
        return Promise.resolve(ready === 2 * opts.apps ? true : undefined);
      }, { timeoutMs: opts.timeoutSeconds * 1000, intervalMs: 500 });
      return parsed;
    });
    const setupSeconds = (Date.now() - t0) / 1000;

    const c0 = cpuSnapshot(stackPids(ctx.info));
    const start = Date.now();
    const promoteMs: number[] = [];
    await phase(`promote floor: all ${apps.length} at once: spec.image patched, stable Deployment applied and rolled out, VirtualService at 100% stable`, () =>
      Promise.all(apps.map(async (app) => {
        const name = app.metadata.name;
        const image = canaryImage(app.spec);
        const promoted: Application = { ...app, spec: { ...app.spec, image } };
        try {
          await retrying(`patch ${name}`, () => {
            api.count('PATCH');
            return kube.mergePatch({ apiVersion: API_VERSION, kind: KIND, namespace: ns, name }, { spec: { image } });
          });
          await applyCounted(ctx, renderedChild(promoted, kinds.deployment.kind, atApproval));
          await watch.until(name, image, opts.timeoutSeconds * 1000);
          await applyCounted(ctx, renderedChild(promoted, kinds.virtualService.kind, noCanaryRoute));
          promoteMs.push(Date.now() - start);
        } catch (err) {
          errors.push(`${name}: ${(err as Error).message}`);
        }
      })));
    const end = Date.now();
    progress(`  promote floor: ${promoteMs.length}/${apps.length} at 100% stable in ${((end - start) / 1000).toFixed(1)} s`);
    return {
      namespace: ns, apps: apps.length, setupSeconds, promoteMs, promoteSeconds: (end - start) / 1000, writesPerApp: 3,
      cpu: cpuDelta(cpuSnapshot(stackPids(ctx.info)), c0), load: ctx.load.summary(start, end), errors,
    };
  } finally {
    await watch.reflector.stop();
  }
}
