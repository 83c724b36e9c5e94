// The latency scenario: one operator process (production defaults) on an otherwise idle operator, timing what one
// user waits for with one Application at a time: create -> Running, spec change -> applied, and promote. Each wait
// polls that one object (and its children) every POLL_MS, never a list.
import { randomBytes } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import { API_VERSION, KIND, childName } from '../api/constants.ts';
import type { KubeObject } from '../kube/client.ts';
import { StopPolling, eventually } from '../lib/poll.ts';
import { kinds } from '../render/children.ts';
import { appManifest } from '../testkit/apps.ts';
import { appNames, createNamespace } from './apps.ts';
import type { Ctx } from './context.ts';
import type { LoadSummary } from './load.ts';
import { Operators, counterBy, histogramMeans } from './operators.ts';
import { promoteSample, type PromoteResult } from './promote.ts';
import { sourceHash } from './source.ts';
import { distribution, phase, progress, retrying, type Distribution } from './util.ts';

/** How often the one object being waited for is read. */
export const POLL_MS = 50;
/**
 * Pause between two samples, longer than the watcher's default --coalesce-ms (300): the previous app's trailing
 * coalesced signal has gone out, so each sample starts on an idle operator.
 */
export const GAP_MS = 500;

const IMAGE = 'nginx:1.25';
const NEW_IMAGE = 'nginx:1.27';
/** Histograms of the operator's /metrics whose means per part help explain the latency. */
const HISTOGRAMS = /schedule_to_start|execution_latency|reconciliation_duration|request_latency/;

export interface LatencyPart {
  /** Samples attempted. */
  sample: number;
  /** Per completed sample, in the order they ran (ms). */
  latenciesMs: number[];
  latency: Distribution | null;
  /** Samples that did not complete (timed out or failed), with why. */
  errors: string[];
  /** Wall-clock seconds of the part. */
  seconds: number;
  /** The machine's load over the part. */
  load: LoadSummary;
  /** ms from the start of each completed sample until a poll first saw each milestone (same order as latenciesMs). */
  milestones: Record<string, number[]>;
  /** The operator's histogram means (sum/count deltas) over the part. */
  histograms: Record<string, { count: number; mean: number }>;
}

export interface LatencyResult {
  namespace: string;
  taskQueue: string;
  operatorFlags: string[];
  /** Fingerprint of the operator's sources when its process started. */
  sourceHash: string;
  pollMs: number;
  gapMs: number;
  /** 1. create answered -> status.phase Running at the current generation, Deployment and Service present. */
  create: LatencyPart;
  /** 2. merge patch of spec.image answered -> Deployment pod template has the image and status.observedGeneration is the new generation. */
  update: LatencyPart;
  /** 3. promote update accepted -> VirtualService at 100% stable (bench/promote.ts), or null with --promote-sample 0. */
  promote: (LatencyPart & { detail: PromoteResult }) | null;
  memory: { readyRssMB: number; peakRssMB: number };
  diagnostics: {
    signals: Record<string, number>;
    log: { warnings: number; errors: number; messages: Record<string, number> };
  };
}

/** The histogram means between two scrapes (sums and counts differenced). */
export function histogramDelta(after: Record<string, { count: number; mean: number }>, before: Record<string, { count: number; mean: number }>): Record<string, { count: number; mean: number }> {
  const out: Record<string, { count: number; mean: number }> = {};
  for (const [k, a] of Object.entries(after)) {
    const b = before[k] ?? { count: 0, mean: 0 };
    const count = a.count - b.count;
    if (count <= 0) continue;
    out[k] = { count, mean: (a.count * a.mean - b.count * b.mean) / count };
  }
  return out;
}

/**
 * Reads `fn` every `intervalMs` (from the start of one read to the next) until it returns a value; the operator
 * dying ends it at once (checked every 20 reads).
 */
function pollEvery<T>(what: string, intervalMs: number, timeoutMs: number, ops: Operators, fn: () => Promise<T | undefined>): Promise<T> {
  let polls = 0;
  return eventually(what, async () => {
    if (++polls % 20 === 0) await ops.assertAlive();
    return fn();
  }, { timeoutMs, intervalMs, paced: true });
}

