// The restart scenario: N Applications converged by one operator process (bench/operator-run.ts), then the operator
// (a) stopped with SIGTERM and started again, (b) killed with SIGKILL (a crash) and started again, and (c) run as two
// --leader-elect replicas whose leader is killed. For each: how long until the new process (the standby) is ready and
// back to idle, what it asked the API server meanwhile, what it added to Temporal, and its peak RSS. A restart of a
// converged operator should cost little: the apps are Running, nothing has changed while it was away.
import { randomBytes } from 'node:crypto';
import { byVerb, counterDelta, delta, isWrite, minus, sum, type RequestCounts } from './apiserver.ts';
import type { Ctx } from './context.ts';
import type { LiveRun } from './operator-run.ts';
import { Operators, probeByVerb, sumProbes, type OperatorProc, type ProbeCounts } from './operators.ts';
import { temporalCost, type EventCounts } from './temporal.ts';
import { phase, progress } from './util.ts';
import { eventually } from '../lib/poll.ts';

/** Lease requests: a leader renews every 2 s and a standby reads every 2 s, so they never go quiet; counted apart. */
const LEASES = / coordination\.k8s\.io\/leases$/;

const READ_VERBS = new Set(['GET', 'LIST', 'WATCH']);

export interface RestartCase {
  name: string;
  /** How long the old process took to exit after the signal (null for the failover, whose standby never stops). */
  stopSeconds: number | null;
  /** What "ready" means for this case. */
  readyMeans: string;
  /** From the new process's spawn (failover: the leader's SIGKILL) to ready. */
  readySeconds: number;
  /** From the same moment to the operator's last API request before --quiet-seconds without one; null: still busy at the timeout. */
  idleSeconds: number | null;
  /** The operator's requests from that moment until idle (probe), Lease requests included. */
  operatorByVerb: Record<string, number>;
  operatorByResource: ProbeCounts;
  /** apiserver_request_total deltas over the window (all clients: controllers and kwok too), the bench's own reads subtracted. */
  allClientsByVerb: Record<string, number>;
  /** Reads (GET, LIST, WATCH) and writes by the operator in the window, Lease requests left out. */
  reads: number;
  writes: number;
  leaseRequests: number;
  /** Temporal history events in the window (all Application workflows, extrapolated from --history-sample histories). */
  temporal: EventCounts | null;
  temporalError?: string;
  peakRssMB: number;
  log: { warnings: number; errors: number; messages: Record<string, number> };
}

export interface RestartResult {
  apps: number;
  quietSeconds: number;
  cases: RestartCase[];
}

/** Reads, writes and Lease requests of a probe count (Lease requests are neither reads nor writes here). */
export function readsAndWrites(c: ProbeCounts): { reads: number; writes: number; leaseRequests: number } {
  const byVerb = probeByVerb(Object.fromEntries(Object.entries(c).filter(([k]) => !LEASES.test(k))));
  return {
    reads: sum(byVerb, (v) => READ_VERBS.has(v)),
    writes: sum(byVerb, isWrite),
    leaseRequests: sum(Object.fromEntries(Object.entries(c).filter(([k]) => LEASES.test(k)))),
  };
}

interface Window {
  name: string;
  stopSeconds: number | null;
  readyMeans: string;
  ops: Operators;
  /** The processes whose requests are counted and whose quiet ends the window. */
  procs: OperatorProc[];
  from: number;
  readyAt: number;
  /** Their probe counts at `from`. */
  before: ProbeCounts;
  /** apiserver_request_total and the benchmark's own requests at `from`. */
  server: RequestCounts;
  own: Record<string, number>;
}

/** What a window starts from on the API server's side. */
async function serverAt(ctx: Ctx): Promise<Pick<Window, 'server' | 'own'>> {
  return { server: await ctx.api.requestCounts(), own: { ...ctx.api.requests } };
}

/** Waits until the window's processes are idle, then counts what they did since `from`. */
async function measure(ctx: Ctx, live: LiveRun, w: Window): Promise<RestartCase> {
  const { opts } = ctx;
  const last = await phase(`restart ${w.name}: until the operator is back to idle (no API request for ${opts.quietSeconds} s)`, () =>
    w.ops.lastRequestBeforeQuiet(w.procs, { quietMs: opts.quietSeconds * 1000, timeoutMs: opts.timeoutSeconds * 1000, ignore: LEASES }));
  const counts = counterDelta(sumProbes(await w.ops.probeCounts(w.procs)), w.before);
  const server = delta(await ctx.api.requestCounts(), w.server);
  const own = counterDelta(ctx.api.requests, w.own);
  let temporal: EventCounts | null = null;
  let temporalError: string | undefined;
  try {
    // temporalCost's "idle" part is this window: from `from` to now (the quiet time after the last request included,
    // so a workflow task completing just after it is counted).
    temporal = (await temporalCost(ctx.temporal, live.taskQueue, { idleFrom: w.from, idleTo: Date.now() }, opts.historySample)).idle;
  } catch (err) {
    temporalError = (err as Error).message;
  }
  const rw = readsAndWrites(counts);
  const out: RestartCase = {
    name: w.name, stopSeconds: w.stopSeconds, readyMeans: w.readyMeans,
    readySeconds: (w.readyAt - w.from) / 1000,
    idleSeconds: last === null ? null : (last - w.from) / 1000,
    operatorByVerb: probeByVerb(counts), operatorByResource: counts, ...rw,
    // The bench's reads (Lease polls, metric scrapes) are subtracted.
    allClientsByVerb: minus(byVerb(server), { LIST: own['LIST'] ?? 0, GET: own['GET'] ?? 0 }),
    temporal, ...(temporalError ? { temporalError } : {}),
    peakRssMB: Math.max(...w.procs.map((p) => p.peakRss)) / 2 ** 20,
    log: await w.ops.logSummary(),
  };
  progress(`  ${w.name}: ready ${out.readySeconds.toFixed(1)} s, idle ${out.idleSeconds?.toFixed(1) ?? 'never'} s; ${rw.reads} reads, ${rw.writes} writes (${rw.leaseRequests} Lease requests); peak RSS ${out.peakRssMB.toFixed(0)} MB`);
  return out;
}

