// The benchmark's results: the JSON report, its targets (reported as PASS/MISS, never asserted), the printed
// tables and the latency charts.
import { readFile, readdir, writeFile } from 'node:fs/promises';
import { cpus, loadavg, platform, release, totalmem } from 'node:os';
import { join, relative, resolve } from 'node:path';
import { versions as stackVersions } from '../stack/versions.ts';
import { isWrite, sum } from './apiserver.ts';
import { latencyChartSvg, writeChart, type Series } from './chart.ts';
import type { CpuSnapshot } from './cpu.ts';
import type { FloorResult } from './floor.ts';
import type { LatencyPart, LatencyResult } from './latency.ts';
import type { LoadSummary } from './load.ts';
import type { ImportCost, MemorySnapshot } from './memory.ts';
import type { RunResult } from './operator-run.ts';
import type { Options } from './options.ts';
import type { DeleteResult } from './delete.ts';
import type { RestartResult } from './restart.ts';
import type { RolloutsResult } from './rollouts.ts';
import { perApp, type EventCounts } from './temporal.ts';
import { distribution, fmt, table, verdict, type Distribution } from './util.ts';

const root = resolve(import.meta.dirname, '..');

const VERBS = ['GET', 'LIST', 'WATCH', 'POST', 'PUT', 'PATCH', 'APPLY', 'APPLY dry-run', 'DELETE'];

function verbRow(label: string, byVerbCounts: Record<string, number>, n: number): (string | number)[] {
  const other = sum(byVerbCounts, (k) => !VERBS.includes(k));
  return [label, ...VERBS.map((v) => (byVerbCounts[v] ?? 0) / n), other / n, sum(byVerbCounts) / n, sum(byVerbCounts, isWrite) / n];
}

function runLabel(r: RunResult): string {
  return `operator, ${r.workers} worker${r.workers > 1 ? 's' : ''}`;
}

const mb = (n: number) => `${n.toFixed(0)} MB`;

/** The JSON written to results/bench-*.json (and read back by --report). */
export interface Report {
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
  /** The latency scenario's result (its runs are empty and its floor null). */
  latency?: LatencyResult;
  /** The restart scenario's result (its one run is the convergence before the restarts). */
  restart?: RestartResult;
  /** The delete scenario's result (its one run is the convergence before the delete; its floor is the one deleted). */
  deletion?: DeleteResult;
  /** The rollouts scenario's result (its one run is the convergence of the mesh apps before the canaries). */
  rollouts?: RolloutsResult;
  /** What importing the operator's modules costs, each in a fresh process. */
  imports?: ImportCost[];
  targets: { target: string; results: { workers: number; verdict: string; value: string }[] }[];
  files: string[];
}

/** The machine and the versions a result was measured with. */
export async function setup(): Promise<Pick<Report, 'machine' | 'versions'>> {
  const workerPkg = JSON.parse(await readFile(join(root, 'node_modules', '@temporalio', 'worker', 'package.json'), 'utf8')) as { version: string };
  return {
    machine: {
      cores: cpus().length, cpu: cpus()[0]?.model ?? '?', memoryGiB: (totalmem() / 2 ** 30).toFixed(1), os: `${platform()} ${release()}`,
      loadAtStart: loadavg().map((l) => l.toFixed(2)).join(' '),
    },
    versions: {
      node: process.version, kubernetes: stackVersions.kubernetes, etcd: stackVersions.etcd, kwok: stackVersions.kwok, 'temporal-cli': stackVersions.temporalCli,
      '@temporalio/*': workerPkg.version,
    },
  };
}

/** What each measure means, written into every result. */
export const definitions: Record<string, string> = {
  latency: 'per app: from the create request being answered to the first look (every 500 ms, at the Applications, Deployments and Services as watches report them) that sees status.observedGeneration == metadata.generation, phase Running, and the Deployment and Service present',
  makespan: 'from the first create request to the last app converged',
  floor: 'the same N apps created without an operator, read back, rendered with renderChildren and server-side applied at the operator\'s concurrency, until every Deployment is available; no Temporal, no status writes',
  temporalActions: 'workflow starts + signals + activities scheduled + local activities (markers) + timers started (counted from histories; extrapolated from a sample when the run has more executions than --history-sample)',
  idleWrites: 'POST/PUT/PATCH/APPLY/DELETE requests made by the operator processes (client-side probe) in the idle window',
  apiAllClients: 'apiserver_request_total deltas over the window, all clients, minus the benchmark\'s own polling',
};

/** What the latency scenario measures, written into its results. */
export const latencyDefinitions: Record<string, string> = {
  'create -> Running': 'one Application created at a time (image nginx:1.25, replicas 1) on an otherwise idle operator: from the create request being answered to the first read of that Application, its Deployment and its Service (read together every 50 ms) that sees status.phase Running at observedGeneration == metadata.generation and both children present; kwok\'s pod delay (podDelayMs) is part of it',
  'spec change -> applied': 'the same apps, one at a time: from a merge patch of spec.image being answered to the first read (every 50 ms) that sees the new image in the Deployment\'s pod template and status.observedGeneration == the generation the patch answered with',
  'promote -> 100% stable': 'bench/promote.ts: promote update accepted -> VirtualService read back (every 100 ms) at 100% stable, canaries promoted one at a time',
  milestones: 'ms from the start of a sample until a poll first saw each step, median over the sample',
  'samples that did not complete': 'count as never in the targets\' percentiles (a timed-out sample cannot make a target pass)',
};

