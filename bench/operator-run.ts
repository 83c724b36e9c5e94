// One operator run: N fresh Applications with the operator running (1 process in --mode all + K-1 in --mode worker):
// per-app convergence latency and makespan, the cost per app (API requests, Temporal events, CPU), an idle window
// after convergence, memory, the promote sample, and the workflows that ended.
import { randomBytes } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import { API_VERSION, KIND, LABEL_MANAGED_BY, MANAGED_BY, childName } from '../api/constants.ts';
import { Reflector } from '../kube/reflector.ts';
import { collectionPath } from '../kube/resources.ts';
import { eventually, StopPolling } from '../lib/poll.ts';
import { kinds } from '../render/children.ts';
import { byResource, byVerb, counterDelta, delta, isWrite, minus, sum } from './apiserver.ts';
import { appNames, createApps, createNamespace } from './apps.ts';
import type { Ctx } from './context.ts';
import { cpuDelta, cpuSnapshot, stackPids, type CpuSnapshot } from './cpu.ts';
import type { FloorResult } from './floor.ts';
import { Operators, counterBy, histogramMeans, probeByVerb, sumProbes, type ProbeCounts } from './operators.ts';
import { probeFlushMs } from './probe.ts';
import { promoteSample, type PromoteResult } from './promote.ts';
import { sourceHash } from './source.ts';
import { temporalCost, type TemporalCost } from './temporal.ts';
import { distribution, phase, progress, type Distribution } from './util.ts';
import type { LoadSummary } from './load.ts';
import type { MemorySnapshot } from './memory.ts';

export interface RunResult {
  workers: number;
  /** Fingerprint of the operator's sources when this run's processes started (compare with Report.code.bundleSource). */
  sourceHash: string;
  namespace: string;
  taskQueue: string;
  operatorFlags: string[];
  apps: number;
  converged: number;
  failed: { name: string; message: string }[];
  timedOut: boolean;
  latency: Distribution | null;
  latenciesMs: number[];
  makespanSeconds: number;
  createSeconds: number;
  ratioToFloor: number | null;
  api: {
    allClientsByVerb: Record<string, number>;
    operatorByVerb: Record<string, number>;
    operatorByResource: ProbeCounts;
    serverByResource: Record<string, number>;
  };
  temporal: TemporalCost | null;
  temporalError?: string;
  idle: {
    seconds: number;
    operatorByVerb: Record<string, number>;
    operatorWrites: number;
    allClientsWrites: number;
    allClientsWritesByResource: Record<string, number>;
  };
  /** CPU seconds by component: from the first create to convergence, and over the idle window. */
  cpu: { create: CpuSnapshot; idle: CpuSnapshot };
  /** The machine's load from the first create to convergence. */
  load: LoadSummary;
  memory: {
    process: string; readyRssMB: number; peakRssMB: number; endRssMB: number;
    /** The breakdown from its /metrics: once ready, when all apps had converged, and at the scrape with the highest RSS. */
    ready?: MemorySnapshot; converged?: MemorySnapshot; peak?: MemorySnapshot;
  }[];
  /** Workflows of the run's task queue that are no longer running (an Application workflow should never end by itself). */
  closedWorkflows: { workflowId: string; type: string; status: string; failure?: string }[];
  promote: PromoteResult | null;
  diagnostics: {
    signals: Record<string, number>;
    /** New Applications' workflows started with a plain start, by how the first task came (eager, queued, running). */
    starts?: Record<string, number>;
    latencyMeans: Record<string, { count: number; mean: number }>;
    log: { warnings: number; errors: number; messages: Record<string, number> };
  };
}

/** A run that converged and is still running, handed to a scenario that goes on from there (restart, delete). */
export interface LiveRun {
  ops: Operators;
  namespace: string;
  taskQueue: string;
  names: string[];
}

/** The spec of the Applications a run creates, unless its scenario needs more of them (rollouts: a mesh). */
const APP_SPEC = { image: 'nginx:1.25', replicas: 1 };

interface ConvergeOutcome {
  convergedAt: Map<string, number>;
  failed: Map<string, string>;
  timedOut: boolean;
}

/**
 * Follows the namespace's Applications, Deployments and Services with watches (one list each, then only changes)
 * and looks every 500 ms at what they say until every app has converged. Listing every Application every 500 ms
 * instead cost the API server a list of N whole objects twice a second: at 10,000 that was the benchmark loading
 * the system it measures.
 */
