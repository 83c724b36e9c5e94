// The floor: the same N Applications with no operator running, read back, rendered with renderChildren and
// server-side applied straight to the API server (no Temporal, no status writes) until every Deployment is available.
// The physical limit of this machine, which the operator's makespan is compared with.
import { randomBytes } from 'node:crypto';
import { collectionPath } from '../kube/resources.ts';
import { eventually } from '../lib/poll.ts';
import { deploymentRolledOut } from '../reconcile/status.ts';
import { kinds } from '../render/children.ts';
import { renderChildren } from '../render/index.ts';
import { byResource, byVerb, counterDelta, delta, minus } from './apiserver.ts';
import { appNames, applyCounted, createApps, createNamespace, readBackApps } from './apps.ts';
import type { Ctx } from './context.ts';
import { cpuDelta, cpuSnapshot, stackPids, type CpuSnapshot } from './cpu.ts';
import type { LoadSummary } from './load.ts';
import { phase, pool, progress } from './util.ts';

export interface FloorResult {
  namespace: string;
  apps: number;
  createSeconds: number;
  renderSeconds: number;
  applySeconds: number;
  applies: number;
  availableSeconds: number;
  /** From the first create to every Deployment available: the operator's makespan is compared with this. */
  makespanSeconds: number;
  api: { allClientsByVerb: Record<string, number>; byResource: Record<string, number> };
  /** CPU seconds by component over the floor's window. */
  cpu: CpuSnapshot;
  /** The machine's load meanwhile. */
  load: LoadSummary;
}

/** Measures the floor in a fresh namespace. */
export async function runFloor(ctx: Ctx): Promise<FloorResult> {
  const { opts, api } = ctx;
  const ns = `bench-floor-${randomBytes(3).toString('hex')}`;
  await createNamespace(ctx, ns);
  const names = appNames(opts.apps);
  const m0 = await api.requestCounts();
  const own0 = { ...api.requests };
  const c0 = cpuSnapshot(stackPids(ctx.info));
  const t0 = Date.now();
  await phase(`floor: create ${opts.apps} Applications (${opts.createConcurrency} at a time, no operator running)`, () => createApps(ctx, ns, names, { image: 'nginx:1.25', replicas: 1 }));
  const tCreated = Date.now();

  const desired = await phase('floor: read the Applications back and render their children', async () =>
    (await readBackApps(ctx, ns, opts.apps, 'floor')).map((app) => renderChildren(app).apply.map((c) => c.object)));
  const tRendered = Date.now();
  const applies = desired.reduce((n, d) => n + d.length, 0);
  await phase(`floor: server-side apply ${applies} children (${opts.applyConcurrency} apps at a time, each app's children in order)`, async () => {
    let done = 0;
    let lastReport = Date.now();
    await pool(desired, opts.applyConcurrency, async (objs) => {
      for (const obj of objs) await applyCounted(ctx, obj);
      done++;
      if (Date.now() - lastReport > 5000) {
        lastReport = Date.now();
        progress(`  applied ${done}/${desired.length} apps`);
      }
    });
  });
  const tApplied = Date.now();
  await phase('floor: wait until every Deployment is available', () => {
    let lastReport = 0;
    return eventually(`every Deployment available (timeout ${opts.timeoutSeconds} s)`, async () => {
      const deps = await api.list(collectionPath({ ...kinds.deployment, namespace: ns }));
      const ready = deps.filter(deploymentRolledOut).length;
      if (ready === opts.apps) return true;
      if (Date.now() - lastReport > 5000) {
        lastReport = Date.now();
        progress(`  ${ready}/${opts.apps} Deployments available`);
      }
      throw new Error(`${ready}/${opts.apps} Deployments available`);
    }, { timeoutMs: opts.timeoutSeconds * 1000, intervalMs: 500 });
  });
  const tAvailable = Date.now();
  const c1 = cpuSnapshot(stackPids(ctx.info));
  const m1 = await api.requestCounts();
  const own = counterDelta(api.requests, own0);
  // The bench's polling is subtracted; its creates and applies are the floor's work and stay.
  const serverDelta = delta(m1, m0);
  return {
    namespace: ns, apps: opts.apps,
    createSeconds: (tCreated - t0) / 1000,
    renderSeconds: (tRendered - tCreated) / 1000,
    applySeconds: (tApplied - tRendered) / 1000,
    applies,
    availableSeconds: (tAvailable - tApplied) / 1000,
    makespanSeconds: (tAvailable - t0) / 1000,
    api: { allClientsByVerb: minus(byVerb(serverDelta), { LIST: own['LIST'] ?? 0, GET: own['GET'] ?? 0 }), byResource: byResource(serverDelta) },
    cpu: cpuDelta(c1, c0),
    load: ctx.load.summary(t0, tAvailable),
  };
}