/** Runs samples one at a time, collecting latencies, milestones and errors into a part. */
async function sequentially(ctx: Ctx, ops: Operators, label: string, names: string[], one: (name: string) => Promise<{ ms: number; milestones: Record<string, number> }>): Promise<LatencyPart> {
  const t0 = Date.now();
  const h0 = histogramMeans(await ops.metrics(), HISTOGRAMS);
  const part: Omit<LatencyPart, 'latency' | 'seconds' | 'load' | 'histograms'> = { sample: names.length, latenciesMs: [], errors: [], milestones: {} };
  let lastReport = Date.now();
  for (const [i, name] of names.entries()) {
    try {
      const r = await one(name);
      part.latenciesMs.push(r.ms);
      for (const [k, v] of Object.entries(r.milestones)) (part.milestones[k] ??= []).push(v);
    } catch (err) {
      if (err instanceof StopPolling) throw err;
      part.errors.push(`${name}: ${(err as Error).message}`);
      progress(`  ${name}: ${(err as Error).message}`);
    }
    if (Date.now() - lastReport > 5000 || i === names.length - 1) {
      lastReport = Date.now();
      const d = distribution(part.latenciesMs);
      progress(`  ${label}: ${i + 1}/${names.length} done${d ? `, p50 ${(d.p50 / 1000).toFixed(2)} s, max ${(d.max / 1000).toFixed(2)} s` : ''}${part.errors.length ? `, ${part.errors.length} failed` : ''}`);
    }
    await sleep(GAP_MS);
  }
  const t1 = Date.now();
  const h1 = histogramMeans(await ops.metrics(), HISTOGRAMS);
  return { ...part, latency: distribution(part.latenciesMs), seconds: (t1 - t0) / 1000, load: ctx.load.summary(t0, t1), histograms: histogramDelta(h1, h0) };
}

const available = (d: any): boolean => !!d?.status && d.status.observedGeneration === d.metadata.generation && (d.status.availableReplicas ?? 0) >= (d.spec?.replicas ?? 1);