async function waitConverged(ctx: Ctx, ns: string, names: string[], createdAt: Map<string, number>, ops: Operators, creating: () => boolean): Promise<ConvergeOutcome> {
  const { opts } = ctx;
  const convergedAt = new Map<string, number>();
  const failed = new Map<string, string>();
  const wanted = new Set(names);
  const apps = new Map<string, { generation?: number; status?: any }>();
  const children = { deployments: new Set<string>(), services: new Set<string>() };
  const selector = `${LABEL_MANAGED_BY}=${MANAGED_BY}`;
  const follow = (path: string, onEvent: (type: 'add' | 'update' | 'delete', obj: any) => void, labelSelector?: string) =>
    new Reflector({ kube: ctx.kube, path, labelSelector, metadataOnly: labelSelector !== undefined, onEvent });
  const track = (set: Set<string>) => (type: 'add' | 'update' | 'delete', obj: any) => {
    if (type === 'delete') set.delete(obj.metadata.name);
    else set.add(obj.metadata.name);
  };
  const reflectors = [
    follow(collectionPath({ apiVersion: API_VERSION, kind: KIND, namespace: ns }), (type, a) => {
      if (!wanted.has(a.metadata.name)) return;
      if (type === 'delete') apps.delete(a.metadata.name);
      else apps.set(a.metadata.name, { generation: a.metadata.generation, status: a.status });
    }),
    follow(collectionPath({ ...kinds.deployment, namespace: ns }), track(children.deployments), selector),
    follow(collectionPath({ ...kinds.service, namespace: ns }), track(children.services), selector),
  ];
  let lastReport = 0;
  try {
    await Promise.all(reflectors.map((r) => r.start()));
    await eventually(`every app converged (timeout ${opts.timeoutSeconds} s)`, async () => {
      const now = Date.now();
      const phases: Record<string, number> = {};
      for (const [name, a] of apps) {
        const s = a.status ?? {};
        const phaseName = s.phase ?? 'no status';
        phases[phaseName] = (phases[phaseName] ?? 0) + 1;
        if (phaseName === 'Failed') failed.set(name, (s.conditions ?? []).find((c: any) => c.type === 'Ready')?.message ?? 'Failed');
        if (convergedAt.has(name) || !createdAt.has(name)) continue;
        const child = childName({ metadata: { name } });
        if (s.observedGeneration === a.generation && s.phase === 'Running' && children.deployments.has(child) && children.services.has(child)) {
          convergedAt.set(name, now);
          failed.delete(name);
        }
      }
      if (convergedAt.size === names.length) return true;
      if (now - lastReport > 5000) {
        lastReport = now;
        const summary = Object.entries(phases).sort().map(([p, n]) => `${p} ${n}`).join(', ');
        progress(`  converged ${convergedAt.size}/${names.length}${creating() ? ` (created ${createdAt.size})` : ''}; phases: ${summary || 'none yet'}`);
      }
      await ops.assertAlive();
      return undefined;
    }, { timeoutMs: opts.timeoutSeconds * 1000, intervalMs: 500, paced: true });
    return { convergedAt, failed, timedOut: false };
  } catch (err) {
    if (err instanceof StopPolling) throw err;
    return { convergedAt, failed, timedOut: true };
  } finally {
    await Promise.all(reflectors.map((r) => r.stop()));
  }
}

/**
 * Runs the operator with `workers` processes on N new Applications in a fresh namespace, and measures it. `then`, when
 * given, runs once everything above is measured, before the processes are stopped (it may stop or replace them).
 * `appSpec` is the Applications' spec (the convergence test is the same: Running, Deployment and Service present).
 */