/** What the restart scenario measures, written into its results. */
export const restartDefinitions: Record<string, string> = {
  convergence: definitions['latency']!,
  restarts: '(a) SIGTERM to the operator, then a new process; (b) SIGKILL (a crash), then a new process; (c) two --leader-elect replicas started and settled, then the Lease holder SIGKILLed',
  ready: 'from the new process\'s spawn to /readyz answering 200; for the failover, from the leader\'s SIGKILL to the standby holding the Lease (read every 100 ms)',
  idle: 'from the same moment to the last API request (client-side probe, read every 250 ms) before --quiet-seconds without any; Lease requests left out (a leader renews, a standby reads, every 2 s)',
  requests: 'the new process\'s (the standby\'s) requests in that window, by verb; reads = GET + LIST + WATCH, writes = POST/PUT/PATCH/APPLY/DELETE, dry-run included',
  temporal: 'history events of the Application workflows from the start of the window to the end of the quiet time, extrapolated from --history-sample histories',
  peakRss: 'VmHWM / VmRSS of the new process (the standby), sampled every 500 ms',
};

/** What the delete scenario measures, written into its results. */
export const deleteDefinitions: Record<string, string> = {
  convergence: definitions['latency']!,
  delete: 'from the namespace DELETE being answered to the first read (every 250 ms) answering 404: every Application finalizer released and every object gone',
  floor: 'the floor\'s namespace (its Applications created with no operator, so no finalizers, and the same rendered children server-side applied) deleted and timed the same way, before the operator run',
  running: 'executions of the run\'s task queue with ExecutionStatus = Running, counted with the Temporal client when the namespace was gone and again (every 1 s, up to 30 s) until 0',
};

/** What the rollouts scenario measures, written into its results. */
export const rolloutsDefinitions: Record<string, string> = {
  convergence: `${definitions['latency']!}; the apps have serviceMesh.enabled (a VirtualService and a DestinationRule too)`,
  rollouts: 'every app\'s spec.serviceMesh.canary merge-patched at once (canaryVersion v2, steps setWeight 20, pause 5s, setWeight 50, pause {} (an approval); healthGates.interval 2s); times are when the benchmark\'s watches of the namespace\'s Applications and VirtualServices (one list each, then only changes) delivered the event',
  'spec change -> first weight': 'the patch answered -> the VirtualService first read canary 20',
  'pause late': 'the VirtualService first read canary 50 - (it first read canary 20 + the pause\'s 5 s): how late the timed pause ended, as traffic shows it (the next step\'s gate and the weight write included); "against pauseEndsAt": the same against status.canary.pauseEndsAt, the end the rollout set itself',
  promote: 'once every app waited at its approval (status.canary phase Paused at step 3, weight 50), all promoted at once with control(client, \'promote\', ...) (a Temporal update, as bench/promote.ts): request sent -> the VirtualService first read 100% stable (the targets); also from the update accepted (bench/promote.ts\'s definition) and to status.canary.phase Promoted',
  'promote floor': 'before the operator\'s run, in a namespace of its own with no operator: N Applications with the same canary, their children rendered by the operator\'s renderers as at the approval (canary Deployment running, weight 50) and server-side applied; then all N at once, each in order: spec.image merge-patched to the canary\'s image, the stable Deployment applied, its rollout awaited on a watch of the Deployments, the VirtualService applied at 100% stable; start -> that apply answered. No status, Event, read-back or canary removal: a promote cannot be faster on this machine',
  timers: 'from up to --history-sample rollout histories, every timer that fired (gate checks, the pause\'s end): TimerFired, and the start of the next workflow task (when the workflow could act), each minus TimerStarted + its timeout',
  requests: 'from the first patch to the last app Promoted: the operator\'s own requests (probe), and apiserver_request_total deltas of all clients with the bench\'s reads subtracted (the bench\'s two watches are not subtracted)',
  'samples that did not complete': 'count as never in the targets\' percentiles',
};

/** The rollouts scenario's targets: promote percentiles (s), and lateness against one gate interval. */
export const rolloutsGoals = { promoteP50Ms: 1500, promoteP99Ms: 5000 };

/** The rollouts scenario's targets with a verdict each (reported, never asserted); an app that did not get there counts as never. */
export function rolloutsTargets(r: Pick<RolloutsResult, 'apps' | 'plan' | 'promoteMs' | 'pauseLatenessMs' | 'timers' | 'errors' | 'floor'>): Report['targets'] {
  const row = (target: string, ok: boolean | null, value: string) => ({ target, results: [{ workers: 1, verdict: verdict(ok), value }] });
  const missing = (done: number) => (done < r.apps ? ` (${r.apps - done}/${r.apps} did not complete)` : '');
  const never = (v: number[]) => distribution([...v, ...Array.from({ length: Math.max(0, r.apps - v.length) }, () => Infinity)]);
  const s = (ms: number) => (Number.isFinite(ms) ? `${(ms / 1000).toFixed(2)} s` : 'did not complete');
  const promote = never(r.promoteMs);
  const pause = never(r.pauseLatenessMs);
  const interval = r.plan.gateIntervalMs;
  const seen = r.timers?.seen ?? null;
  // The floor's figure beside each: a target below the floor's cannot be met by any operator on this machine.
  const floor = r.floor ? distribution([...r.floor.promoteMs, ...Array.from({ length: Math.max(0, r.floor.apps - r.floor.promoteMs.length) }, () => Infinity)]) : null;
  const onFloor = (q: 'p50' | 'p99') => (floor ? `; floor ${s(floor[q])}${promote && Number.isFinite(promote[q]) && Number.isFinite(floor[q]) && floor[q] > 0 ? `, ${(promote[q] / floor[q]).toFixed(2)}x` : ''}` : '');
  return [
    row(`promote -> 100% stable p50 < ${rolloutsGoals.promoteP50Ms / 1000} s`, promote ? promote.p50 < rolloutsGoals.promoteP50Ms : null, `${promote ? s(promote.p50) : 'not measured'}${missing(r.promoteMs.length)}${onFloor('p50')}`),
    row(`promote -> 100% stable p99 < ${rolloutsGoals.promoteP99Ms / 1000} s`, promote ? promote.p99 < rolloutsGoals.promoteP99Ms : null, `${promote ? s(promote.p99) : 'not measured'}${missing(r.promoteMs.length)}${onFloor('p99')}`),
    row(`no timed pause late by more than one gate interval (${interval / 1000} s)`, pause ? pause.max <= interval : null, `max ${pause ? s(pause.max) : 'not measured'}${missing(r.pauseLatenessMs.length)}`),
    row(`no timer seen late by more than one gate interval (${interval / 1000} s)`, seen ? seen.max <= interval : null, seen ? `max ${s(seen.max)} (${r.timers!.timers} timers in ${r.timers!.histories} histories)` : 'not measured'),
    row('every rollout reached its approval and was promoted', r.promoteMs.length === r.apps && r.errors.length === 0, `${r.promoteMs.length}/${r.apps}, ${r.errors.length} errors`),
  ];
}