/** The latency scenario: one operator process in a fresh namespace, the three parts in turn. */
export async function runLatency(ctx: Ctx): Promise<LatencyResult> {
  const { opts, kube, api } = ctx;
  const id = randomBytes(3).toString('hex');
  const ns = `bench-lat-${id}`;
  const taskQueue = `bench-${id}`;
  const timeoutMs = opts.timeoutSeconds * 1000;
  await createNamespace(ctx, ns, { operator: true });
  const ops = new Operators();
  ctx.cleanups.push(() => ops.stop());
  const appRef = (name: string) => ({ apiVersion: API_VERSION, kind: KIND, namespace: ns, name });
  const childRef = (k: { apiVersion: string; kind: string }, name: string) => ({ apiVersion: k.apiVersion, kind: k.kind, namespace: ns, name: childName({ metadata: { name } }) });
  try {
    const runSource = await sourceHash();
    if (runSource !== ctx.bundleSource) progress(`  WARNING: the operator's sources changed since the workflow bundle was built (${ctx.bundleSource} -> ${runSource})`);
    await phase(`latency: start 1 operator process on task queue ${taskQueue}, watching ${ns}`, () => ops.start({
      namespace: ns, taskQueue, workers: 1, logDir: ctx.logDir, extraArgs: opts.operatorArgs, extraEnv: opts.operatorEnv,
    }));
    for (const p of ops.procs) progress(`  process ${p.index} (--mode ${p.mode}) pid ${p.pid}, log ${p.process.logFile}`);
    ctx.operatorPids.splice(0, ctx.operatorPids.length, ...ops.procs.map((p): [string, number] => ['operator', p.pid]));
    const names = appNames(opts.latencySample);

    const create = await phase(`latency 1/3: create ${names.length} Applications one at a time, each until Running (poll every ${POLL_MS} ms)`, () => sequentially(ctx, ops, 'create -> Running', names, async (name) => {
      await retrying(`create Application ${ns}/${name}`, async () => {
        api.count('POST');
        try {
          await kube.create(appManifest(ns, name, { image: IMAGE, replicas: 1 }) as KubeObject);
        } catch (err) {
          if ((err as { status?: number }).status !== 409) throw err;
        }
      });
      const answered = Date.now();
      const seen: Record<string, number> = {};
      const mark = (k: string, at: number) => {
        seen[k] ??= at - answered;
      };
      const done = await pollEvery(`${name} Running with its Deployment and Service`, POLL_MS, timeoutMs, ops, async () => {
        const [app, dep, svc] = await Promise.all([kube.get<any>(appRef(name)), kube.get<any>(childRef(kinds.deployment, name)), kube.get<any>(childRef(kinds.service, name))]);
        const at = Date.now();
        if (app?.status?.phase) mark('first status', at);
        if (dep) mark('Deployment created', at);
        if (svc) mark('Service created', at);
        if (available(dep)) mark('Deployment available', at);
        const running = app?.status?.phase === 'Running' && app.status.observedGeneration === app.metadata.generation;
        if (running) mark('status Running', at);
        return running && dep && svc ? at : undefined;
      });
      return { ms: done - answered, milestones: seen };
    }));

    const update = await phase(`latency 2/3: change spec.image of the ${names.length} apps one at a time, each until applied`, () => sequentially(ctx, ops, 'spec change -> applied', names, async (name) => {
      const patched = await retrying(`patch ${ns}/${name}`, () => kube.mergePatch<any>(appRef(name), { spec: { image: NEW_IMAGE } }));
      api.count('PATCH');
      const answered = Date.now();
      const generation = patched?.metadata?.generation as number | undefined;
      if (generation === undefined) throw new Error('the patch answered without metadata.generation');
      const seen: Record<string, number> = {};
      const mark = (k: string, at: number) => {
        seen[k] ??= at - answered;
      };
      const done = await pollEvery(`${name} image ${NEW_IMAGE} applied at generation ${generation}`, POLL_MS, timeoutMs, ops, async () => {
        const [app, dep] = await Promise.all([kube.get<any>(appRef(name)), kube.get<any>(childRef(kinds.deployment, name))]);
        const at = Date.now();
        const image = (dep?.spec?.template?.spec?.containers ?? []).some((c: { image?: string }) => c.image === NEW_IMAGE);
        const observed = app?.status?.observedGeneration === generation;
        if (image) mark('Deployment image', at);
        if (observed) mark('observedGeneration', at);
        if (observed && app.status.phase === 'Running') mark('status Running', at);
        return image && observed ? at : undefined;
      });
      return { ms: done - answered, milestones: seen };
    }));

    let promote: LatencyResult['promote'] = null;
    if (opts.promoteSample > 0) {
      const t0 = Date.now();
      const h0 = histogramMeans(await ops.metrics(), HISTOGRAMS);
      const detail = await phase(`latency 3/3: promote ${opts.promoteSample} canaries one at a time`, () => promoteSample(ctx, ns, opts.promoteSample, ops));
      const t1 = Date.now();
      promote = {
        detail, sample: detail.sample, latenciesMs: detail.latenciesMs, latency: distribution(detail.latenciesMs), errors: detail.errors,
        seconds: (t1 - t0) / 1000, load: ctx.load.summary(t0, t1),
        milestones: { 'canary phase Promoted': detail.promotedMs },
        histograms: histogramDelta(histogramMeans(await ops.metrics(), HISTOGRAMS), h0),
      };
    }

    const metrics = await ops.metrics();
    const log = await ops.logSummary();
    await ops.stop();
    const p = ops.procs[0];
    return {
      namespace: ns, taskQueue, operatorFlags: p?.process.args ?? [], sourceHash: runSource, pollMs: POLL_MS, gapMs: GAP_MS,
      create, update, promote,
      memory: { readyRssMB: (p?.readyRss ?? 0) / 2 ** 20, peakRssMB: (p?.peakRss ?? 0) / 2 ** 20 },
      diagnostics: { signals: counterBy(metrics, 'application_operator_watch_signals_total', 'reason'), log },
    };
  } finally {
    await ops.stop();
    ctx.operatorPids.splice(0);
  }
}