export async function runOperator(ctx: Ctx, workers: number, floor: FloorResult | null, then?: (live: LiveRun) => Promise<void>, appSpec: Record<string, unknown> = APP_SPEC): Promise<RunResult> {
  const { opts, api } = ctx;
  const id = randomBytes(3).toString('hex');
  const ns = `bench-w${workers}-${id}`;
  const taskQueue = `bench-${id}`;
  const label = `${workers} worker${workers > 1 ? 's' : ''}`;
  await createNamespace(ctx, ns, { operator: true });
  const ops = new Operators();
  ctx.cleanups.push(() => ops.stop());
  try {
    const runSource = await sourceHash();
    if (runSource !== ctx.bundleSource) progress(`  WARNING: the operator's sources changed since the workflow bundle was built (${ctx.bundleSource} -> ${runSource}): this run's activities and watcher run newer code than its workflows`);
    await phase(`operator (${label}): start ${workers} process(es) on task queue ${taskQueue}, watching ${ns}`, () => ops.start({
      namespace: ns, taskQueue, workers, logDir: ctx.logDir, extraArgs: opts.operatorArgs, extraEnv: opts.operatorEnv,
    }));
    for (const p of ops.procs) progress(`  process ${p.index} (--mode ${p.mode}) pid ${p.pid}, log ${p.process.logFile}`);
    ctx.operatorPids.splice(0, ctx.operatorPids.length, ...ops.procs.map((p): [string, number] => ['operator', p.pid]));
    const names = appNames(opts.apps);
    const createdAt = new Map<string, number>();
    const m0 = await api.requestCounts();
    const p0 = sumProbes(await ops.probeCounts());
    const own0 = { ...api.requests };
    const pids = (): [string, number | undefined][] => [...stackPids(ctx.info), ...ops.procs.map((p): [string, number] => ['operator', p.pid])];
    const c0 = cpuSnapshot(pids());
    const t0 = Date.now();
    let creating = true;
    const outcome = await phase(`operator (${label}): create ${opts.apps} Applications and wait until each has converged (timeout ${opts.timeoutSeconds} s)`, async () => {
      const creates = createApps(ctx, ns, names, appSpec, createdAt).finally(() => {
        creating = false;
      });
      const converge = waitConverged(ctx, ns, names, createdAt, ops, () => creating);
      const [, out] = await Promise.all([creates, converge]);
      return out;
    });
    const tCreatesDone = Math.max(...createdAt.values());
    // The idle window starts once the probes have written every request of the convergence tail (they flush every
    // probeFlushMs): a status write just before the last app converged is not an idle write.
    await sleep(2 * probeFlushMs);
    const tConv = Date.now();
    const c1 = cpuSnapshot(pids());
    const m1 = await api.requestCounts();
    const p1 = sumProbes(await ops.probeCounts());
    const own1 = { ...api.requests };
    const metricsAtConv = await ops.metrics();
    await ops.scrapeMemory();
    const memoryAtConv = ops.procs.map((p) => p.memory.last);
    const latencies = [...outcome.convergedAt].map(([name, at]) => at - createdAt.get(name)!);
    const lastConv = Math.max(0, ...outcome.convergedAt.values());
    const makespanSeconds = outcome.convergedAt.size ? (lastConv - t0) / 1000 : NaN;
    if (outcome.timedOut) progress(`  TIMED OUT: ${outcome.convergedAt.size}/${opts.apps} converged after ${opts.timeoutSeconds} s`);
    for (const [name, message] of [...outcome.failed].slice(0, 5)) progress(`  Failed: ${name}: ${message}`);

    // Idle window.
    await phase(`operator (${label}): idle for ${opts.idleSeconds} s after convergence`, async () => {
      const end = Date.now() + opts.idleSeconds * 1000;
      while (Date.now() < end) {
        await sleep(Math.min(15_000, end - Date.now()));
        await ops.assertAlive();
        if (Date.now() < end) progress(`  idle, ${Math.round((end - Date.now()) / 1000)} s left`);
      }
    });
    const tIdleEnd = Date.now();
    const c2 = cpuSnapshot(pids());
    const m2 = await api.requestCounts();
    const p2 = sumProbes(await ops.probeCounts());

    let temporal: TemporalCost | null = null;
    let temporalError: string | undefined;
    try {
      temporal = await phase(`operator (${label}): count Temporal events from workflow histories (sample up to ${opts.historySample})`, () =>
        temporalCost(ctx.temporal, taskQueue, { idleFrom: tConv, idleTo: tIdleEnd }, opts.historySample, (d, t) => progress(`  ${d}/${t} histories read`)));
    } catch (err) {
      temporalError = (err as Error).message;
      progress(`  could not count Temporal events: ${temporalError}`);
    }

    let promote: PromoteResult | null = null;
    if (opts.promoteSample > 0) {
      promote = await phase(`operator (${label}): promote latency on ${opts.promoteSample} canaries`, () => promoteSample(ctx, ns, opts.promoteSample, ops));
    }

    const closedWorkflows = await closedWorkflowsOf(ctx, taskQueue).catch((err: unknown) => {
      progress(`  could not list closed workflows: ${(err as Error).message}`);
      return [];
    });
    for (const w of closedWorkflows) progress(`  workflow ${w.workflowId} (${w.type}) is ${w.status}${w.failure ? `: ${w.failure}` : ''}`);
    const log = await ops.logSummary();
    if (then) await then({ ops, namespace: ns, taskQueue, names });
    await ops.stop();
    const ownDelta = counterDelta(own1, own0);
    const serverCreate = delta(m1, m0);
    const serverIdle = delta(m2, m1);
    const probeCreate = counterDelta(p1, p0);
    const probeIdle = counterDelta(p2, p1);
    const idleByVerb = probeByVerb(probeIdle);
    const idleServerWrites = Object.fromEntries(Object.entries(byResource(serverIdle, 200)).filter(([k]) => isWrite(k.split(' ')[0]!)));
    return {
      workers, sourceHash: runSource, namespace: ns, taskQueue, operatorFlags: ops.procs[0]?.process.args ?? [],
      apps: opts.apps,
      converged: outcome.convergedAt.size,
      failed: [...outcome.failed].map(([name, message]) => ({ name, message })),
      timedOut: outcome.timedOut,
      latency: distribution(latencies),
      latenciesMs: latencies,
      makespanSeconds,
      createSeconds: (tCreatesDone - t0) / 1000,
      ratioToFloor: floor && Number.isFinite(makespanSeconds) ? makespanSeconds / floor.makespanSeconds : null,
      api: {
        // The bench's polling (LIST) and metric scrapes (GET) are subtracted; its creates are the user's work and stay.
        allClientsByVerb: minus(byVerb(serverCreate), { LIST: ownDelta['LIST'] ?? 0, GET: ownDelta['GET'] ?? 0 }),
        operatorByVerb: probeByVerb(probeCreate),
        operatorByResource: probeCreate,
        serverByResource: byResource(serverCreate),
      },
      temporal,
      ...(temporalError ? { temporalError } : {}),
      idle: {
        seconds: (tIdleEnd - tConv) / 1000,
        operatorByVerb: idleByVerb,
        operatorWrites: sum(idleByVerb, isWrite),
        allClientsWrites: sum(idleServerWrites),
        allClientsWritesByResource: idleServerWrites,
      },
      cpu: { create: cpuDelta(c1, c0), idle: cpuDelta(c2, c1) },
      load: ctx.load.summary(t0, tConv),
      memory: ops.procs.map((p, i) => ({
        process: `#${p.index} --mode ${p.mode}`, readyRssMB: p.readyRss / 2 ** 20, peakRssMB: p.peakRss / 2 ** 20, endRssMB: p.lastRss / 2 ** 20,
        ...(p.memory.ready ? { ready: p.memory.ready } : {}), ...(memoryAtConv[i] ? { converged: memoryAtConv[i] } : {}), ...(p.memory.peak ? { peak: p.memory.peak } : {}),
      })),
      closedWorkflows,
      promote,
      diagnostics: {
        signals: counterBy(metricsAtConv, 'application_operator_watch_signals_total', 'reason'),
        starts: counterBy(metricsAtConv, 'application_operator_watch_starts_total', 'first_task'),
        latencyMeans: histogramMeans(metricsAtConv, /schedule_to_start|execution_latency|reconciliation_duration/),
        log,
      },
    };
  } finally {
    await ops.stop();
    ctx.operatorPids.splice(0);
  }
}

/** Application workflows of the task queue that ended (rollout children end by design and are left out unless they failed). */
async function closedWorkflowsOf(ctx: Ctx, taskQueue: string): Promise<RunResult['closedWorkflows']> {
  const out: RunResult['closedWorkflows'] = [];
  for await (const wf of ctx.temporal.workflow.list({ query: `TaskQueue = "${taskQueue}" AND ExecutionStatus != "Running"` })) {
    if (wf.status.name === 'CONTINUED_AS_NEW' || (wf.type !== 'applicationWorkflow' && wf.status.name === 'COMPLETED')) continue;
    let failure: string | undefined;
    if (wf.status.name === 'FAILED') {
      const history = await ctx.temporal.workflow.getHandle(wf.workflowId, wf.runId).fetchHistory();
      const last = history.events?.at(-1)?.workflowExecutionFailedEventAttributes?.failure;
      failure = [last?.message, last?.cause?.message].filter(Boolean).join(': ');
    }
    out.push({ workflowId: wf.workflowId, type: wf.type, status: wf.status.name, ...(failure ? { failure } : {}) });
    if (out.length >= 50) break;
  }
  return out;
}
