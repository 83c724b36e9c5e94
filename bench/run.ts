// npm run bench -- --apps N [--workers K | K1,K2,...] [--idle-seconds 60] [--timeout-seconds S] [--promote-sample 5]
//
// Starts its own local stack (temp state dir, free ports), measures the floor (the same rendered children applied
// straight to the API server, no Temporal), then for each worker count runs the operator on N fresh Applications:
// per-app convergence latency, makespan and its ratio to the floor, API requests and Temporal events per app, an idle
// window after convergence, peak RSS and the promote latency of a few canaries. Prints tables, writes JSON and an
// SVG chart under results/, and tears the stack down (also on Ctrl-C).
import { KubeConfig } from '@kubernetes/client-node';
import { Client, Connection } from '@temporalio/client';
import { bundleWorkflowCode } from '@temporalio/worker';
import { execFile } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import { mkdir, mkdtemp, readFile, readdir, writeFile } from 'node:fs/promises';
import { cpus, loadavg, platform, release, tmpdir, totalmem } from 'node:os';
import { join, relative, resolve } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { parseArgs, promisify } from 'node:util';
import { parseApplication } from '../api/application.ts';
import { API_VERSION, FIELD_MANAGER, KIND, LABEL_MANAGED_BY, MANAGED_BY, childName } from '../api/constants.ts';
import { control } from '../client/control.ts';
import { Kube, type KubeObject } from '../kube/client.ts';
import { collectionPath } from '../kube/resources.ts';
import { renderChildren } from '../render/index.ts';
import { assertBuilt } from '../stack/build.ts';
import { down, kubectl, up, type StackInfo } from '../stack/stack.ts';
import { versions } from '../stack/versions.ts';
import { ApiServer, byResource, byVerb, counterDelta, delta, isWrite, minus, sum } from './apiserver.ts';
import { latencyChartSvg, writeChart, type Series } from './chart.ts';
import { cpuDelta, cpuSnapshot, type CpuSnapshot } from './cpu.ts';
import { Operators, counterBy, histogramMeans, probeByVerb, sumProbes, type ProbeCounts } from './operators.ts';
import { perApp, temporalCost, type EventCounts, type TemporalCost } from './temporal.ts';
import { PhaseError, distribution, fmt, phase, phaseNow, pool, progress, retrying, secs, table, verdict, type Distribution } from './util.ts';

const root = resolve(import.meta.dirname, '..');

// ---------------------------------------------------------------- options

interface Options {
  apps: number;
  workers: number[];
  idleSeconds: number;
  timeoutSeconds: number;
  promoteSample: number;
  createConcurrency: number;
  applyConcurrency: number;
  historySample: number;
  podDelayMs: number;
  out: string;
  floor: boolean;
  keepStack: boolean;
  operatorArgs: string[];
}

const usage = `usage: npm run bench -- --apps N [options]
  --apps N                 Applications per run (required)
  --workers K[,K2...]      worker processes per run: 1 in --mode all plus K-1 in --mode worker (default 1); a list runs each in turn
  --idle-seconds S         idle window after convergence (default 60)
  --timeout-seconds S      convergence timeout per run (default 300 + N/2)
  --promote-sample M       canaries promoted per run to time promote (default 5; 0 skips)
  --create-concurrency C   Application creates in flight (default 20)
  --apply-concurrency C    floor: apps applied at once, like the operator's max concurrent activities (default 10)
  --history-sample H       workflow histories read to count Temporal events, extrapolated to all (default 200)
  --pod-delay-ms MS        kwok delay per pod transition (default 100)
  --out DIR                where results go (default results/)
  --no-floor               skip the floor measurement
  --operator-arg FLAG      extra flag for every operator process (repeatable), e.g. --operator-arg=--coalesce-ms=100
  --keep-stack             leave the stack running (prints its state dir)
  --report FILE            print the tables of an earlier results/bench-*.json again (no stack is started)`;

function parseOptions(argv: string[]): Options {
  const { values } = parseArgs({
    args: argv,
    options: {
      apps: { type: 'string' },
      workers: { type: 'string', default: '1' },
      'idle-seconds': { type: 'string', default: '60' },
      'timeout-seconds': { type: 'string' },
      'promote-sample': { type: 'string', default: '5' },
      'create-concurrency': { type: 'string', default: '20' },
      'apply-concurrency': { type: 'string', default: '10' },
      'history-sample': { type: 'string', default: '200' },
      'pod-delay-ms': { type: 'string', default: '100' },
      out: { type: 'string', default: join(root, 'results') },
      'no-floor': { type: 'boolean', default: false },
      'operator-arg': { type: 'string', multiple: true, default: [] },
      'keep-stack': { type: 'boolean', default: false },
      report: { type: 'string' },
      help: { type: 'boolean', short: 'h', default: false },
    },
    strict: true,
    allowPositionals: false,
  });
  if (values.help) {
    console.log(usage);
    process.exit(0);
  }
  if (values.report) return { report: resolve(values.report) } as unknown as Options;
  const int = (name: string, v: string | undefined, min: number): number => {
    const n = Number(v);
    if (v === undefined || !Number.isInteger(n) || n < min) throw new Error(`--${name} must be an integer >= ${min} (got ${v ?? 'nothing'})\n${usage}`);
    return n;
  };
  const apps = int('apps', values.apps, 1);
  const workers = values.workers.split(',').map((w) => int('workers', w.trim(), 1));
  return {
    apps, workers,
    idleSeconds: int('idle-seconds', values['idle-seconds'], 0),
    timeoutSeconds: values['timeout-seconds'] ? int('timeout-seconds', values['timeout-seconds'], 1) : 300 + Math.ceil(apps / 2),
    promoteSample: int('promote-sample', values['promote-sample'], 0),
    createConcurrency: int('create-concurrency', values['create-concurrency'], 1),
    applyConcurrency: int('apply-concurrency', values['apply-concurrency'], 1),
    historySample: int('history-sample', values['history-sample'], 1),
    podDelayMs: int('pod-delay-ms', values['pod-delay-ms'], 0),
    out: resolve(values.out),
    floor: !values['no-floor'],
    keepStack: values['keep-stack'],
    operatorArgs: values['operator-arg'],
  };
}

