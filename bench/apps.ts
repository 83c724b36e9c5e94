// The benchmark's Applications: their names, their namespace, and creating them the way a busy user would.
import { parseApplication, type Application } from '../api/application.ts';
import { API_VERSION, FIELD_MANAGER, KIND } from '../api/constants.ts';
import { type KubeObject } from '../kube/client.ts';
import { collectionPath } from '../kube/resources.ts';
import { eventually } from '../lib/poll.ts';
import { finalizerPolicyLabel } from '../stack/stack.ts';
import { appManifest } from '../testkit/apps.ts';
import { byResource, byVerb, counterDelta, delta, minus } from './apiserver.ts';
import type { Ctx } from './context.ts';
import { PhaseError, pool, progress, retrying } from './util.ts';

/** N names that sort in creation order: app-00, app-01, ... */
export const appNames = (n: number, prefix = 'app') => Array.from({ length: n }, (_, i) => `${prefix}-${String(i).padStart(String(n - 1).length, '0')}`);

/**
 * A namespace for the run; one an operator watches (`operator`) is bound to the chart's finalizer policy unless
 * --no-finalizer-policy, as the chart binds the namespaces it watches. The floor's is not: nothing would release a
 * finalizer there.
 */
export async function createNamespace(ctx: Ctx, name: string, opts: { operator?: boolean } = {}): Promise<void> {
  const labels = opts.operator && ctx.opts.finalizerPolicy ? { labels: { [finalizerPolicyLabel.key]: finalizerPolicyLabel.value } } : {};
  await ctx.kube.create({ apiVersion: 'v1', kind: 'Namespace', metadata: { name, ...labels } });
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

/**
 * The namespace's Applications read back and parsed, with no operator running: a consistent list (the watch cache
 * may not have every create yet), which must hold `expected` of them.
 */
export async function readBackApps(ctx: Ctx, namespace: string, expected: number, what: string): Promise<Application[]> {
  const list = await ctx.api.list(collectionPath({ apiVersion: API_VERSION, kind: KIND, namespace }), { consistent: true });
  const apps = list.map((raw) => {
    const parsed = parseApplication(raw);
    if (!parsed.ok) throw new Error(`Application ${raw?.metadata?.name} does not parse: ${parsed.message}`);
    return parsed.app;
  });
  if (apps.length !== expected) throw new PhaseError(`${what}: read back`, `listed ${apps.length} Applications, created ${expected}`);
  return apps;
}

/** One object server-side applied as the operator's field manager, retried and counted: what the floors write. */
export function applyCounted(ctx: Ctx, obj: KubeObject): Promise<KubeObject> {
  return retrying(`apply ${obj.kind} ${obj.metadata.namespace ?? ''}/${obj.metadata.name}`, () => {
    ctx.api.count('APPLY');
    return ctx.kube.apply(obj, { fieldManager: FIELD_MANAGER });
  });
}

/** A namespace deleted and timed until the API server no longer has it (every finalizer in it released). */
export interface NamespaceDeletion {
  namespace: string;
  /** From the delete being answered to the first read (every 250 ms) that found no namespace; null: still there at the timeout. */
  seconds: number | null;
  /** Applications still there at the timeout (0 when it went). */
  appsLeft: number;
  /** apiserver_request_total deltas over the window, all clients, the benchmark's own reads subtracted. */
  allClientsByVerb: Record<string, number>;
  allClientsByResource: Record<string, number>;
}

/** Deletes a namespace and waits (up to --timeout-seconds) until it is gone, saying every 5 s how many Applications are left. */
export async function deleteNamespace(ctx: Ctx, name: string): Promise<NamespaceDeletion> {
  const { api, kube, opts } = ctx;
  const apps = collectionPath({ apiVersion: API_VERSION, kind: KIND, namespace: name });
  const appsLeft = async () => (await api.list(apps, { metadataOnly: true })).length;
  const m0 = await api.requestCounts();
  const own0 = { ...api.requests };
  await kube.delete({ apiVersion: 'v1', kind: 'Namespace', name });
  api.count('DELETE');
  const t0 = Date.now();
  let gone: number | null = null;
  let lastReport = t0;
  try {
    gone = await eventually(`namespace ${name} gone (timeout ${opts.timeoutSeconds} s)`, async () => {
      const found = await api.get(`/api/v1/namespaces/${name}`).then(() => true, (err: { status?: number }) => {
        if (err.status === 404) return false;
        throw err;
      });
      if (!found) return Date.now();
      if (Date.now() - lastReport > 5000) {
        lastReport = Date.now();
        progress(`  ${await appsLeft()} Applications left in ${name}`);
      }
      return undefined;
    }, { timeoutMs: opts.timeoutSeconds * 1000, intervalMs: 250, paced: true });
  } catch (err) {
    progress(`  ${(err as Error).message}`);
  }
  const left = gone === null ? await appsLeft() : 0;
  const server = delta(await api.requestCounts(), m0);
  const own = counterDelta(api.requests, own0);
  return {
    namespace: name, seconds: gone === null ? null : (gone - t0) / 1000, appsLeft: left,
    // The bench's reads are subtracted; its DELETE of the namespace is the user's and stays.
    allClientsByVerb: minus(byVerb(server), { LIST: own['LIST'] ?? 0, GET: own['GET'] ?? 0 }),
    allClientsByResource: byResource(server, 20),
  };
}
