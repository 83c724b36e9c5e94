// The rollouts scenario: N Applications with a mesh converged by one operator process (bench/operator-run.ts), then a
// canary started on all N at once (steps: weight 20, a timed pause, weight 50, an approval) and, once every one waits
// at its approval, all N promoted at once. What many rollouts at the same time cost the operator: how long until the
// first weight, how late the timed pauses end, and how long a promote takes when N are asked together. Every time is
// taken from watches of the namespace's Applications and VirtualServices (one list each, then only changes): no
// per-app polling, so the benchmark does not load the API server the rollouts run against.
import { API_VERSION, KIND } from '../api/constants.ts';
import { control } from '../client/control.ts';
import { Reflector } from '../kube/reflector.ts';
import { collectionPath } from '../kube/resources.ts';
import { eventually, StopPolling } from '../lib/poll.ts';
import { kinds } from '../render/children.ts';
import { readRouteWeights } from '../render/istio.ts';
import { rolloutWorkflowId } from '../workflows/contract.ts';
import { byVerb, counterDelta, delta, minus } from './apiserver.ts';
import { cpuDelta, cpuSnapshot, stackPids, type CpuSnapshot } from './cpu.ts';
import type { Ctx } from './context.ts';
import type { LoadSummary } from './load.ts';
import type { LiveRun } from './operator-run.ts';
import type { PromoteFloorResult } from './promote-floor.ts';
import { canarySpec, plan } from './rollout-plan.ts';
import { probeByVerb, sumProbes, type ProbeCounts } from './operators.ts';
import { millis } from './temporal.ts';
import { distribution, phase, pool, progress, retrying, type Distribution } from './util.ts';

/** What the watches saw of one app, ms since epoch (the time the event reached the benchmark). */
export interface AppTimes {
  /** The merge patch that enabled the canary was answered. */
  patchedAt?: number;
  /** The VirtualService first read canary = firstWeight, then secondWeight. */
  firstWeightAt?: number;
  secondWeightAt?: number;
  /** The timed pause's end as the rollout published it (status.canary.pauseEndsAt). */
  pauseEndsAt?: number;
  /** First status seen at the approval: phase Paused at approvalStep, weight secondWeight. */
  approvalAt?: number;
  promoteSentAt?: number;
  promoteAcceptedAt?: number;
  /** After the promote was sent: the VirtualService first read 100% stable, then status.canary.phase Promoted. */
  stableAt?: number;
  promotedAt?: number;
  /** A rollout that ended otherwise (RolledBack, Aborted, Failed), with its message. */
  ended?: string;
}

/** Timer lateness from rollout workflow histories (ms): the server firing it, and the workflow task that saw it starting. */
export interface TimerLateness {
  histories: number;
  timers: number;
  fired: Distribution | null;
  seen: Distribution | null;
}

export interface RolloutsResult {
  apps: number;
  plan: typeof plan;
  /** Spec change answered -> VirtualService at firstWeight (ms). */
  toFirstWeightMs: number[];
  /** VirtualService at secondWeight - (VirtualService at firstWeight + pause): how late the timed pause ended, as traffic shows it (ms). */
  pauseLatenessMs: number[];
  /** VirtualService at secondWeight - status.canary.pauseEndsAt: the same against the end the rollout set itself (ms). */
  pauseLatenessFromEndMs: number[];
  /** Promote request sent -> VirtualService at 100% stable (ms); the targets judge this one. */
  promoteMs: number[];
  /** Promote update accepted -> VirtualService at 100% stable (ms), bench/promote.ts's definition. */
  promoteFromAcceptedMs: number[];
  /** Promote request sent -> update accepted (ms). */
  promoteUpdateMs: number[];
  /** Promote request sent -> status.canary.phase Promoted (ms). */
  promotedMs: number[];
  /** Seconds: the N patches, until every app waited at its approval, the N promotes until every one was at 100% stable. */
  startSeconds: number;
  toApprovalSeconds: number;
  promoteSeconds: number;
  timers: TimerLateness | null;
  timersError?: string;
  /** The operator's requests (probe) and all clients' (apiserver_request_total, the bench's own reads subtracted), from the first patch to the last promote. */
  operatorByVerb: Record<string, number>;
  operatorByResource: ProbeCounts;
  allClientsByVerb: Record<string, number>;
  load: { rollout: LoadSummary; promote: LoadSummary };
  /** CPU seconds by component (cpu.ts) in each window: the rollouts up to every approval, then the promotes. */
  cpu?: { rollout: CpuSnapshot; promote: CpuSnapshot };
  memory: { rssAtStartMB: number; rssAtEndMB: number; peakRssMB: number };
  errors: string[];
  log: { warnings: number; errors: number; messages: Record<string, number> };
  /** The same N promotes' writes made directly, no operator (bench/promote-floor.ts); absent with --no-floor. */
  floor?: PromoteFloorResult;
}