// ---------------------------------------------------------------- shared context

interface Ctx {
  opts: Options;
  info: StackInfo;
  api: ApiServer;
  kube: Kube;
  temporal: Client;
  bundlePath: string;
  /** Fingerprint of the operator's sources when the workflow bundle was built. */
  bundleSource: string;
  logDir: string;
}

const cleanups: (() => Promise<void>)[] = [];

// Other people edit the operator while a long benchmark runs: fingerprint what the operator runs, per run.
const sourceDirs = ['activities', 'api', 'kube', 'operator', 'reconcile', 'render', 'watcher', 'workflows', 'bin'];

async function sourceHash(): Promise<string> {
  const h = createHash('sha256');
  for (const dir of sourceDirs) {
    const files = (await readdir(join(root, dir), { recursive: true })).filter((f) => f.endsWith('.ts')).sort();
    for (const f of files) h.update(`${dir}/${f}\0`).update(await readFile(join(root, dir, f)));
  }
  return h.digest('hex').slice(0, 12);
}

async function gitState(): Promise<{ commit: string; dirty: string[] }> {
  const git = (args: string[]) => promisify(execFile)('git', args, { cwd: root }).then((r) => r.stdout.trimEnd(), () => '');
  const commit = (await git(['rev-parse', '--short', 'HEAD'])).trim() || 'unknown';
  const dirty = (await git(['status', '--porcelain', '--', ...sourceDirs])).split('\n').filter(Boolean).map((l) => l.slice(3));
  return { commit, dirty };
}

const appManifest = (namespace: string, name: string, spec: Record<string, unknown>): KubeObject =>
  ({ apiVersion: API_VERSION, kind: KIND, metadata: { name, namespace }, spec });

const appNames = (n: number, prefix = 'app') => Array.from({ length: n }, (_, i) => `${prefix}-${String(i).padStart(String(n - 1).length, '0')}`);

async function createNamespace(ctx: Ctx, name: string): Promise<void> {
  await ctx.kube.create({ apiVersion: 'v1', kind: 'Namespace', metadata: { name } });
  ctx.api.count('POST');
}

