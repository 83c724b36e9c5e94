// The benchmark's Applications: their names, their namespace, and creating them the way a busy user would.
import { type KubeObject } from '../kube/client.ts';
import { appManifest } from '../testkit/apps.ts';
import type { Ctx } from './context.ts';
import { pool, progress, retrying } from './util.ts';

/** N names that sort in creation order: app-00, app-01, ... */
export const appNames = (n: number, prefix = 'app') => Array.from({ length: n }, (_, i) => `${prefix}-${String(i).padStart(String(n - 1).length, '0')}`);

export async function createNamespace(ctx: Ctx, name: string): Promise<void> {
  await ctx.kube.create({ apiVersion: 'v1', kind: 'Namespace', metadata: { name } });
  ctx.api.count('POST');
}

/** Creates the Applications, `--create-concurrency` at a time; records when each create was answered (ms since epoch). */
export async function createApps(ctx: Ctx, namespace: string, names: string[], spec: Record<string, unknown>, createdAt?: Map<string, number>): Promise<void> {
  let done = 0;
  let lastReport = Date.now();
  await pool(names, ctx.opts.createConcurrency, async (name) => {
    await retrying(`create Application ${namespace}/${name}`, async () => {
      ctx.api.count('POST');
      try {
        await ctx.kube.create(appManifest(namespace, name, spec) as KubeObject);
      } catch (err) {
        // A retried create whose first attempt landed.
        if ((err as { status?: number }).status !== 409) throw err;
      }
    });
    createdAt?.set(name, Date.now());
    done++;
    if (Date.now() - lastReport > 5000) {
      lastReport = Date.now();
      progress(`  created ${done}/${names.length}`);
    }
  });
}