/** The per-app figures of a set of AppTimes, each only where both of its ends were seen. */
export function rolloutFigures(times: Iterable<AppTimes>, pauseMs: number): Pick<RolloutsResult, 'toFirstWeightMs' | 'pauseLatenessMs' | 'pauseLatenessFromEndMs' | 'promoteMs' | 'promoteFromAcceptedMs' | 'promoteUpdateMs' | 'promotedMs'> {
  const out = { toFirstWeightMs: [] as number[], pauseLatenessMs: [] as number[], pauseLatenessFromEndMs: [] as number[], promoteMs: [] as number[], promoteFromAcceptedMs: [] as number[], promoteUpdateMs: [] as number[], promotedMs: [] as number[] };
  const push = (list: number[], to: number | undefined, from: number | undefined) => {
    if (to !== undefined && from !== undefined) list.push(to - from);
  };
  for (const t of times) {
    push(out.toFirstWeightMs, t.firstWeightAt, t.patchedAt);
    push(out.pauseLatenessMs, t.secondWeightAt, t.firstWeightAt === undefined ? undefined : t.firstWeightAt + pauseMs);
    push(out.pauseLatenessFromEndMs, t.secondWeightAt, t.pauseEndsAt);
    push(out.promoteMs, t.stableAt, t.promoteSentAt);
    push(out.promoteFromAcceptedMs, t.stableAt, t.promoteAcceptedAt);
    push(out.promoteUpdateMs, t.promoteAcceptedAt, t.promoteSentAt);
    push(out.promotedMs, t.promotedAt, t.promoteSentAt);
  }
  return out;
}

// temporal.api.enums.v1.EventType numbers of the events a timer's lateness is read from.
const WORKFLOW_TASK_STARTED = 5;
const TIMER_STARTED = 17;
const TIMER_FIRED = 18;

/** The parts of a history event timerLateness reads (the proto's shape; eventTime seconds may be a Long). */
export interface TimerEvent {
  eventType?: number | null;
  eventTime?: { seconds?: unknown; nanos?: number | null } | null;
  timerStartedEventAttributes?: { timerId?: string | null; startToFireTimeout?: { seconds?: unknown; nanos?: number | null } | null } | null;
  timerFiredEventAttributes?: { timerId?: string | null } | null;
}

/**
 * For every timer of a history that fired (a cancelled one, ended by a promote or a signal, is left out): how late
 * the server fired it, and how late the workflow task that saw it started, both against TimerStarted + its timeout.
 * The second is what a rollout waits: a gate check or a pause's end runs only once a worker has taken that task.
 */
export function timerLateness(events: readonly TimerEvent[]): { firedMs: number[]; seenMs: number[] } {
  const due = new Map<string, number>();
  const firedMs: number[] = [];
  const seenMs: number[] = [];
  let waiting: number[] = [];
  for (const ev of events) {
    if (ev.eventType === TIMER_STARTED) {
      const a = ev.timerStartedEventAttributes;
      if (a?.timerId) due.set(a.timerId, millis(ev.eventTime) + millis(a.startToFireTimeout));
    } else if (ev.eventType === TIMER_FIRED) {
      const at = due.get(ev.timerFiredEventAttributes?.timerId ?? '');
      if (at === undefined) continue;
      firedMs.push(millis(ev.eventTime) - at);
      waiting.push(at);
    } else if (ev.eventType === WORKFLOW_TASK_STARTED && waiting.length) {
      const started = millis(ev.eventTime);
      seenMs.push(...waiting.map((at) => started - at));
      waiting = [];
    }
  }
  return { firedMs, seenMs };
}

/** Timer lateness over the rollout workflows of up to `sample` apps (each rollout's latest run: with a 2 s gate and a minute's rollout, its only one). */
async function timersOf(ctx: Ctx, ns: string, names: string[], sample: number): Promise<TimerLateness> {
  const picked = names.slice(0, sample);
  const per = await pool(picked, 8, async (name) => {
    const history = await ctx.temporal.workflow.getHandle(rolloutWorkflowId(ns, name)).fetchHistory();
    return timerLateness(history.events ?? []);
  });
  const fired = per.flatMap((p) => p.firedMs);
  const seen = per.flatMap((p) => p.seenMs);
  return { histories: picked.length, timers: fired.length, fired: distribution(fired), seen: distribution(seen) };
}