/** The latency scenario's targets: part, percentile, limit. */
export const latencyGoals: { part: 'create' | 'update' | 'promote'; label: string; pct: 'p50' | 'p99'; limitMs: number }[] = [
  { part: 'create', label: 'create -> Running', pct: 'p50', limitMs: 1000 },
  { part: 'create', label: 'create -> Running', pct: 'p99', limitMs: 2000 },
  { part: 'update', label: 'spec change -> applied', pct: 'p50', limitMs: 500 },
  { part: 'promote', label: 'promote -> 100% stable', pct: 'p50', limitMs: 1000 },
];

/** The latency scenario's targets with a verdict each (reported, never asserted); samples that did not complete count as never. */
export function latencyTargets(l: Pick<LatencyResult, 'create' | 'update' | 'promote'>): Report['targets'] {
  return latencyGoals.map((g) => {
    const target = `${g.label} ${g.pct} < ${g.limitMs / 1000} s`;
    const part: Pick<LatencyPart, 'sample' | 'latenciesMs' | 'errors'> | null = l[g.part];
    const d = part ? distribution([...part.latenciesMs, ...part.errors.map(() => Infinity)]) : null;
    if (!part || !d) return { target, results: [{ workers: 1, verdict: verdict(null), value: 'not measured' }] };
    const v = d[g.pct];
    const value = `${Number.isFinite(v) ? `${(v / 1000).toFixed(2)} s` : 'did not complete'}${part.errors.length ? ` (${part.errors.length}/${part.sample} did not complete)` : ''}`;
    return { target, results: [{ workers: 1, verdict: verdict(v < g.limitMs), value }] };
  });
}

/** The restart scenario's targets: for each restart, ready and idle within this long, and at most this many requests per app. */
export const restartGoals = { readySeconds: 60, idleSeconds: 60, readsPerApp: 1, writes: 0 };

/** The restart scenario's targets, one row per restart and target (reported, never asserted). */
export function restartTargets(r: RestartResult): Report['targets'] {
  const g = restartGoals;
  return r.cases.flatMap((c) => {
    const row = (target: string, ok: boolean | null, value: string) => ({ target: `${c.name}: ${target}`, results: [{ workers: 1, verdict: verdict(ok), value }] });
    return [
      row(`ready <= ${g.readySeconds} s`, c.readySeconds <= g.readySeconds, `${c.readySeconds.toFixed(1)} s`),
      row(`idle <= ${g.idleSeconds} s`, c.idleSeconds !== null && c.idleSeconds <= g.idleSeconds, c.idleSeconds === null ? 'still busy at the timeout' : `${c.idleSeconds.toFixed(1)} s`),
      row(`<= ${g.readsPerApp} read per app`, c.reads / r.apps <= g.readsPerApp, `${fmt(c.reads / r.apps)} (${c.reads} reads)`),
      row(`${g.writes} writes`, c.writes <= g.writes, `${c.writes} writes`),
    ];
  });
}

/** The delete scenario's targets: delete time against the floor's, and no workflow left running. */
export function deleteTargets(d: DeleteResult): Report['targets'] {
  const row = (target: string, ok: boolean | null, value: string) => ({ target, results: [{ workers: 1, verdict: verdict(ok), value }] });
  const o = d.operator;
  return [
    row('namespace delete <= 1.5x floor', d.ratio === null ? (o.seconds === null ? false : null) : d.ratio <= 1.5,
      o.seconds === null ? `not gone after the timeout (${o.appsLeft} Applications left)` : d.ratio === null ? `${o.seconds.toFixed(1)} s, no floor` : `${d.ratio.toFixed(2)}x (${o.seconds.toFixed(1)} s vs ${d.floor!.seconds!.toFixed(1)} s)`),
    row('0 workflows left running', o.runningAfter === 0, `${o.runningAfter} (${o.runningAtGone} when the namespace was gone)`),
  ];
}