/** Stops the running operator with `signal`, starts one new process and measures it. */
async function restartOnce(ctx: Ctx, live: LiveRun, current: Operators, signal: 'SIGTERM' | 'SIGKILL', tag: string, name: string): Promise<{ ops: Operators; result: RestartCase }> {
  const t0 = Date.now();
  await phase(`restart ${name}: ${signal} the operator`, () => current.stop(signal));
  const stopSeconds = (Date.now() - t0) / 1000;
  const ops = new Operators();
  ctx.cleanups.push(() => ops.stop());
  const at = await serverAt(ctx);
  await phase(`restart ${name}: start a new process`, () => ops.start({ namespace: live.namespace, taskQueue: live.taskQueue, workers: 1, logDir: ctx.logDir, extraArgs: ctx.opts.operatorArgs, extraEnv: ctx.opts.operatorEnv, tag }));
  const p = ops.procs[0]!;
  ctx.operatorPids.splice(0, ctx.operatorPids.length, ['operator', p.pid]);
  const result = await measure(ctx, live, { name, stopSeconds, readyMeans: '/readyz answers 200', ops, procs: [p], from: p.startedAt, readyAt: p.readyAt, before: {}, ...at });
  return { ops, result };
}

/** The pid in the Lease's holderIdentity (`<hostname>_<pid>`, operator/leader.ts), or undefined when nobody holds it. */
async function leaseHolderPid(ctx: Ctx, namespace: string, lease: string): Promise<number | undefined> {
  const body = await ctx.api.get(`/apis/coordination.k8s.io/v1/namespaces/${namespace}/leases/${lease}`).catch(() => '{}');
  const holder = (JSON.parse(body) as { spec?: { holderIdentity?: string } }).spec?.holderIdentity;
  const pid = Number(holder?.slice(holder.lastIndexOf('_') + 1));
  return Number.isInteger(pid) && pid > 0 ? pid : undefined;
}

/** Two --leader-elect replicas; once the leader has settled, it is SIGKILLed and the standby is measured taking over. */
async function failover(ctx: Ctx, live: LiveRun): Promise<RestartCase> {
  const name = '(c) leader SIGKILL, standby takes over';
  const leaseName = `bench-leader-${randomBytes(3).toString('hex')}`;
  const ops = new Operators();
  ctx.cleanups.push(() => ops.stop());
  try {
    await phase(`restart ${name}: start two --leader-elect replicas (Lease ${leaseName})`, () => ops.start({
      namespace: live.namespace, taskQueue: live.taskQueue, workers: 2, logDir: ctx.logDir, extraArgs: ctx.opts.operatorArgs, extraEnv: ctx.opts.operatorEnv, tag: 'failover', leaderElect: { leaseName },
    }));
    ctx.operatorPids.splice(0, ctx.operatorPids.length, ...ops.procs.map((p): [string, number] => ['operator', p.pid]));
    const leader = await phase(`restart ${name}: until one leads and both are idle`, async () => {
      const pid = await eventually('a replica holding the Lease', () => leaseHolderPid(ctx, live.namespace, leaseName), { timeoutMs: 60_000, intervalMs: 250 });
      await ops.lastRequestBeforeQuiet(ops.procs, { quietMs: ctx.opts.quietSeconds * 1000, timeoutMs: ctx.opts.timeoutSeconds * 1000, ignore: LEASES });
      const holder = ops.procs.find((p) => p.pid === pid);
      if (!holder) throw new Error(`the Lease is held by pid ${pid}, neither replica (${ops.procs.map((p) => p.pid).join(', ')})`);
      return holder;
    });
    const standby = ops.procs.find((p) => p !== leader)!;
    const [before] = await ops.probeCounts([standby]);
    const at = await serverAt(ctx);
    const from = Date.now();
    await leader.process.stop('SIGKILL');
    const readyAt = await phase(`restart ${name}: until the standby (pid ${standby.pid}) holds the Lease`, () => eventually('the standby holding the Lease', async () => {
      return (await leaseHolderPid(ctx, live.namespace, leaseName)) === standby.pid ? Date.now() : undefined;
    }, { timeoutMs: ctx.opts.timeoutSeconds * 1000, intervalMs: 100 }));
    return await measure(ctx, live, { name, stopSeconds: null, readyMeans: 'the standby holds the Lease', ops, procs: [standby], from, readyAt, before: before ?? {}, ...at });
  } finally {
    await ops.stop();
  }
}

/** The three restarts, on the converged run's namespace and task queue. */
export async function runRestarts(ctx: Ctx, live: LiveRun): Promise<RestartResult> {
  const cases: RestartCase[] = [];
  const a = await restartOnce(ctx, live, live.ops, 'SIGTERM', 'restart', '(a) SIGTERM, new process');
  cases.push(a.result);
  const b = await restartOnce(ctx, live, a.ops, 'SIGKILL', 'crash', '(b) SIGKILL, new process');
  cases.push(b.result);
  await b.ops.stop();
  cases.push(await failover(ctx, live));
  return { apps: live.names.length, quietSeconds: ctx.opts.quietSeconds, cases };
}