/** Creates the Applications, `concurrency` at a time; returns when each create was answered (ms since epoch). */
async function createApps(ctx: Ctx, namespace: string, names: string[], spec: Record<string, unknown>, createdAt?: Map<string, number>): Promise<void> {
  let done = 0;
  let lastReport = Date.now();
  await pool(names, ctx.opts.createConcurrency, async (name) => {
    await retrying(`create Application ${namespace}/${name}`, async () => {
      ctx.api.count('POST');
      try {
        await ctx.kube.create(appManifest(namespace, name, spec));
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

function deploymentAvailable(d: any): boolean {
  const want = d.spec?.replicas ?? 1;
  const s = d.status ?? {};
  return (s.observedGeneration ?? 0) >= (d.metadata?.generation ?? 0) && (s.updatedReplicas ?? 0) >= want && (s.availableReplicas ?? 0) >= want && (s.replicas ?? 0) <= want;
}

// ---------------------------------------------------------------- floor

interface FloorResult {
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
}

/** The stack's servers by pid, for CPU accounting. */
function stackPids(info: StackInfo): [string, number | undefined][] {
  return [
    ['apiserver', info.servers['kube-apiserver'].pid], ['etcd', info.servers.etcd.pid], ['controller-manager', info.servers['kube-controller-manager'].pid],
    ['scheduler', info.servers['kube-scheduler'].pid], ['kwok', info.servers.kwok.pid], ['temporal', info.servers.temporal.pid],
  ];
}

async function runFloor(ctx: Ctx): Promise<FloorResult> {
  const { opts, api, kube } = ctx;
  const ns = `bench-floor-${randomBytes(3).toString('hex')}`;
  await createNamespace(ctx, ns);
  const names = appNames(opts.apps);
  const m0 = await api.requestCounts();
  const own0 = { ...api.requests };
  const c0 = cpuSnapshot(stackPids(ctx.info));
  const t0 = Date.now();
  await phase(`floor: create ${opts.apps} Applications (${opts.createConcurrency} at a time, no operator running)`, () => createApps(ctx, ns, names, { image: 'nginx:1.25', replicas: 1 }));
  const tCreated = Date.now();

  const desired = await phase('floor: read the Applications back and render their children', async () => {
    // A consistent read: the watch cache may not have every create yet.
    const list = await api.list(collectionPath({ apiVersion: API_VERSION, kind: KIND, namespace: ns }), { consistent: true });
    return list.map((raw) => {
      const parsed = parseApplication(raw);
      if (!parsed.ok) throw new Error(`Application ${raw?.metadata?.name} does not parse: ${parsed.message}`);
      return renderChildren(parsed.app).apply.map((c) => c.object);
    });
  });
  if (desired.length !== opts.apps) throw new PhaseError('floor: read back', `listed ${desired.length} Applications, created ${opts.apps}`);
  const tRendered = Date.now();
  const applies = desired.reduce((n, d) => n + d.length, 0);
  await phase(`floor: server-side apply ${applies} children (${opts.applyConcurrency} apps at a time, each app's children in order)`, async () => {
    let done = 0;
    let lastReport = Date.now();
    await pool(desired, opts.applyConcurrency, async (objs) => {
      for (const obj of objs) {
        await retrying(`apply ${obj.kind} ${ns}/${obj.metadata.name}`, () => {
          api.count('APPLY');
          return kube.apply(obj, { fieldManager: FIELD_MANAGER });
        });
      }
      done++;
      if (Date.now() - lastReport > 5000) {
        lastReport = Date.now();
        progress(`  applied ${done}/${desired.length} apps`);
      }
    });
  });
  const tApplied = Date.now();
  await phase('floor: wait until every Deployment is available', async () => {
    const deadline = Date.now() + opts.timeoutSeconds * 1000;
    let lastReport = 0;
    for (;;) {
      const deps = await api.list(collectionPath({ apiVersion: 'apps/v1', kind: 'Deployment', namespace: ns }));
      const ready = deps.filter(deploymentAvailable).length;
      if (ready === opts.apps) return;
      if (Date.now() - lastReport > 5000) {
        lastReport = Date.now();
        progress(`  ${ready}/${opts.apps} Deployments available`);
      }
      if (Date.now() > deadline) throw new Error(`timed out after ${opts.timeoutSeconds} s: ${ready}/${opts.apps} Deployments available`);
      await sleep(500);
    }
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
  };
}

// ---------------------------------------------------------------- operator run

interface PromoteResult {
  sample: number;
  /** Update accepted -> VirtualService read back at 100% stable, per app (ms). */
  latenciesMs: number[];
  /** Time the promote update took to be accepted (ms). */
  updateMs: number[];
  /** Update accepted -> status.canary.phase Promoted (ms). */
  promotedMs: number[];
  errors: string[];
}

interface RunResult {
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
  memory: { process: string; readyRssMB: number; peakRssMB: number; endRssMB: number }[];
  /** Workflows of the run's task queue that are no longer running (an Application workflow should never end by itself). */
  closedWorkflows: { workflowId: string; type: string; status: string; failure?: string }[];
  promote: PromoteResult | null;
  diagnostics: {
    signals: Record<string, number>;
    latencyMeans: Record<string, { count: number; mean: number }>;
    log: { warnings: number; errors: number; messages: Record<string, number> };
  };
}

interface ConvergeOutcome {
  convergedAt: Map<string, number>;
  failed: Map<string, string>;
  timedOut: boolean;
}

/** Lists the namespace's Applications every 500 ms (and its Deployments and Services when needed) until every app has converged. */
async function waitConverged(ctx: Ctx, ns: string, names: string[], createdAt: Map<string, number>, ops: Operators, creating: () => boolean): Promise<ConvergeOutcome> {
  const { api, opts } = ctx;
  const convergedAt = new Map<string, number>();
  const failed = new Map<string, string>();
  const deadline = Date.now() + opts.timeoutSeconds * 1000;
  const wanted = new Set(names);
  let lastReport = 0;
  const selector = `${LABEL_MANAGED_BY}=${MANAGED_BY}`;
  for (;;) {
    const apps = await api.list(collectionPath({ apiVersion: API_VERSION, kind: KIND, namespace: ns }));
    const now = Date.now();
    const phases: Record<string, number> = {};
    const candidates: string[] = [];
    for (const a of apps) {
      const name = a.metadata.name as string;
      if (!wanted.has(name)) continue;
      const s = a.status ?? {};
      const phaseName = s.phase ?? 'no status';
      phases[phaseName] = (phases[phaseName] ?? 0) + 1;
      if (phaseName === 'Failed') failed.set(name, (s.conditions ?? []).find((c: any) => c.type === 'Ready')?.message ?? 'Failed');
      if (convergedAt.has(name) || !createdAt.has(name)) continue;
      if (s.observedGeneration === a.metadata.generation && s.phase === 'Running') candidates.push(name);
    }
    if (candidates.length > 0) {
      // Children are listed (metadata only) only when some app's status says it converged, to keep the polling cheap.
      const [deps, svcs] = await Promise.all([
        api.list(collectionPath({ apiVersion: 'apps/v1', kind: 'Deployment', namespace: ns }), { labelSelector: selector, metadataOnly: true }),
        api.list(collectionPath({ apiVersion: 'v1', kind: 'Service', namespace: ns }), { labelSelector: selector, metadataOnly: true }),
      ]);
      const depNames = new Set(deps.map((d: any) => d.metadata.name as string));
      const svcNames = new Set(svcs.map((x: any) => x.metadata.name as string));
      for (const name of candidates) {
        const child = childName({ metadata: { name } });
        if (depNames.has(child) && svcNames.has(child)) {
          convergedAt.set(name, now);
          failed.delete(name);
        }
      }
    }
    if (convergedAt.size === names.length) return { convergedAt, failed, timedOut: false };
    if (now - lastReport > 5000) {
      lastReport = now;
      const summary = Object.entries(phases).sort().map(([p, n]) => `${p} ${n}`).join(', ');
      progress(`  converged ${convergedAt.size}/${names.length}${creating() ? ` (created ${createdAt.size})` : ''}; phases: ${summary || 'none yet'}`);
    }
    if (now > deadline) return { convergedAt, failed, timedOut: true };
    await ops.assertAlive();
    await sleep(500);
  }
}

async function runOperator(ctx: Ctx, workers: number, floor: FloorResult | null): Promise<RunResult> {
  const { opts, api } = ctx;
  const id = randomBytes(3).toString('hex');
  const ns = `bench-w${workers}-${id}`;
  const taskQueue = `bench-${id}`;
  const label = `${workers} worker${workers > 1 ? 's' : ''}`;
  await createNamespace(ctx, ns);
  const ops = new Operators();
  cleanups.push(() => ops.stop());
  try {
    const runSource = await sourceHash();
    if (runSource !== ctx.bundleSource) progress(`  WARNING: the operator's sources changed since the workflow bundle was built (${ctx.bundleSource} -> ${runSource}): this run's activities and watcher run newer code than its workflows`);
    await phase(`operator (${label}): start ${workers} process(es) on task queue ${taskQueue}, watching ${ns}`, () => ops.start({
      info: ctx.info, namespace: ns, taskQueue, workflowBundle: ctx.bundlePath, workers, logDir: ctx.logDir, extraArgs: opts.operatorArgs,
    }));
    for (const p of ops.procs) progress(`  process ${p.index} (--mode ${p.mode}) pid ${p.pid}, log ${p.logFile}`);
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
      const creates = createApps(ctx, ns, names, { image: 'nginx:1.25', replicas: 1 }, createdAt).finally(() => {
        creating = false;
      });
      const converge = waitConverged(ctx, ns, names, createdAt, ops, () => creating);
      const [, out] = await Promise.all([creates, converge]);
      return out;
    });
    const tCreatesDone = Math.max(...createdAt.values());
    const tConv = Date.now();
    const c1 = cpuSnapshot(pids());
    const m1 = await api.requestCounts();
    const p1 = sumProbes(await ops.probeCounts());
    const own1 = { ...api.requests };
    const metricsAtConv = await ops.metrics();
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
    await ops.stop();
    const ownDelta = counterDelta(own1, own0);
    const serverCreate = delta(m1, m0);
    const serverIdle = delta(m2, m1);
    const probeCreate = counterDelta(p1, p0);
    const probeIdle = counterDelta(p2, p1);
    const idleByVerb = probeByVerb(probeIdle);
    const idleServerWrites = Object.fromEntries(Object.entries(byResource(serverIdle, 200)).filter(([k]) => isWrite(k.split(' ')[0]!)));
    return {
      workers, sourceHash: runSource, namespace: ns, taskQueue, operatorFlags: ops.procs[0]?.args ?? [],
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
      memory: ops.procs.map((p) => ({ process: `#${p.index} --mode ${p.mode}`, readyRssMB: p.readyRss / 2 ** 20, peakRssMB: p.peakRss / 2 ** 20, endRssMB: p.lastRss / 2 ** 20 })),
      closedWorkflows,
      promote,
      diagnostics: {
        signals: counterBy(metricsAtConv, 'application_operator_watch_signals_total', 'reason'),
        latencyMeans: histogramMeans(metricsAtConv, /schedule_to_start|execution_latency|reconciliation_duration/),
        log,
      },
    };
  } finally {
    await ops.stop();
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

// ---------------------------------------------------------------- promote

function routeWeights(vs: any): { stable: number; canary: number } | null {
  if (!vs) return null;
  const routes: any[] = vs.spec?.http?.[0]?.route ?? [];
  const w = (r: any): number => r.weight ?? (routes.length === 1 ? 100 : 0);
  const by = (subset: string) => routes.filter((r) => r.destination?.subset === subset).reduce((n: number, r) => n + w(r), 0);
  return { stable: by('stable'), canary: by('canary') };
}

async function until<T>(what: string, timeoutMs: number, intervalMs: number, fn: () => Promise<T | undefined>): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const v = await fn();
    if (v !== undefined) return v;
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs / 1000} s waiting for ${what}`);
    await sleep(intervalMs);
  }
}

async function promoteSample(ctx: Ctx, ns: string, count: number, ops: Operators): Promise<PromoteResult> {
  const { kube } = ctx;
  const names = appNames(count, 'promo');
  const vsRef = (name: string) => ({ apiVersion: 'networking.istio.io/v1', kind: 'VirtualService', namespace: ns, name });
  const appRef = (name: string) => ({ apiVersion: API_VERSION, kind: KIND, namespace: ns, name });
  const result: PromoteResult = { sample: count, latenciesMs: [], updateMs: [], promotedMs: [], errors: [] };
  await createApps(ctx, ns, names, { image: 'nginx:1.25', replicas: 1, serviceMesh: { enabled: true } });
  await until(`${count} mesh apps Running`, 180_000, 500, async () => {
    await ops.assertAlive();
    const apps = await Promise.all(names.map((n) => kube.get<any>(appRef(n))));
    return apps.every((a) => a?.status?.phase === 'Running' && a.status.observedGeneration === a.metadata.generation) ? true : undefined;
  });
  progress(`  ${count} mesh apps Running; enabling a canary at weight 20 on each`);
  await Promise.all(names.map((n) => kube.mergePatch(appRef(n), {
    spec: { serviceMesh: { canary: { enabled: true, canaryVersion: 'v2', weight: 20, healthGates: { interval: '1s', failureThreshold: 10 } } } },
  })));
  await until('every VirtualService at 20% canary', 180_000, 250, async () => {
    await ops.assertAlive();
    const vss = await Promise.all(names.map((n) => kube.get<any>(vsRef(n))));
    return vss.every((vs) => routeWeights(vs)?.canary === 20 && routeWeights(vs)?.stable === 80) ? true : undefined;
  });
  progress('  every VirtualService at 80/20; promoting one at a time');
  for (const name of names) {
    try {
      const sent = Date.now();
      await control(ctx.temporal, 'promote', ns, name, 'benchmark');
      const accepted = Date.now();
      await until(`${name} VirtualService at 100% stable`, 120_000, 100, async () => {
        const w = routeWeights(await kube.get<any>(vsRef(name)));
        return w && w.stable === 100 && w.canary === 0 ? true : undefined;
      });
      const routed = Date.now();
      await until(`${name} canary phase Promoted`, 120_000, 200, async () => ((await kube.get<any>(appRef(name)))?.status?.canary?.phase === 'Promoted' ? true : undefined));
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

// ---------------------------------------------------------------- report

const VERBS = ['GET', 'LIST', 'WATCH', 'POST', 'PUT', 'PATCH', 'APPLY', 'APPLY dry-run', 'DELETE'];

function verbRow(label: string, byVerbCounts: Record<string, number>, n: number): (string | number)[] {
  const other = sum(byVerbCounts, (k) => !VERBS.includes(k));
  return [label, ...VERBS.map((v) => (byVerbCounts[v] ?? 0) / n), other / n, sum(byVerbCounts) / n, sum(byVerbCounts, isWrite) / n];
}

function runLabel(r: RunResult): string {
  return `operator, ${r.workers} worker${r.workers > 1 ? 's' : ''}`;
}

const mb = (n: number) => `${n.toFixed(0)} MB`;

interface Report {
  command: string;
  startedAt: string;
  finishedAt: string;
  machine: Record<string, unknown>;
  versions: Record<string, string>;
  code: { commit: string; uncommitted: string[]; bundleSource: string };
  options: Options & { nodes: number };
  definitions: Record<string, string>;
  floor: FloorResult | null;
  runs: RunResult[];
  targets: { target: string; results: { workers: number; verdict: string; value: string }[] }[];
  files: string[];
}

const OUR_COMPONENTS = ['apiserver', 'etcd', 'controller-manager', 'scheduler', 'kwok', 'temporal', 'operator'];

/**
 * Makespan ratio estimated from CPU: on a CPU-bound machine the makespan scales with the CPU spent per app by the
 * stack, Temporal and the operator; unlike the wall-clock ratio it does not depend on other people's load while
 * the floor and the run were measured (at different times).
 */
function cpuRatio(r: RunResult, floor: FloorResult | null): number | null {
  if (!floor?.cpu || !r.cpu) return null;
  const ours = (c: CpuSnapshot) => OUR_COMPONENTS.reduce((n, k) => n + (c[k] ?? 0), 0);
  const f = ours(floor.cpu) / floor.apps;
  return f > 0 ? ours(r.cpu.create) / r.apps / f : null;
}

function targets(opts: Options, runs: RunResult[], floor: FloorResult | null): Report['targets'] {
  const at1000 = opts.apps === 1000 ? '' : ` (target set at 1,000 apps; this run has ${opts.apps})`;
  const at10k = opts.apps === 10_000 ? '' : ` (target set at 10,000 apps; this run has ${opts.apps})`;
  const rows: Report['targets'] = [];
  const each = (target: string, f: (r: RunResult) => { ok: boolean | null; value: string }) =>
    rows.push({ target, results: runs.map((r) => { const v = f(r); return { workers: r.workers, verdict: verdict(v.ok), value: v.value }; }) });
  each(`makespan <= 1.5x floor${at1000}`, (r) => {
    if (r.ratioToFloor === null) return { ok: null, value: 'no floor' };
    const c = cpuRatio(r, floor);
    return { ok: r.ratioToFloor <= 1.5, value: `${r.ratioToFloor.toFixed(2)}x${c ? ` (CPU-normalized ${c.toFixed(2)}x)` : ''}` };
  });
  each(`<= 12 Temporal actions per app create${at1000}`, (r) => {
    if (!r.temporal) return { ok: null, value: 'not counted' };
    const a = perApp(r.temporal.create, r.apps).actions;
    return { ok: a <= 12, value: a.toFixed(1) };
  });
  each(`no idle writes by the operator (${opts.idleSeconds} s)${at1000}`, (r) => ({ ok: r.idle.operatorWrites === 0, value: `${r.idle.operatorWrites} writes` }));
  each(`RSS <= 300 MB per operator process${at1000}`, (r) => {
    const peak = Math.max(...r.memory.map((m) => m.peakRssMB));
    return { ok: peak <= 300, value: mb(peak) };
  });
  each(`all apps converge without errors${at10k}`, (r) => {
    // Workflows of the promote sample are reported with the promote latency, not here.
    const failedWf = (r.closedWorkflows ?? []).filter((w) => !w.workflowId.includes('/promo-') && (w.status === 'FAILED' || w.status === 'TERMINATED' || w.status === 'TIMED_OUT')).length;
    return {
      ok: r.converged === r.apps && r.failed.length === 0 && !r.timedOut && failedWf === 0,
      value: `${r.converged}/${r.apps}, ${r.failed.length} Failed apps${r.timedOut ? ', timed out' : ''}, ${failedWf} failed workflows`,
    };
  });
  return rows;
}

function printReport(rep: Report): void {
  const { floor, runs, options: opts } = rep;
  const n = opts.apps;
  const out: string[] = [];
  const h = (t: string) => out.push('', `== ${t}`);
  h('Setup');
  const m = rep.machine;
  out.push(`machine:  ${String(m['cores'])} cores (${String(m['cpu'])}), ${String(m['memoryGiB'])} GiB memory, ${String(m['os'])}; load average at start ${String(m['loadAtStart'])} (other work shares this machine: numbers are noisy)`);
  out.push(`versions: ${Object.entries(rep.versions).map(([k, v]) => `${k} ${v}`).join(', ')}`);
  out.push(`command:  ${rep.command}`);
  if (rep.code) out.push(`code:     commit ${rep.code.commit}${rep.code.uncommitted.length ? ` + uncommitted: ${rep.code.uncommitted.join(', ')}` : ''}; operator sources ${rep.code.bundleSource} at bundling${runs.some((r) => r.sourceHash !== rep.code.bundleSource) ? `; CHANGED during the benchmark: ${runs.map((r) => `${r.workers}w ran ${r.sourceHash}`).join(', ')}` : ', unchanged for every run'}`);
  out.push(`stack:    own stack on free ports, ${opts.nodes} kwok nodes, podDelayMs ${opts.podDelayMs}; apps: image nginx:1.25, replicas 1 (children: Deployment + Service)`);
  if (runs[0]) out.push(`operator: application-operator run ${runs[0].operatorFlags.filter((f) => !/kubeconfig|address|bundle|metrics-addr|task-queue|namespaces=/.test(f)).join(' ')} (other flags at their defaults)`);

  h(`Convergence, N = ${n} (latency: create answered -> first 500 ms poll seeing phase Running at the current generation with Deployment and Service present)`);
  const rows: (string | number)[][] = [];
  if (floor) rows.push(['floor (SSA, no Temporal)', floor.apps, 0, '-', '-', '-', '-', floor.makespanSeconds, 1, floor.cpu ? 1 : '-']);
  for (const r of runs) {
    const d = r.latency;
    rows.push([runLabel(r), r.converged, r.failed.length + (r.converged < r.apps ? r.apps - r.converged - r.failed.length : 0),
      d ? d.p50 / 1000 : '-', d ? d.p95 / 1000 : '-', d ? d.p99 / 1000 : '-', d ? d.max / 1000 : '-', r.makespanSeconds, r.ratioToFloor ?? '-', cpuRatio(r, floor) ?? '-']);
  }
  out.push(table(['run', 'converged', 'not converged', 'p50 s', 'p95 s', 'p99 s', 'max s', 'makespan s', 'x floor', 'x floor (CPU)'], rows));
  out.push('x floor (CPU) = CPU per app of the stack, Temporal and the operator in the run / in the floor: the makespan ratio on a dedicated CPU-bound machine, free of the other load that varies between the two measurements');
  if (floor) {
    out.push(`floor: create ${floor.apps} apps ${floor.createSeconds.toFixed(1)} s (${opts.createConcurrency} at a time) + read back & render ${floor.renderSeconds.toFixed(1)} s + apply ${floor.applies} children ${floor.applySeconds.toFixed(1)} s (${opts.applyConcurrency} apps at a time: ${(floor.applies / floor.applySeconds).toFixed(0)} applies/s) + until every Deployment available ${floor.availableSeconds.toFixed(1)} s = ${floor.makespanSeconds.toFixed(1)} s`);
  }
  for (const r of runs) out.push(`${runLabel(r)}: creates took ${r.createSeconds.toFixed(1)} s; makespan = first create -> last app converged`);

  h('API requests per app (apiserver_request_total deltas / N, the bench\'s own polling subtracted; probe = the operator processes\' own client-side count)');
  const apiRows: (string | number)[][] = [];
  if (floor) apiRows.push(verbRow('floor: all clients', floor.api.allClientsByVerb, n));
  for (const r of runs) {
    apiRows.push(verbRow(`${r.workers}w: all clients`, r.api.allClientsByVerb, n));
    apiRows.push(verbRow(`${r.workers}w: operator (probe)`, r.api.operatorByVerb, n));
  }
  out.push(table(['source', ...VERBS, 'other', 'total', 'writes'], apiRows));
  out.push('all clients = the user\'s creates, the operator, controller-manager, scheduler and kwok (kwok heartbeats included)');

  h('Temporal per app, create phase (counted from workflow histories)');
  const tRows: (string | number)[][] = [];
  for (const r of runs) {
    if (!r.temporal) {
      tRows.push([runLabel(r), r.temporalError ?? 'not counted', '', '', '', '', '', '', '', '', '']);
      continue;
    }
    const c = perApp(r.temporal.create, n);
    tRows.push([runLabel(r), `${r.temporal.sampled}/${r.temporal.executions}${r.temporal.extrapolated ? ' (extrapolated)' : ''}`,
      c.starts, c.workflowTasks, c.activities, c.signals, c.timers, c.upserts, c.events, c.failures, c.actions]);
  }
  out.push(table(['run', 'histories read', 'starts', 'wf tasks', 'activities', 'signals', 'timers', 'SA upserts', 'events', 'failures', 'actions*'], tRows));
  out.push('* Temporal actions (this benchmark\'s definition) = workflow starts + signals + activities scheduled + timers started; search-attribute upserts are shown but not counted');

  h(`Idle: ${opts.idleSeconds} s after the last app converged`);
  const iRows: (string | number)[][] = [];
  for (const r of runs) {
    const t: EventCounts | null = r.temporal ? perApp(r.temporal.idle, n) : null;
    iRows.push([runLabel(r), r.idle.operatorWrites, r.idle.operatorWrites / n, sum(r.idle.operatorByVerb) / n,
      t ? t.workflowTasks : '-', t ? t.activities : '-', t ? t.timers : '-', t ? t.signals : '-', r.idle.allClientsWrites]);
  }
  out.push(table(['run', 'operator writes', 'writes/app', 'operator requests/app', 'wf tasks/app', 'activities/app', 'timers/app', 'signals/app', 'all-clients writes (total)'], iRows));
  for (const r of runs) {
    const top = Object.entries(r.idle.allClientsWritesByResource).slice(0, 4).map(([k, v]) => `${k} ${v}`).join(', ');
    if (top) out.push(`${r.workers}w idle writes by all clients: ${top}`);
  }

  h('Memory: peak RSS per operator process (VmHWM / VmRSS sampled every 500 ms)');
  out.push(table(['run', 'process', 'RSS when ready MB', 'peak RSS MB', 'RSS at end MB'], runs.flatMap((r) => r.memory.map((mm) => [runLabel(r), mm.process, mm.readyRssMB, mm.peakRssMB, mm.endRssMB]))));

  h('CPU by component, ms per app (from /proc; "others" = the rest of the machine: other people\'s work on a shared machine)');
  const comps = ['apiserver', 'etcd', 'controller-manager', 'scheduler', 'kwok', 'temporal', 'operator', 'bench', 'others'];
  const cpuRow = (label: string, c: CpuSnapshot, seconds: number): (string | number)[] =>
    [label, ...comps.map((k) => ((c[k] ?? 0) * 1000) / n), seconds, `${(((c['machine'] ?? 0) / (seconds * Number(rep.machine['cores']))) * 100).toFixed(0)}%`];
  const cpuRows: (string | number)[][] = [];
  if (floor?.cpu) cpuRows.push(cpuRow('floor', floor.cpu, floor.makespanSeconds));
  for (const r of runs) if (r.cpu) cpuRows.push(cpuRow(`${r.workers}w create`, r.cpu.create, r.makespanSeconds));
  for (const r of runs) if (r.cpu) cpuRows.push(cpuRow(`${r.workers}w idle`, r.cpu.idle, r.idle.seconds));
  out.push(table(['window', ...comps, 'window s', 'machine busy'], cpuRows));

  if (runs.some((r) => r.promote)) {
    h('Promote latency: promote update accepted -> VirtualService read back at 100% stable');
    out.push(table(['run', 'sample', 'p50 s', 'max s', 'update p50 ms', 'to Promoted p50 s', 'errors', 'app workflows FAILED after'], runs.filter((r) => r.promote).map((r) => {
      const p = r.promote!;
      const d = distribution(p.latenciesMs);
      const u = distribution(p.updateMs);
      const pr = distribution(p.promotedMs);
      const failedAfter = (r.closedWorkflows ?? []).filter((w) => w.workflowId.includes('/promo-') && w.type === 'applicationWorkflow' && w.status === 'FAILED').length;
      return [runLabel(r), `${p.latenciesMs.length}/${p.sample}`, d ? d.p50 / 1000 : '-', d ? d.max / 1000 : '-', u ? u.p50 : '-', pr ? pr.p50 / 1000 : '-', p.errors.length, `${failedAfter}/${p.sample}`];
    })));
  }

  h('Targets (reported, never asserted)');
  out.push(table(['target', ...runs.map((r) => `${r.workers}w`)], rep.targets.map((t) => [t.target, ...t.results.map((x) => `${x.verdict} ${x.value}`)])));

  h('Diagnostics');
  for (const r of runs) {
    const lm = Object.entries(r.diagnostics.latencyMeans).map(([k, v]) => `${k.replace(/^temporal_|^application_operator_/, '')} ${fmt(v.mean)} (n=${v.count})`).join('; ');
    out.push(`${r.workers}w: watcher signals ${JSON.stringify(r.diagnostics.signals)}; histogram means: ${lm || 'none'}`);
    out.push(`${r.workers}w: operator log ${r.diagnostics.log.warnings} warnings, ${r.diagnostics.log.errors} errors${Object.keys(r.diagnostics.log.messages).length ? `: ${Object.entries(r.diagnostics.log.messages).sort((a, b) => b[1] - a[1]).slice(0, 5).map(([k, v]) => `${v}x ${k}`).join('; ')}` : ''}`);
    const top = Object.entries(r.api.operatorByResource).sort((a, b) => b[1] - a[1]).slice(0, 8).map(([k, v]) => `${k} ${fmt(v / n)}`).join(', ');
    out.push(`${r.workers}w: operator requests per app by resource: ${top}`);
    if (r.temporal?.failureTypes && Object.keys(r.temporal.failureTypes).length) out.push(`${r.workers}w: task failures in the ${r.temporal.sampled} sampled histories: ${Object.entries(r.temporal.failureTypes).map(([k, v]) => `${v}x ${k}`).join('; ')}`);
    if (r.temporal) out.push(`${r.workers}w: history length mean ${r.temporal.historyLength.mean.toFixed(1)}, max ${r.temporal.historyLength.max}; last idle-window event ${r.temporal.lastIdleEventSeconds.toFixed(1)} s after convergence`);
    for (const w of r.closedWorkflows ?? []) out.push(`${r.workers}w: workflow ${w.workflowId} (${w.type}) ended ${w.status}${w.failure ? `: ${w.failure}` : ''}`);
  }
  h('Files');
  for (const f of rep.files) out.push(relative(process.cwd(), f) || f);
  console.log(out.join('\n'));
}

async function aggregateChart(dir: string): Promise<Series[]> {
  // The latest result per (N, workers) found in the results folder: latency distribution per N.
  const latest = new Map<string, { at: string; s: Series }>();
  for (const f of (await readdir(dir)).filter((x) => /^bench-.*\.json$/.test(x))) {
    try {
      const rep = JSON.parse(await readFile(join(dir, f), 'utf8')) as Report;
      for (const r of rep.runs) {
        const key = `${r.apps}/${r.workers}`;
        const prev = latest.get(key);
        if (prev && prev.at > rep.startedAt) continue;
        latest.set(key, { at: rep.startedAt, s: { label: `N=${r.apps}, ${r.workers} worker${r.workers > 1 ? 's' : ''}`, latenciesMs: r.latenciesMs, makespanMs: r.makespanSeconds * 1000, ...(rep.floor ? { floorMs: rep.floor.makespanSeconds * 1000 } : {}) } });
      }
    } catch {
      // not a result file of this format
    }
  }
  return [...latest.entries()].sort(([a], [b]) => {
    const [na, wa] = a.split('/').map(Number);
    const [nb, wb] = b.split('/').map(Number);
    return na! - nb! || wa! - wb!;
  }).map(([, v]) => v.s);
}

// ---------------------------------------------------------------- main

async function main(): Promise<number> {
  const argv = process.argv.slice(2);
  const opts = parseOptions(argv);
  const reportFile = (opts as unknown as { report?: string }).report;
  if (reportFile) {
    const rep = JSON.parse(await readFile(reportFile, 'utf8')) as Report;
    rep.targets = targets(rep.options, rep.runs, rep.floor);
    printReport(rep);
    return 0;
  }
  const startedAt = new Date();
  const command = process.env['npm_lifecycle_event'] === 'bench' ? `npm run bench -- ${argv.join(' ')}` : `node bench/run.ts ${argv.join(' ')}`;
  const runsCount = opts.workers.length;
  const pods = opts.apps * ((opts.floor ? 1 : 0) + runsCount) + runsCount * opts.promoteSample * 2;
  const nodes = Math.ceil(pods / 4000) + 1;
  const workerPkg = JSON.parse(await readFile(join(root, 'node_modules', '@temporalio', 'worker', 'package.json'), 'utf8')) as { version: string };
  const machine = {
    cores: cpus().length, cpu: cpus()[0]?.model ?? '?', memoryGiB: (totalmem() / 2 ** 30).toFixed(1), os: `${platform()} ${release()}`,
    loadAtStart: loadavg().map((l) => l.toFixed(2)).join(' '),
  };
  const vers = {
    node: process.version, kubernetes: versions.kubernetes, etcd: versions.etcd, kwok: versions.kwok, 'temporal-cli': versions.temporalCli,
    '@temporalio/*': workerPkg.version,
  };
  progress(`benchmark: ${command}`);
  progress(`machine: ${machine.cores} cores (${machine.cpu}), ${machine.memoryGiB} GiB; load average ${machine.loadAtStart}`);
  progress(`versions: ${Object.entries(vers).map(([k, v]) => `${k} ${v}`).join(', ')}`);
  const git = await gitState();
  progress(`code: commit ${git.commit}${git.dirty.length ? ` + uncommitted changes in ${git.dirty.join(', ')}` : ''}`);

  await assertBuilt();
  const stateDir = await mkdtemp(join(tmpdir(), 'app-operator-bench-'));
  const stamp = startedAt.toISOString().replace(/[-:]/g, '').replace(/\..*/, '').replace('T', '-');
  const base = join(opts.out, `bench-${opts.apps}apps-w${opts.workers.join('_')}-${stamp}`);
  // Operator logs and probe files are kept with the results (the stack's own logs go with its state dir).
  const logDir = `${base}-logs`;
  await mkdir(logDir, { recursive: true });
  let stackStarted = false;
  const teardown = async () => {
    for (const c of cleanups.splice(0).reverse()) await c().catch(() => undefined);
    if (!stackStarted) return;
    if (opts.keepStack) {
      progress(`stack kept in ${stateDir} (stop it with: npm run stack -- --state-dir ${stateDir} down --purge)`);
      return;
    }
    progress('tearing the stack down');
    await down(stateDir, { purge: true });
    stackStarted = false;
  };
  let interrupted = false;
  const onSignal = (sig: NodeJS.Signals) => {
    if (interrupted) {
      console.error(`\n${sig} again: exiting without waiting; if servers are left, run: npm run stack -- --state-dir ${stateDir} down --purge`);
      process.exit(130);
    }
    interrupted = true;
    console.error(`\n${sig} during "${phaseNow()}": stopping the operator and tearing the stack down (again to exit at once)`);
    void teardown().finally(() => process.exit(130));
  };
  process.on('SIGINT', onSignal);
  process.on('SIGTERM', onSignal);

  let temporalConnection: Connection | undefined;
  let api: ApiServer | undefined;
  try {
    stackStarted = true;
    const info = await phase(`stack up in ${stateDir} (${nodes} kwok nodes, podDelayMs ${opts.podDelayMs})`, () =>
      up({ stateDir, ports: 'free', headless: true, nodes, podDelayMs: opts.podDelayMs, print: (l) => progress(`  ${l.trim()}`) }));
    await phase('extend the Service IP range (the stack\'s /24 holds ~250 ClusterIPs)', async () => {
      // The stack's --service-cluster-ip-range is 10.0.0.0/24; a second ServiceCIDR (GA since 1.33) adds 65k addresses.
      await kubectl(info, ['apply', '-f', '-'], JSON.stringify({ apiVersion: 'networking.k8s.io/v1', kind: 'ServiceCIDR', metadata: { name: 'bench-services' }, spec: { cidrs: ['10.96.0.0/16'] } }));
    });
    const bundlePath = join(stateDir, 'workflow-bundle.js');
    const bundleSource = await sourceHash();
    await phase('bundle the workflow code (bundleWorkflowCode on workflows/index.ts)', async () => {
      const quiet = { log: () => {}, trace: () => {}, debug: () => {}, info: () => {}, warn: () => {}, error: (m: string) => console.error(m) };
      const bundle = await bundleWorkflowCode({ workflowsPath: join(root, 'workflows', 'index.ts'), logger: quiet });
      await writeFile(bundlePath, bundle.code);
    });
    api = await ApiServer.connect(info);
    const kc = new KubeConfig();
    kc.loadFromFile(info.kubeconfig);
    temporalConnection = await Connection.connect({ address: info.temporalAddress });
    const ctx: Ctx = { opts, info, api, kube: new Kube(kc), temporal: new Client({ connection: temporalConnection, namespace: info.temporalNamespace }), bundlePath, bundleSource, logDir };

    const floor = opts.floor ? await runFloor(ctx) : null;
    if (floor) progress(`floor: ${floor.makespanSeconds.toFixed(1)} s from the first create to ${floor.apps} Deployments available`);
    const runs: RunResult[] = [];
    for (const w of opts.workers) {
      const r = await runOperator(ctx, w, floor);
      runs.push(r);
      const d = r.latency;
      progress(`operator (${w}w): ${r.converged}/${r.apps} converged; p50 ${d ? secs(d.p50) : '-'} s, p99 ${d ? secs(d.p99) : '-'} s, makespan ${r.makespanSeconds.toFixed(1)} s${r.ratioToFloor ? ` (${r.ratioToFloor.toFixed(2)}x floor)` : ''}`);
    }

    const report: Report = {
      command, startedAt: startedAt.toISOString(), finishedAt: new Date().toISOString(), machine, versions: vers,
      code: { commit: git.commit, uncommitted: git.dirty, bundleSource },
      options: { ...opts, nodes },
      definitions: {
        latency: 'per app: from the create request being answered to the first poll (Applications, Deployments and Services listed every 500 ms) that sees status.observedGeneration == metadata.generation, phase Running, and the Deployment and Service present',
        makespan: 'from the first create request to the last app converged',
        floor: 'the same N apps created without an operator, read back, rendered with renderChildren and server-side applied at the operator\'s concurrency, until every Deployment is available; no Temporal, no status writes',
        temporalActions: 'workflow starts + signals + activities scheduled + timers started (counted from histories; extrapolated from a sample when the run has more executions than --history-sample)',
        idleWrites: 'POST/PUT/PATCH/APPLY/DELETE requests made by the operator processes (client-side probe) in the idle window',
        apiAllClients: 'apiserver_request_total deltas over the window, all clients, minus the benchmark\'s own polling',
      },
      floor, runs, targets: targets(opts, runs, floor), files: [],
    };
    const chartFiles = await writeChart(`${base}.svg`, latencyChartSvg(
      runs.map((r) => ({ label: `N=${r.apps}, ${r.workers} worker${r.workers > 1 ? 's' : ''}`, latenciesMs: r.latenciesMs, makespanMs: r.makespanSeconds * 1000, ...(floor ? { floorMs: floor.makespanSeconds * 1000 } : {}) })),
      `Application convergence latency, N = ${opts.apps}`,
      `${machine.cores} cores, ${machine.memoryGiB} GiB; ${startedAt.toISOString()}; ${command}`,
    ));
    report.files.push(`${base}.json`, ...chartFiles.files, logDir);
    await writeFile(`${base}.json`, JSON.stringify(report, null, 1));
    const aggregate = await aggregateChart(opts.out);
    const agg = await writeChart(join(opts.out, 'latency-by-n.svg'), latencyChartSvg(aggregate, 'Application convergence latency per N (latest run of each N and worker count)', `from ${relative(root, opts.out) || opts.out}/bench-*.json`));
    report.files.push(...agg.files);
    await writeFile(`${base}.json`, JSON.stringify(report, null, 1));
    printReport(report);
    if (chartFiles.note) console.log(chartFiles.note);
    return runs.every((r) => r.converged === r.apps) ? 0 : 2;
  } catch (err) {
    const where = err instanceof PhaseError ? err.phase : phaseNow();
    console.error(`\nbenchmark failed in phase "${where}": ${err instanceof PhaseError ? (err.cause instanceof Error ? err.cause.message : String(err.cause)) : err instanceof Error ? err.message : String(err)}`);
    console.error(`operator logs: ${logDir}; the stack's server logs are in ${stateDir}/logs${opts.keepStack ? '' : ' (removed with the stack; --keep-stack keeps them)'}`);
    return 1;
  } finally {
    api?.close();
    await temporalConnection?.close().catch(() => undefined);
    if (!interrupted) await teardown();
  }
}

main().then((code) => process.exit(code), (err: unknown) => {
  console.error(`benchmark failed: ${err instanceof Error ? err.message : String(err)}`);
  process.exit(1);
});