/** Follows the namespace's Applications and VirtualServices and notes, per app, when each step of its rollout was first seen. */
class RolloutWatch {
  readonly times = new Map<string, AppTimes>();
  private readonly reflectors: Reflector[];

  constructor(ctx: Ctx, ns: string, names: string[]) {
    for (const n of names) this.times.set(n, {});
    // A VirtualService is named after its Application (childName).
    this.reflectors = [
      new Reflector({ kube: ctx.kube, path: collectionPath({ apiVersion: API_VERSION, kind: KIND, namespace: ns }), onEvent: (type, a: any) => {
        if (type !== 'delete') this.onApp(a.metadata.name, a.status?.canary);
      } }),
      new Reflector({ kube: ctx.kube, path: collectionPath({ ...kinds.virtualService, namespace: ns }), onEvent: (type, vs: any) => {
        if (type !== 'delete') this.onRoutes(vs.metadata.name, readRouteWeights(vs));
      } }),
    ];
  }

  async start(): Promise<void> {
    await Promise.all(this.reflectors.map((r) => r.start()));
  }

  async stop(): Promise<void> {
    await Promise.all(this.reflectors.map((r) => r.stop()));
  }

  private onRoutes(name: string, w: ReturnType<typeof readRouteWeights>): void {
    const t = this.times.get(name);
    // Before the patches, the VirtualServices of the converged apps read 100/0: nothing to note.
    if (!t?.patchedAt || !w) return;
    const now = Date.now();
    if (w.canary === plan.firstWeight) t.firstWeightAt ??= now;
    if (w.canary === plan.secondWeight) t.secondWeightAt ??= now;
    if (t.promoteSentAt !== undefined && w.stable === 100 && w.canary === 0) t.stableAt ??= now;
  }

  private onApp(name: string, c: { phase?: string; step?: number; weight?: number; pauseEndsAt?: string; message?: string } | undefined): void {
    const t = this.times.get(name);
    if (!t?.patchedAt || !c) return;
    const now = Date.now();
    if (c.pauseEndsAt && c.step === 1) t.pauseEndsAt ??= Date.parse(c.pauseEndsAt);
    // Weight and step too: the status of the timed pause (Paused, weight 20) is not the approval.
    if (c.phase === 'Paused' && c.step === plan.approvalStep && c.weight === plan.secondWeight) t.approvalAt ??= now;
    if (t.promoteSentAt !== undefined && c.phase === 'Promoted') t.promotedAt ??= now;
    if (c.phase === 'RolledBack' || c.phase === 'Aborted' || c.phase === 'Failed') t.ended ??= `${c.phase}: ${c.message ?? ''}`;
  }
}

/** Waits (reading only what the watches noted, every 500 ms) until `done` holds for every app, or one ended otherwise. */
async function waitAll(ctx: Ctx, live: LiveRun, watch: RolloutWatch, what: string, done: (t: AppTimes) => boolean): Promise<void> {
  let lastReport = Date.now();
  try {
    await eventually(`${what} (timeout ${ctx.opts.timeoutSeconds} s)`, async () => {
      await live.ops.assertAlive();
      const all = [...watch.times.values()];
      const ok = all.filter(done).length;
      const ended = all.filter((t) => t.ended).length;
      if (ok + ended === all.length) return true;
      if (Date.now() - lastReport > 5000) {
        lastReport = Date.now();
        progress(`  ${what}: ${ok}/${all.length}${ended ? `, ${ended} ended otherwise` : ''}`);
      }
      return undefined;
    }, { timeoutMs: ctx.opts.timeoutSeconds * 1000, intervalMs: 500, paced: true });
  } catch (err) {
    if (err instanceof StopPolling) throw err;
    progress(`  TIMED OUT: ${(err as Error).message}`);
  }
}