/** The targets of any result, by its scenario. */
export function reportTargets(rep: Report): Report['targets'] {
  if (rep.latency) return latencyTargets(rep.latency);
  if (rep.restart) return restartTargets(rep.restart);
  if (rep.deletion) return deleteTargets(rep.deletion);
  if (rep.rollouts) return rolloutsTargets(rep.rollouts);
  return targets(rep.options, rep.runs, rep.floor);
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

/** Each target with a verdict per run (reported, never asserted). */
export function targets(opts: Options, runs: RunResult[], floor: FloorResult | null): Report['targets'] {
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
  // The issue's budget: 300 MB per process at 1,000 Applications, 500 MB at 10,000.
  const rss = opts.apps >= 10_000 ? { mb: 500, note: at10k } : { mb: 300, note: at1000 };
  each(`RSS <= ${rss.mb} MB per operator process${rss.note}`, (r) => {
    const peak = Math.max(...r.memory.map((m) => m.peakRssMB));
    return { ok: peak <= rss.mb, value: mb(peak) };
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

function loadCells(l: LoadSummary | undefined): string[] {
  if (!l?.samples) return ['-', '-'];
  return [`${l.load1.mean.toFixed(1)} (${l.load1.max.toFixed(1)})`, `${(l.othersShare.mean * 100).toFixed(0)}%`];
}

/** Prints the tables of a result. */
export function printReport(rep: Report): void {
  const { floor, runs, options: opts } = rep;
  const n = opts.apps;
  const out: string[] = [];
  const h = (t: string) => out.push('', `== ${t}`);
  h('Setup');
  const m = rep.machine;
  out.push(`machine:  ${String(m['cores'])} cores (${String(m['cpu'])}), ${String(m['memoryGiB'])} GiB memory, ${String(m['os'])}; load average at start ${String(m['loadAtStart'])} (other work shares this machine: numbers are noisy)`);
  out.push(`versions: ${Object.entries(rep.versions).map(([k, v]) => `${k} ${v}`).join(', ')}`);
  out.push(`command:  ${rep.command}`);
  const ran = rep.latency ? [{ label: 'the operator', hash: rep.latency.sourceHash }] : runs.map((r) => ({ label: `${r.workers}w`, hash: r.sourceHash }));
  if (rep.code) out.push(`code:     commit ${rep.code.commit}${rep.code.uncommitted.length ? ` + uncommitted: ${rep.code.uncommitted.join(', ')}` : ''}; operator sources ${rep.code.bundleSource} at bundling${ran.some((r) => r.hash !== rep.code.bundleSource) ? `; CHANGED during the benchmark: ${ran.map((r) => `${r.label} ran ${r.hash}`).join(', ')}` : ', unchanged for every run'}`);
  out.push(`stack:    own stack on free ports, ${opts.nodes} kwok nodes, podDelayMs ${opts.podDelayMs}; apps: image nginx:1.25, replicas 1${rep.rollouts ? ', serviceMesh.enabled (children: Deployment, Service, VirtualService, DestinationRule)' : ' (children: Deployment + Service)'}; finalizer policy ${opts.finalizerPolicy ? 'on (the API server adds the finalizer at create)' : 'off (the operator adds its finalizer)'}`);
  const flags = runs[0]?.operatorFlags ?? rep.latency?.operatorFlags;
  if (flags) out.push(`operator: application-operator run ${flags.filter((f) => !/kubeconfig|address|bundle|metrics-addr|task-queue|namespaces=/.test(f)).join(' ')} (other flags at their defaults)`);
  if (rep.latency || rep.restart || rep.deletion || rep.rollouts) {
    if (rep.latency) latencyTables(rep, rep.latency, out);
    if (rep.restart) restartTables(rep, rep.restart, out);
    if (rep.deletion) deleteTables(rep, rep.deletion, out);
    if (rep.rollouts) rolloutsTables(rep, rep.rollouts, out);
    h('Files');
    for (const f of rep.files) out.push(relative(process.cwd(), f) || f);
    console.log(out.join('\n'));
    return;
  }

  h(`Convergence, N = ${n} (latency: create answered -> first 500 ms look at the watched state seeing phase Running at the current generation with Deployment and Service present)`);
  const rows: (string | number)[][] = [];
  if (floor) rows.push(['floor (SSA, no Temporal)', floor.apps, 0, '-', '-', '-', '-', floor.makespanSeconds, 1, floor.cpu ? 1 : '-', ...loadCells(floor.load)]);
  for (const r of runs) {
    const d = r.latency;
    rows.push([runLabel(r), r.converged, r.failed.length + (r.converged < r.apps ? r.apps - r.converged - r.failed.length : 0),
      d ? d.p50 / 1000 : '-', d ? d.p95 / 1000 : '-', d ? d.p99 / 1000 : '-', d ? d.max / 1000 : '-', r.makespanSeconds, r.ratioToFloor ?? '-', cpuRatio(r, floor) ?? '-', ...loadCells(r.load)]);
  }
  out.push(table(['run', 'converged', 'not converged', 'p50 s', 'p95 s', 'p99 s', 'max s', 'makespan s', 'x floor', 'x floor (CPU)', 'load avg (max)', 'others\' CPU'], rows));
  out.push('x floor (CPU) = CPU per app of the stack, Temporal and the operator in the run / in the floor: the makespan ratio on a dedicated CPU-bound machine, free of the other load that varies between the two measurements');
  out.push(`load avg = the 1-minute load average sampled every 2 s during that window (mean, and max); others' CPU = the share of the machine's ${String(m['cores'])} cores used by processes this benchmark does not measure`);
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
      tRows.push([runLabel(r), r.temporalError ?? 'not counted', '', '', '', '', '', '', '', '', '', '']);
      continue;
    }
    const c = perApp(r.temporal.create, n);
    tRows.push([runLabel(r), `${r.temporal.sampled}/${r.temporal.executions}${r.temporal.extrapolated ? ' (extrapolated)' : ''}`,
      c.starts, c.workflowTasks, c.activities, c.localActivities ?? 0, c.signals, c.timers, c.upserts, c.events, c.failures, c.actions]);
  }
  out.push(table(['run', 'histories read', 'starts', 'wf tasks', 'activities', 'local acts', 'signals', 'timers', 'SA upserts', 'events', 'failures', 'actions*'], tRows));
  out.push('* Temporal actions (this benchmark\'s definition) = workflow starts + signals + activities scheduled + local activities + timers started; search-attribute upserts are shown but not counted');

  h(`Idle: ${opts.idleSeconds} s after the last app converged`);
  const iRows: (string | number)[][] = [];
  for (const r of runs) {
    const t: EventCounts | null = r.temporal ? perApp(r.temporal.idle, n) : null;
    iRows.push([runLabel(r), r.idle.operatorWrites, r.idle.operatorWrites / n, sum(r.idle.operatorByVerb) / n,
      t ? t.workflowTasks : '-', t ? t.activities + (t.localActivities ?? 0) : '-', t ? t.timers : '-', t ? t.signals : '-', r.idle.allClientsWrites]);
  }
  out.push(table(['run', 'operator writes', 'writes/app', 'operator requests/app', 'wf tasks/app', 'activities/app', 'timers/app', 'signals/app', 'all-clients writes (total)'], iRows));
  for (const r of runs) {
    const top = Object.entries(r.idle.allClientsWritesByResource).slice(0, 4).map(([k, v]) => `${k} ${v}`).join(', ');
    if (top) out.push(`${r.workers}w idle writes by all clients: ${top}`);
  }

  h('Memory: peak RSS per operator process (VmHWM / VmRSS sampled every 500 ms)');
  out.push(table(['run', 'process', 'RSS when ready MB', 'peak RSS MB', 'RSS at end MB'], runs.flatMap((r) => r.memory.map((mm) => [runLabel(r), mm.process, mm.readyRssMB, mm.peakRssMB, mm.endRssMB]))));
  const moments = (mm: RunResult['memory'][number]): [string, MemorySnapshot | undefined][] => [['ready', mm.ready], ['all converged', mm.converged], ['highest RSS scraped', mm.peak]];
  const memRows = runs.flatMap((r) => r.memory.flatMap((mm) => moments(mm).filter(([, x]) => x).map(([when, x]) => [
    `${r.workers}w ${mm.process}`, when, x!.rssMB, `${fmt(x!.mainHeapUsedMB)} / ${fmt(x!.mainHeapTotalMB)}`, `${fmt(x!.workerThreadsHeapUsedMB)} / ${fmt(x!.workerThreadsHeapTotalMB)}`, x!.externalMB, x!.nativeAndOtherMB, x!.cachedWorkflows,
  ])));
  if (memRows.length) {
    out.push('', 'Where it goes (from the process\'s /metrics, scraped every 5 s; MB):');
    out.push(table(['process', 'when', 'RSS', 'main heap used / total', 'workflow thread heap used / total', 'external', 'native and other', 'cached workflows'], memRows));
    out.push('native and other = RSS - both heaps (total) - external: the Temporal core SDK (Rust), compiled code, thread stacks and allocator slack');
  }
  if (rep.imports?.length) {
    const base = rep.imports[0]!.rssMB;
    out.push('', 'Importing the modules, each in a fresh process (RSS after import and a full GC; MB):');
    out.push(table(['module', 'RSS', 'above node alone', 'heap used'], rep.imports.map((x, i) => [x.module, x.rssMB, i === 0 ? '-' : x.rssMB - base, x.heapUsedMB])));
  }

  h('CPU by component, ms per app (from /proc; "others" = the rest of the machine: other people\'s work on a shared machine)');
  const cpuRows: [string, CpuSnapshot, number][] = [];
  if (floor?.cpu) cpuRows.push(['floor', floor.cpu, floor.makespanSeconds]);
  for (const r of runs) if (r.cpu) cpuRows.push([`${r.workers}w create`, r.cpu.create, r.makespanSeconds]);
  for (const r of runs) if (r.cpu) cpuRows.push([`${r.workers}w idle`, r.cpu.idle, r.idle.seconds]);
  out.push(cpuTable(rep, cpuRows, n));

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
    out.push(`${r.workers}w: watcher signals ${JSON.stringify(r.diagnostics.signals)}${r.diagnostics.starts ? `; starts of new workflows by first task ${JSON.stringify(r.diagnostics.starts)}` : ''}; histogram means: ${lm || 'none'}`);
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

/** The latency scenario's tables, after the setup lines. */
function latencyTables(rep: Report, l: LatencyResult, out: string[]): void {
  const h = (t: string) => out.push('', `== ${t}`);
  const parts: [string, LatencyPart | null][] = [['create -> Running', l.create], ['spec change -> applied', l.update], ['promote -> 100% stable', l.promote]];
  h(`Latency: one app at a time on an idle operator (1 process; the app and its children read every ${l.pollMs} ms; ${l.gapMs} ms between samples)`);
  out.push(table(['part', 'sample', 'p50 s', 'p95 s', 'p99 s', 'max s', 'part s', 'load avg (max)', 'others\' CPU'], parts.filter(([, p]) => p).map(([name, p]) => {
    const d = p!.latency;
    return [name, `${p!.latenciesMs.length}/${p!.sample}`, d ? d.p50 / 1000 : '-', d ? d.p95 / 1000 : '-', d ? d.p99 / 1000 : '-', d ? d.max / 1000 : '-', p!.seconds, ...loadCells(p!.load)];
  })));
  out.push(`load avg = the 1-minute load average sampled every 2 s during the part (mean, and max); others' CPU = the share of the machine's ${String(rep.machine['cores'])} cores used by processes this benchmark does not measure`);
  out.push(`create -> Running includes kwok's pod delay (podDelayMs ${rep.options.podDelayMs} per pod transition); promote's part s includes creating its ${l.promote?.sample ?? 0} mesh apps and waiting for their canaries at 20%`);

  h('Where the time goes: median ms from the start of a sample to the first read that saw each step');
  for (const [name, p] of parts) {
    if (!p) continue;
    const steps = Object.entries(p.milestones).map(([k, v]) => [k, distribution(v)?.p50 ?? NaN] as const).sort((a, b) => a[1] - b[1]);
    if (steps.length) out.push(`${name}: ${steps.map(([k, v]) => `${k} ${fmt(v)}`).join(', ')}`);
  }
  if (l.promote) {
    const u = distribution(l.promote.detail.updateMs);
    if (u) out.push(`promote: the update call itself took p50 ${fmt(u.p50)} ms, max ${fmt(u.max)} ms (before the timed window)`);
  }
  const names = [...new Set(parts.flatMap(([, p]) => Object.keys(p?.histograms ?? {})))].sort();
  if (names.length) {
    out.push('', 'The operator\'s histograms over each part (mean, count; the Temporal SDK\'s in ms, *_seconds in s):');
    out.push(table(['metric', ...parts.map(([n]) => n)], names.map((k) => [k.replace(/^temporal_|^application_operator_/, ''), ...parts.map(([, p]) => {
      const x = p?.histograms[k];
      return x ? `${fmt(x.mean)} (n=${x.count})` : '-';
    })])));
  }

  h('Targets (reported, never asserted)');
  out.push(table(['target', 'result'], rep.targets.map((t) => [t.target, t.results.map((x) => `${x.verdict} ${x.value}`).join(', ')])));

  h('Diagnostics');
  out.push(`watcher signals ${JSON.stringify(l.diagnostics.signals)}; operator RSS ${mb(l.memory.readyRssMB)} when ready, peak ${mb(l.memory.peakRssMB)}`);
  const lg = l.diagnostics.log;
  out.push(`operator log ${lg.warnings} warnings, ${lg.errors} errors${Object.keys(lg.messages).length ? `: ${Object.entries(lg.messages).sort((a, b) => b[1] - a[1]).slice(0, 5).map(([k, v]) => `${v}x ${k}`).join('; ')}` : ''}`);
  for (const [name, p] of parts) for (const e of (p?.errors ?? []).slice(0, 5)) out.push(`${name}: ${e}`);
}

/** The convergence a restart or delete scenario starts from, in one line. */
function convergedLine(rep: Report): string {
  const r = rep.runs[0];
  if (!r) return 'no convergence run';
  return `converged ${r.converged}/${r.apps} with 1 process in ${r.makespanSeconds.toFixed(1)} s (p50 ${r.latency ? (r.latency.p50 / 1000).toFixed(1) : '-'} s${r.ratioToFloor ? `, ${r.ratioToFloor.toFixed(2)}x floor` : ''}), then idle ${r.idle.seconds.toFixed(0)} s (${r.idle.operatorWrites} operator writes); namespace ${r.namespace}, task queue ${r.taskQueue}`;
}

/** The restart scenario's tables, after the setup lines. */
function restartTables(rep: Report, r: RestartResult, out: string[]): void {
  const h = (t: string) => out.push('', `== ${t}`);
  const g = restartGoals;
  h(`Restart, N = ${r.apps}: ${convergedLine(rep)}`);
  out.push(table(['restart', 'old exit s', `ready s (<= ${g.readySeconds})`, `idle s (<= ${g.idleSeconds})`, 'reads', `reads/app (<= ${g.readsPerApp})`, `writes (${g.writes})`, 'Lease reqs', 'wf starts', 'signals', 'wf tasks', 'activities', 'events', 'peak RSS MB'], r.cases.map((c) => {
    const t = c.temporal;
    return [c.name, c.stopSeconds ?? '-', c.readySeconds, c.idleSeconds ?? 'never', c.reads, c.reads / r.apps, c.writes, c.leaseRequests,
      t ? t.starts : '-', t ? t.signals : '-', t ? t.workflowTasks : '-', t ? t.activities + t.localActivities : '-', t ? t.events : '-', c.peakRssMB];
  })));
  out.push(`old exit = the signal sent -> the old process gone; ready: ${[...new Set(r.cases.map((c) => c.readyMeans))].join('; or, for a failover, ')}; timed from the new process's spawn (failover: from the leader's SIGKILL)`);
  out.push(`idle s = until the operator's last API request before ${r.quietSeconds} s without one (probe, to within ~0.5 s; Lease requests left out); reads = GET + LIST + WATCH, writes = POST/PUT/PATCH/APPLY/DELETE (dry-run included), both by the new process (failover: the standby) in that window`);
  out.push('Temporal: history events of every Application workflow from the start of the window until idle (+ the quiet time), extrapolated from --history-sample histories');

  h('The operator\'s API requests in each window, by verb (totals)');
  out.push(table(['restart', ...VERBS, 'other', 'total', 'writes'], r.cases.flatMap((c) => [verbRow(`${c.name}: operator (probe)`, c.operatorByVerb, 1), verbRow('  all clients', c.allClientsByVerb, 1)])));
  out.push('operator (probe) = the new process\'s (the standby\'s) own count, Lease requests included; all clients = apiserver_request_total deltas over the window (controllers, scheduler and kwok too), the bench\'s reads subtracted; the API server counts a WATCH when it ends, so watches still open are not in it');
  for (const c of r.cases) {
    const top = Object.entries(c.operatorByResource).sort((a, b) => b[1] - a[1]).slice(0, 8).map(([k, v]) => `${k} ${v}`).join(', ');
    out.push(`${c.name}: ${top || 'no requests'}`);
  }

  h('Targets (reported, never asserted)');
  out.push(table(['target', 'result'], rep.targets.map((t) => [t.target, t.results.map((x) => `${x.verdict} ${x.value}`).join(', ')])));

  h('Diagnostics');
  for (const c of r.cases) {
    const lg = c.log;
    out.push(`${c.name}: operator log ${lg.warnings} warnings, ${lg.errors} errors${Object.keys(lg.messages).length ? `: ${Object.entries(lg.messages).sort((a, b) => b[1] - a[1]).slice(0, 5).map(([k, v]) => `${v}x ${k}`).join('; ')}` : ''}${c.temporalError ? `; Temporal not counted: ${c.temporalError}` : ''}`);
  }
}

/** The delete scenario's tables, after the setup lines. */
function deleteTables(rep: Report, d: DeleteResult, out: string[]): void {
  const h = (t: string) => out.push('', `== ${t}`);
  h(`Delete, N = ${d.apps}: ${convergedLine(rep)}`);
  const o = d.operator;
  const rows: (string | number)[][] = [];
  if (d.floor) rows.push(['floor (SSA, no operator, no finalizers)', d.floor.seconds ?? 'never', 1, '-', '-', d.floor.appsLeft]);
  rows.push(['operator (1 process)', o.seconds ?? 'never', d.ratio ?? '-', o.runningAtGone, o.runningAfter, o.appsLeft]);
  out.push(table(['namespace', 'delete -> gone s', 'x floor (<= 1.5)', 'workflows running when gone', `running ${o.settleSeconds.toFixed(0)} s later (0)`, 'apps left'], rows));
  out.push('delete -> gone = from the namespace DELETE being answered to the first read (every 250 ms) answering 404; workflows = executions of the run\'s task queue with ExecutionStatus Running');
  if (o.leftRunning.length) out.push(`left running: ${o.leftRunning.join(', ')}`);

  h('API requests while the namespace went (totals; all clients = apiserver_request_total deltas, the bench\'s reads subtracted)');
  const apiRows: (string | number)[][] = [];
  if (d.floor) apiRows.push(verbRow('floor: all clients', d.floor.allClientsByVerb, 1));
  apiRows.push(verbRow('operator run: all clients', o.allClientsByVerb, 1), verbRow('operator (probe)', o.operatorByVerb, 1));
  out.push(table(['source', ...VERBS, 'other', 'total', 'writes'], apiRows));
  const top = Object.entries(o.operatorByResource).sort((a, b) => b[1] - a[1]).slice(0, 8).map(([k, v]) => `${k} ${v}`).join(', ');
  out.push(`operator requests by resource: ${top || 'none'}`);

  h('Targets (reported, never asserted)');
  out.push(table(['target', 'result'], rep.targets.map((t) => [t.target, t.results.map((x) => `${x.verdict} ${x.value}`).join(', ')])));
}

/** CPU by component per app (ms) in each window, and how busy the machine was. */
function cpuTable(rep: Report, windows: [label: string, cpu: CpuSnapshot, seconds: number][], apps: number): string {
  const comps = ['apiserver', 'etcd', 'controller-manager', 'scheduler', 'kwok', 'temporal', 'operator', 'bench', 'others'];
  return table(['window', ...comps, 'window s', 'machine busy'], windows.map(([label, c, seconds]) =>
    [label, ...comps.map((k) => ((c[k] ?? 0) * 1000) / apps), seconds, `${(((c['machine'] ?? 0) / (seconds * Number(rep.machine['cores']))) * 100).toFixed(0)}%`]));
}

/** The rollouts scenario's tables, after the setup lines. */
function rolloutsTables(rep: Report, r: RolloutsResult, out: string[]): void {
  const h = (t: string) => out.push('', `== ${t}`);
  const p = r.plan;
  h(`Rollouts, N = ${r.apps}: ${convergedLine(rep)}`);
  const rows: [string, number[] | Distribution | null, number][] = [
    [`spec change -> weight ${p.firstWeight}`, r.toFirstWeightMs, r.apps],
    [`pause late: weight ${p.secondWeight} - (weight ${p.firstWeight} + ${p.pauseMs / 1000} s)`, r.pauseLatenessMs, r.apps],
    ['pause late: against status.canary.pauseEndsAt', r.pauseLatenessFromEndMs, r.apps],
    ['promote request -> 100% stable', r.promoteMs, r.apps],
    ...(r.floor ? [['  floor: the same promotes\' writes made directly, no operator', r.floor.promoteMs, r.floor.apps] as [string, number[], number]] : []),
    ['promote accepted -> 100% stable', r.promoteFromAcceptedMs, r.apps],
    ['promote request -> update accepted', r.promoteUpdateMs, r.apps],
    ['promote request -> phase Promoted', r.promotedMs, r.apps],
    ['timer fired late (server)', r.timers?.fired ?? null, r.timers?.timers ?? 0],
    ['timer seen late (next workflow task)', r.timers?.seen ?? null, r.timers?.timers ?? 0],
  ];
  out.push(table(['measure (s)', 'sample', 'p50', 'p95', 'p99', 'max'], rows.map(([name, v, of]) => {
    const d = Array.isArray(v) ? distribution(v) : v;
    return [name, `${d?.count ?? 0}/${of}`, d ? d.p50 / 1000 : '-', d ? d.p95 / 1000 : '-', d ? d.p99 / 1000 : '-', d ? d.max / 1000 : '-'];
  })));
  out.push(`the ${r.apps} patches took ${r.startSeconds.toFixed(1)} s; every app at its approval ${r.toApprovalSeconds.toFixed(1)} s after the first; the promotes until every app Promoted ${r.promoteSeconds.toFixed(1)} s; gates every ${p.gateIntervalMs / 1000} s`);
  out.push(table(['window', 'load avg (max)', 'others\' CPU'], [['rollouts (patches -> all at the approval)', ...loadCells(r.load.rollout)], ['promotes (-> all Promoted)', ...loadCells(r.load.promote)]]));
  out.push(`load avg = the 1-minute load average sampled every 2 s during the window (mean, and max); others' CPU = the share of the machine's ${String(rep.machine['cores'])} cores used by processes this benchmark does not measure`);
  if (r.floor) {
    const f = r.floor;
    out.push(`floor (namespace ${f.namespace}, before the operator's run): ${f.apps} Applications with their children as at the approval set up in ${f.setupSeconds.toFixed(1)} s; all promoted at once (per app: spec.image patched, stable Deployment applied, its rollout awaited on a watch, VirtualService applied at 100% stable) in ${f.promoteSeconds.toFixed(1)} s${f.errors.length ? `; ${f.errors.length} errors, the first: ${f.errors[0]}` : ''}`);
    out.push(table(['window', 'load avg (max)', 'others\' CPU'], [['floor promotes', ...loadCells(f.load)]]));
  }
  out.push(`operator RSS: ${mb(r.memory.rssAtStartMB)} before the rollouts, ${mb(r.memory.rssAtEndMB)} after; peak (VmHWM, the process's whole life) ${mb(r.memory.peakRssMB)}`);
  if (r.cpu) {
    h('CPU by component, ms per rollout (from /proc; "others" = the rest of the machine: other people\'s work on a shared machine)');
    out.push(cpuTable(rep, [['rollouts', r.cpu.rollout, r.toApprovalSeconds], ['promotes', r.cpu.promote, r.promoteSeconds], ...(r.floor ? [['floor promotes', r.floor.cpu, r.floor.promoteSeconds] as [string, CpuSnapshot, number]] : [])], r.apps));
  }

  h('API requests from the first patch to the last Promoted (totals, and per app)');
  out.push(table(['source', ...VERBS, 'other', 'total', 'writes'], [
    verbRow('operator (probe)', r.operatorByVerb, 1), verbRow('  per app', r.operatorByVerb, r.apps),
    verbRow('all clients', r.allClientsByVerb, 1), verbRow('  per app', r.allClientsByVerb, r.apps),
  ]));
  const top = Object.entries(r.operatorByResource).sort((a, b) => b[1] - a[1]).slice(0, 8).map(([k, v]) => `${k} ${v}`).join(', ');
  out.push(`operator requests by resource: ${top || 'none'}`);

  h('Targets (reported, never asserted)');
  out.push(table(['target', 'result'], rep.targets.map((t) => [t.target, t.results.map((x) => `${x.verdict} ${x.value}`).join(', ')])));

  h('Diagnostics');
  const lg = r.log;
  out.push(`operator log ${lg.warnings} warnings, ${lg.errors} errors${Object.keys(lg.messages).length ? `: ${Object.entries(lg.messages).sort((a, b) => b[1] - a[1]).slice(0, 5).map(([k, v]) => `${v}x ${k}`).join('; ')}` : ''}`);
  if (r.timersError) out.push(`timers not read: ${r.timersError}`);
  for (const e of r.errors.slice(0, 5)) out.push(`error: ${e}`);
}

/** One run as a chart series. */
function series(r: RunResult, floor: FloorResult | null): Series {
  return { label: `N=${r.apps}, ${r.workers} worker${r.workers > 1 ? 's' : ''}`, latenciesMs: r.latenciesMs, makespanMs: r.makespanSeconds * 1000, ...(floor ? { floorMs: floor.makespanSeconds * 1000 } : {}) };
}

/**
 * Writes `<base>.json`, this result's chart and the chart of the latest run of every N in the results folder, and
 * lists them (and the log folder) in the report's files; returns a note about the charts, if any.
 */
export async function writeResults(rep: Report, base: string, logDir: string): Promise<string | undefined> {
  const dir = rep.options.out;
  if (rep.options.scenario !== 'convergence') {
    // The charts are of the convergence scenario's runs; another scenario's result is its JSON and the operator's log.
    rep.files.push(`${base}.json`, logDir);
    await writeFile(`${base}.json`, JSON.stringify(rep, null, 1));
    return undefined;
  }
  const chart = await writeChart(`${base}.svg`, latencyChartSvg(
    rep.runs.map((r) => series(r, rep.floor)),
    `Application convergence latency, N = ${rep.options.apps}`,
    `${String(rep.machine['cores'])} cores, ${String(rep.machine['memoryGiB'])} GiB; ${rep.startedAt}; ${rep.command}`,
  ));
  rep.files.push(`${base}.json`, ...chart.files, logDir);
  await writeFile(`${base}.json`, JSON.stringify(rep, null, 1));
  const aggregate = await aggregateChart(dir);
  const agg = await writeChart(join(dir, 'latency-by-n.svg'), latencyChartSvg(aggregate, 'Application convergence latency per N (latest run of each N and worker count)', `from ${relative(root, dir) || dir}/bench-*.json`));
  rep.files.push(...agg.files);
  await writeFile(`${base}.json`, JSON.stringify(rep, null, 1));
  return chart.note;
}

/** The latest result per (N, workers) found in the results folder: latency distribution per N. */
async function aggregateChart(dir: string): Promise<Series[]> {
  const latest = new Map<string, { at: string; s: Series }>();
  for (const f of (await readdir(dir)).filter((x) => /^bench-.*\.json$/.test(x))) {
    try {
      const rep = JSON.parse(await readFile(join(dir, f), 'utf8')) as Report;
      // A restart or delete scenario's run converged too, but the chart is of the convergence scenario's runs.
      if ((rep.options.scenario ?? 'convergence') !== 'convergence') continue;
      for (const r of rep.runs) {
        const key = `${r.apps}/${r.workers}`;
        const prev = latest.get(key);
        if (prev && prev.at > rep.startedAt) continue;
        latest.set(key, { at: rep.startedAt, s: series(r, rep.floor) });
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