/** Starts a canary on every app of the converged run at once, then promotes them all at once, and measures both. */
export async function runRollouts(ctx: Ctx, live: LiveRun): Promise<RolloutsResult> {
  const { api, kube, opts } = ctx;
  const ns = live.namespace;
  const errors: string[] = [];
  const proc = live.ops.procs[0]!;
  const rssAtStart = proc.lastRss;
  const watch = new RolloutWatch(ctx, ns, live.names);
  await watch.start();
  try {
    const p0 = sumProbes(await live.ops.probeCounts());
    const m0 = await api.requestCounts();
    const own0 = { ...api.requests };
    const pids = (): [string, number | undefined][] => [...stackPids(ctx.info), ...live.ops.procs.map((p): [string, number] => ['operator', p.pid])];
    const c0 = cpuSnapshot(pids());
    const t0 = Date.now();
    await phase(`rollouts: enable a canary on ${live.names.length} apps at once (${canarySpec.steps.map((s) => JSON.stringify(s)).join(', ')}; gates every ${plan.gateIntervalMs / 1000} s)`, () =>
      Promise.all(live.names.map(async (name) => {
        // Noted before the patch is sent, so that a watch event racing its answer is not dropped; replaced once answered.
        const t = watch.times.get(name)!;
        t.patchedAt = Date.now();
        try {
          await retrying(`patch ${name}`, () => kube.mergePatch({ apiVersion: API_VERSION, kind: KIND, namespace: ns, name }, { spec: { serviceMesh: { canary: canarySpec } } }));
          api.count('PATCH');
          t.patchedAt = Date.now();
        } catch (err) {
          t.ended = `patch failed: ${(err as Error).message}`;
          errors.push(`${name}: ${t.ended}`);
        }
      })));
    const tStarted = Date.now();
    await phase(`rollouts: until every app waits at its approval (weight ${plan.firstWeight}, pause ${plan.pauseMs / 1000} s, weight ${plan.secondWeight})`, () =>
      waitAll(ctx, live, watch, 'at the approval', (t) => t.approvalAt !== undefined && t.secondWeightAt !== undefined));
    const tApproval = Date.now();
    const c1 = cpuSnapshot(pids());
    const waiting = live.names.filter((n) => watch.times.get(n)!.approvalAt !== undefined);
    await phase(`rollouts: promote the ${waiting.length} waiting at once, until each VirtualService reads 100% stable and status says Promoted`, async () => {
      await Promise.all(waiting.map(async (name) => {
        const t = watch.times.get(name)!;
        t.promoteSentAt = Date.now();
        try {
          await control(ctx.temporal, 'promote', ns, name, 'benchmark');
          t.promoteAcceptedAt = Date.now();
        } catch (err) {
          t.ended = `promote failed: ${(err as Error).message}`;
          errors.push(`${name}: ${t.ended}`);
        }
      }));
      await waitAll(ctx, live, watch, 'promoted', (t) => t.promoteSentAt === undefined || (t.stableAt !== undefined && t.promotedAt !== undefined));
    });
    const tEnd = Date.now();
    const c2 = cpuSnapshot(pids());
    const probe = counterDelta(sumProbes(await live.ops.probeCounts()), p0);
    const server = delta(await api.requestCounts(), m0);
    const own = counterDelta(api.requests, own0);
    for (const [name, t] of watch.times) if (t.ended && !errors.some((e) => e.startsWith(`${name}:`))) errors.push(`${name}: ${t.ended}`);
    let timers: TimerLateness | null = null;
    let timersError: string | undefined;
    try {
      timers = await phase(`rollouts: timer lateness from up to ${opts.historySample} rollout histories`, () => timersOf(ctx, ns, live.names, opts.historySample));
    } catch (err) {
      timersError = (err as Error).message;
      progress(`  could not read the rollout histories: ${timersError}`);
    }
    const figures = rolloutFigures(watch.times.values(), plan.pauseMs);
    const d = (v: number[]) => distribution(v);
    progress(`  first weight p50 ${((d(figures.toFirstWeightMs)?.p50 ?? NaN) / 1000).toFixed(2)} s; pause late p50 ${d(figures.pauseLatenessMs)?.p50 ?? '-'} ms, max ${d(figures.pauseLatenessMs)?.max ?? '-'} ms; promote p50 ${((d(figures.promoteMs)?.p50 ?? NaN) / 1000).toFixed(2)} s, p99 ${((d(figures.promoteMs)?.p99 ?? NaN) / 1000).toFixed(2)} s`);
    return {
      apps: live.names.length, plan, ...figures,
      startSeconds: (tStarted - t0) / 1000, toApprovalSeconds: (tApproval - t0) / 1000, promoteSeconds: (tEnd - tApproval) / 1000,
      timers, ...(timersError ? { timersError } : {}),
      operatorByVerb: probeByVerb(probe), operatorByResource: probe,
      // The bench's reads (metric scrapes) are subtracted; its patches are the user's and stay.
      allClientsByVerb: minus(byVerb(server), { LIST: own['LIST'] ?? 0, GET: own['GET'] ?? 0 }),
      load: { rollout: ctx.load.summary(t0, tApproval), promote: ctx.load.summary(tApproval, tEnd) },
      cpu: { rollout: cpuDelta(c1, c0), promote: cpuDelta(c2, c1) },
      memory: { rssAtStartMB: rssAtStart / 2 ** 20, rssAtEndMB: proc.lastRss / 2 ** 20, peakRssMB: proc.peakRss / 2 ** 20 },
      errors,
      log: await live.ops.logSummary(),
    };
  } finally {
    await watch.stop();
  }
}
