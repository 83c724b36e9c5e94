// The chaos run: a seeded random sequence of user operations over a small pool of Applications, interleaved with
// faults (operator SIGKILL, Temporal / kube-apiserver / etcd restarts), then quiet periods and invariant checks.
// It drives a real operator process against a real stack through the test harness (which reads the stack from
// the environment: KUBECONFIG, TEMPORAL_ADDRESS, WORKFLOW_BUNDLE_PATH), so the caller sets those up first.
import { setTimeout as sleep } from 'node:timers/promises';
import { control } from '../client/control.ts';
import { startServer, stopServer, unreadyImage, type ServerName, type StackInfo } from '../stack/stack.ts';
import { API_VERSION, KIND, LABEL_MANAGED_BY, MANAGED_BY } from '../api/constants.ts';
import { closeTemporal, kubeApi, temporalClient, type Json } from '../testkit/apps.ts';
import { recordRoutes } from '../testkit/routes.ts';
import { readRouteWeights } from '../render/istio.ts';
import { childKinds } from '../render/children.ts';
import { startOperator, type OperatorProcess } from '../testkit/operator.ts';
import { mulberry32, type Rng } from './prng.ts';

export const faultKinds = ['operator-kill', 'temporal-restart', 'apiserver-restart', 'etcd-restart'] as const;
export type FaultKind = (typeof faultKinds)[number];

export const opKinds = ['create', 'image', 'canary', 'promote', 'abort', 'delete', 'recreate', 'hand-edit', 'delete-child'] as const;
export type OpKind = (typeof opKinds)[number];

export interface ChaosOptions {
  seed: number;
  ops: number;
  /** Probability of a fault after each op (ignored when plannedFaults is given). */
  faultRate?: number;
  /** Faults injected at evenly spaced ops instead of at random (the CI form). */
  plannedFaults?: FaultKind[];
  /** Seconds of quiet after each batch before the invariants are checked. */
  quietSeconds?: number;
  /** Ops per batch. */
  batchSize?: number;
  /** How long the invariants may take to hold after the quiet period (and the convergence after a fault). */
  settleSeconds?: number;
  /** Number of application names in the pool. */
  poolSize?: number;
  stack: StackInfo;
  namespace: string;
  print?: (line: string) => void;
}

export interface FaultRecord {
  kind: FaultKind;
  afterOp: number;
  /** Seconds from the end of the fault (server back / operator restarted) until every invariant held; null if never within settleSeconds. */
  convergeSeconds: number | null;
  /** For slow convergence: what the last failing check still waited on. */
  lastWaitedOn?: string[];
}

export interface ChaosSummary {
  seed: number;
  ops: number;
  opsByKind: Record<string, number>;
  /** Ops the operator (correctly) refused, e.g. promote without a rollout. */
  opsRejected: number;
  faults: Record<FaultKind, number>;
  faultLog: FaultRecord[];
  violations: string[];
  routeVersionsSeen: number;
  routeVersionsUnjudged: number;
  durationSeconds: number;
  operatorLog: string;
  /** Every op and fault in order: what reproduces a violation together with the seed. */
  sequence: string[];
}

const TERMINAL = new Set(['Idle', 'Promoted', 'Aborted', 'RolledBack', 'Failed']);
const FIELD_MANAGER = 'chaos-user';
const GATES = { interval: '1s', failureThreshold: 3, initialDelay: '5s' };
const PROGRESS_DEADLINE_S = 90;

const appRef = (namespace: string, name: string) => ({ apiVersion: API_VERSION, kind: KIND, namespace, name });
const ISTIO = 'networking.istio.io/v1';

function withTimeout<T>(p: Promise<T>, ms: number, what: string): Promise<T> {
  return Promise.race([p, sleep(ms).then(() => { throw new Error(`${what} timed out after ${ms} ms`); })]);
}

const errText = (err: unknown) => (err instanceof Error ? err.message : String(err)).split('\n')[0]!.slice(0, 300);

interface CanarySnapshot {
  key: string;
  since: number;
}

/** Runs the whole chaos sequence on an existing stack and namespace, starting (and stopping) its own operator process. */
export async function runChaos(opts: ChaosOptions): Promise<ChaosSummary> {
  const print = opts.print ?? ((l: string) => console.log(l));
  const rng: Rng = mulberry32(opts.seed);
  const ns = opts.namespace;
  const quietMs = (opts.quietSeconds ?? 15) * 1000;
  const settleMs = (opts.settleSeconds ?? 150) * 1000;
  const batchSize = opts.batchSize ?? 10;
  const pool = Array.from({ length: opts.poolSize ?? 4 }, (_, i) => `chaos-${i}`);
  const t0 = Date.now();
  const kube = await kubeApi();

  const sequence: string[] = [];
  const log = (line: string) => {
    sequence.push(line);
    print(line);
  };
  const opsByKind: Record<string, number> = {};
  const faults = Object.fromEntries(faultKinds.map((k) => [k, 0])) as Record<FaultKind, number>;
  const faultLog: FaultRecord[] = [];
  const violations: string[] = [];
  let opsRejected = 0;

  // The model: which names should exist (only our own ops change that), and counters for fresh versions.
  const exists = new Map<string, boolean>(pool.map((n) => [n, false]));
  let versionCounter = 0;
  let imageCounter = 0;
  const canarySeen = new Map<string, CanarySnapshot>();

  // Planned faults go after evenly spaced ops.
  const planned = new Map<number, FaultKind>();
  if (opts.plannedFaults) {
    opts.plannedFaults.forEach((kind, i) => planned.set(Math.floor(((i + 1) * opts.ops) / (opts.plannedFaults!.length + 1)), kind));
  }

  const op: OperatorProcess = await startOperator({ namespaces: [ns], readyTimeoutMs: 120_000 });
  print(`operator started (task queue ${op.taskQueue}, log ${op.logFile})`);
  const routes = recordRoutes(ns);

  const baseSpec = (): Json => ({
    image: `nginx:1.${++imageCounter}`,
    replicas: rng.int(1, 2),
    serviceMesh: { enabled: true },
  });

  const canarySpec = (): { canary: Json; text: string } => {
    const version = `v${++versionCounter}`;
    const bad = rng.chance(0.15);
    const useSteps = rng.chance(0.6);
    const canary: Json = {
      enabled: true, canaryVersion: version, healthGates: GATES, progressDeadline: `${PROGRESS_DEADLINE_S}s`,
      image: bad ? unreadyImage : null, weight: null, steps: null,
    };
    if (useSteps) {
      const w1 = rng.int(5, 40);
      const w2 = rng.int(w1, 90);
      canary['steps'] = [{ setWeight: w1 }, { pause: { duration: `${rng.int(1, 5)}s` } }, { setWeight: w2 }, { pause: { duration: `${rng.int(1, 4)}s` } }];
      if (rng.chance(0.25)) (canary['steps'] as Json[]).push({ pause: {} });
    } else {
      canary['weight'] = rng.int(1, 60);
    }
    const text = `${version}${bad ? ' (unready image)' : ''} ${useSteps ? `steps ${JSON.stringify(canary['steps'])}` : `weight ${canary['weight']}`}`;
    return { canary, text };
  };

  const createApp = async (name: string) => {
    const spec = baseSpec();
    // A name deleted a moment ago may still be finalizing: an apply now would patch the dying object.
    if (exists.get(name) !== true && !(await waitGone(name, 90_000))) return 'the previous incarnation is still being deleted after 90 s (not created)';
    await kube.apply({ apiVersion: API_VERSION, kind: KIND, metadata: { name, namespace: ns }, spec } as Json as never, { fieldManager: FIELD_MANAGER, force: true });
    exists.set(name, true);
    return `image ${spec['image']} replicas ${spec['replicas']}`;
  };

  async function waitGone(name: string, timeoutMs: number): Promise<boolean> {
    const deadline = Date.now() + timeoutMs;
    while (Date.now() < deadline) {
      const app = await kube.get(appRef(ns, name)).catch(() => undefined);
      if (app === null) return true;
      await sleep(300);
    }
    return false;
  }

  /** Runs one op; returns its description (throws only on harness trouble). */
  const runOp = async (kind: OpKind, name: string): Promise<string> => {
    const present = exists.get(name) === true;
    switch (kind) {
      case 'create':
        return `create ${name}: ${await createApp(name)}`;
      case 'image': {
        const image = `nginx:1.${++imageCounter}`;
        await kube.mergePatch(appRef(ns, name), { spec: { image } });
        return `image ${name} -> ${image}`;
      }
      case 'canary': {
        const { canary, text } = canarySpec();
        await kube.mergePatch(appRef(ns, name), { spec: { serviceMesh: { enabled: true, canary } } });
        return `canary ${name} ${text}`;
      }
      case 'promote':
      case 'abort': {
        try {
          const client = await withTimeout(temporalClient(), 10_000, 'temporal connect');
          const r = await withTimeout(control(client, kind, ns, name, kind === 'abort' ? 'chaos abort' : undefined), 20_000, kind);
          return `${kind} ${name}: ${r.accepted ? `accepted (${r.state?.phase ?? '?'})` : r.note}`;
        } catch (err) {
          opsRejected++;
          return `${kind} ${name}: refused (${errText(err)})`;
        }
      }
      case 'delete':
        await kube.delete(appRef(ns, name));
        exists.set(name, false);
        return `delete ${name}${present ? '' : ' (absent)'}`;
      case 'recreate': {
        await kube.delete(appRef(ns, name));
        exists.set(name, false);
        const gone = await waitGone(name, 90_000);
        if (!gone) return `recreate ${name}: delete did not finish within 90 s (not recreated)`;
        return `recreate ${name}: ${await createApp(name)}`;
      }
      case 'hand-edit': {
        await kube.jsonPatch({ apiVersion: 'apps/v1', kind: 'Deployment', namespace: ns, name }, [
          { op: 'replace', path: '/spec/template/spec/containers/0/image', value: 'busybox:hand-edited' },
        ]);
        return `hand-edit ${name}: Deployment image -> busybox:hand-edited`;
      }
      case 'delete-child': {
        const child = rng.pick([
          { apiVersion: 'apps/v1', kind: 'Deployment' }, { apiVersion: 'v1', kind: 'Service' },
          { apiVersion: ISTIO, kind: 'VirtualService' }, { apiVersion: ISTIO, kind: 'DestinationRule' },
        ]);
        await kube.delete({ ...child, namespace: ns, name });
        return `delete-child ${name}: ${child.kind}`;
      }
    }
  };

  /** Picks the next op from the model (deterministic given the seed). */
  const nextOp = (): { kind: OpKind; name: string } => {
    const name = rng.pick(pool);
    if (exists.get(name) !== true) {
      // Mostly create what is missing; sometimes poke at an absent app (deletes and control calls must be harmless).
      return { kind: rng.chance(0.85) ? 'create' : rng.pick(['delete', 'promote', 'abort'] as const), name };
    }
    const kind = rng.weighted<OpKind>({
      create: 4, image: 14, canary: 22, promote: 12, abort: 8, delete: 8, recreate: 7, 'hand-edit': 10, 'delete-child': 10,
    });
    return { kind, name };
  };

  const injectFault = async (kind: FaultKind): Promise<void> => {
    const restart = async (server: ServerName, downMs: number) => {
      if (server === 'temporal') await closeTemporal();
      await stopServer(opts.stack, server, 'SIGKILL');
      await sleep(downMs);
      await startServer(opts.stack, server);
    };
    switch (kind) {
      case 'operator-kill':
        await op.stop('SIGKILL');
        await sleep(rng.int(0, 3000));
        await op.restart();
        break;
      case 'temporal-restart':
        await restart('temporal', rng.int(500, 3000));
        break;
      case 'apiserver-restart':
        await restart('kube-apiserver', rng.int(500, 3000));
        break;
      case 'etcd-restart':
        await restart('etcd', rng.int(500, 3000));
        break;
    }
  };

  /** Every invariant about the current state (routes are watched separately). Returns the violations now. */
  const check = async (final: boolean): Promise<string[]> => {
    const out: string[] = [];
    const now = Date.now();
    const apps = (await kube.list<Json>({ apiVersion: API_VERSION, kind: KIND, namespace: ns })).items;
    const byName = new Map(apps.map((a) => [a.metadata.name as string, a]));
    for (const name of pool) {
      const app = byName.get(name);
      const want = exists.get(name) === true;
      if (!want) {
        if (app) out.push(`${name}: deleted but the Application still exists (deletionTimestamp=${app.metadata.deletionTimestamp ?? '-'}, finalizers=${JSON.stringify(app.metadata.finalizers ?? [])})`);
        continue;
      }
      if (!app) {
        out.push(`${name}: Application missing`);
        continue;
      }
      const problems: string[] = [];
      const s = app.status ?? {};
      const canary = s.canary ?? {};
      const inRollout = canary.phase !== undefined && !TERMINAL.has(canary.phase);
      if (s.observedGeneration !== app.metadata.generation) problems.push(`observedGeneration ${s.observedGeneration} != generation ${app.metadata.generation}`);
      if (s.phase !== 'Running' && !(inRollout && canary.message)) {
        problems.push(`phase ${s.phase} (conditions ${JSON.stringify((s.conditions ?? []).map((c: Json) => `${c.type}=${c.status}:${c.reason}:${String(c.message).slice(0, 120)}`))})`);
      }
      const get = (apiVersion: string, kind: string, n = name) => kube.get<Json>({ apiVersion, kind, namespace: ns, name: n });
      const dep = await get('apps/v1', 'Deployment');
      const image = dep?.spec?.template?.spec?.containers?.[0]?.image;
      if (!dep) problems.push('Deployment missing');
      else if (image !== app.spec.image) problems.push(`Deployment image ${image} != spec.image ${app.spec.image}`);
      if (!(await get('v1', 'Service'))) problems.push('Service missing');
      if (app.spec.serviceMesh?.enabled) {
        const vs = await get(ISTIO, 'VirtualService');
        if (!vs) problems.push('VirtualService missing');
        if (!(await get(ISTIO, 'DestinationRule'))) problems.push('DestinationRule missing');
        if (vs && !inRollout) {
          const w = readRouteWeights(vs);
          if (w?.stable !== 100) problems.push(`no rollout in flight but VirtualService weights ${JSON.stringify(w)}`);
        }
      }
      const wanted = app.spec.serviceMesh?.canary;
      if (wanted?.enabled && wanted.canaryVersion !== canary.version) problems.push(`canary ${wanted.canaryVersion} enabled in spec but status.canary is ${canary.version ?? '-'} ${canary.phase ?? '-'}: rollout not started`);
      if (!inRollout && (await get('apps/v1', 'Deployment', `${name}-canary`))) problems.push(`no rollout in flight (canary phase ${canary.phase ?? '-'}) but ${name}-canary exists`);
      if (inRollout) {
        if (!canary.message) problems.push(`rollout ${canary.phase} without a status message`);
        const key = JSON.stringify([canary.version, canary.phase, canary.step, canary.weight, canary.message]);
        const prev = canarySeen.get(name);
        if (!prev || prev.key !== key) canarySeen.set(name, { key, since: now });
        const stuckFor = now - (prev && prev.key === key ? prev.since : now);
        const pauseEnds = canary.pauseEndsAt ? Date.parse(canary.pauseEndsAt) : NaN;
        if (canary.phase === 'Paused' && Number.isFinite(pauseEnds) && now - pauseEnds > 30_000) {
          problems.push(`rollout paused past its pause end ${canary.pauseEndsAt} by ${Math.round((now - pauseEnds) / 1000)} s`);
        } else if (canary.phase !== 'Paused' && stuckFor > (PROGRESS_DEADLINE_S + 30) * 1000) {
          problems.push(`rollout ${canary.phase} unchanged for ${Math.round(stuckFor / 1000)} s (deadline ${PROGRESS_DEADLINE_S} s): ${canary.message}`);
        }
      } else {
        canarySeen.delete(name);
      }
      if (app.metadata.deletionTimestamp) problems.push('being deleted although nobody deleted it');
      if (problems.length) out.push(`${name}: ${problems.join('; ')}`);
    }

    // Orphans: managed children whose owner Application is gone (or is another incarnation).
    const uids = new Map(apps.map((a) => [a.metadata.name as string, a.metadata.uid as string]));
    const selector = `${LABEL_MANAGED_BY}=${MANAGED_BY}`;
    for (const k of childKinds) {
      for (const child of (await kube.list<Json>({ apiVersion: k.apiVersion, kind: k.kind, namespace: ns }, selector)).items) {
        if (child.metadata.deletionTimestamp) continue;
        const owner = (child.metadata.ownerReferences ?? []).find((r: Json) => r.kind === KIND);
        if (!owner) out.push(`orphan ${k.kind} ${child.metadata.name}: no owner reference`);
        else if (uids.get(owner.name) !== owner.uid) out.push(`orphan ${k.kind} ${child.metadata.name}: owner ${owner.name} (uid ${owner.uid}) is gone`);
      }
    }

    // Workflows of deleted Applications.
    const client = await withTimeout(temporalClient(), 10_000, 'temporal connect');
    const running = client.workflow.list({ query: `TaskQueue = '${op.taskQueue}' AND ExecutionStatus = 'Running'` });
    for await (const wf of running) {
      const m = /^application\/([^/]+)\/([^/]+)(\/canary)?$/.exec(wf.workflowId);
      if (!m) continue;
      const name = m[2]!;
      if (!byName.has(name) && exists.get(name) !== true) out.push(`workflow ${wf.workflowId} still running for a deleted Application`);
    }

    if (op.pid() === undefined) out.push('the operator process exited by itself');
    else if (final && !(await op.isReady())) out.push('operator /readyz is not OK');
    return out;
  };

  /** Polls the invariants until they hold or the time is up; returns the seconds it took (null) and the last violations. */
  const settle = async (timeoutMs: number): Promise<{ seconds: number | null; last: string[]; waitedOn: string[] }> => {
    const start = Date.now();
    let last: string[];
    let waitedOn: string[] = [];
    for (;;) {
      try {
        last = await check(false);
      } catch (err) {
        last = [`invariant check failed: ${errText(err)}`];
      }
      if (last.length === 0) return { seconds: (Date.now() - start) / 1000, last, waitedOn };
      waitedOn = last;
      if (Date.now() - start > timeoutMs) return { seconds: null, last, waitedOn };
      await sleep(1000);
    }
  };

  let summary: ChaosSummary | undefined;
  try {
    for (let i = 1; i <= opts.ops; i++) {
      const { kind, name } = nextOp();
      opsByKind[kind] = (opsByKind[kind] ?? 0) + 1;
      let text: string;
      try {
        text = await runOp(kind, name);
      } catch (err) {
        // Most of these are expected refusals (e.g. patching an app that is still being deleted).
        text = `${kind} ${name}: error ${errText(err)}`;
        opsRejected++;
      }
      log(`#${i} ${text}`);
      await sleep(rng.int(0, 1500));

      const fault = opts.plannedFaults ? planned.get(i) : (rng.chance(opts.faultRate ?? 0.15) ? rng.pick(faultKinds) : undefined);
      if (fault) {
        const f0 = Date.now();
        await injectFault(fault);
        faults[fault]++;
        const { seconds, last, waitedOn } = await settle(settleMs);
        faultLog.push({ kind: fault, afterOp: i, convergeSeconds: seconds, ...(seconds !== null && seconds > 20 ? { lastWaitedOn: waitedOn } : {}) });
        log(`#${i} FAULT ${fault} (${((Date.now() - f0) / 1000 - (seconds ?? settleMs / 1000)).toFixed(1)} s to inject): ${seconds === null ? `not converged within ${settleMs / 1000} s: ${last.join(' | ')}` : `converged in ${seconds.toFixed(1)} s${seconds > 20 ? ` (last outstanding: ${waitedOn.join(' | ')})` : ''}`}`);
      }

      if (i % batchSize === 0 || i === opts.ops) {
        print(`-- batch ends after op #${i}: ${quietMs / 1000} s quiet, then invariants`);
        await sleep(quietMs);
        const { seconds, last } = await settle(settleMs);
        if (seconds === null) {
          for (const v of last) violations.push(`after op #${i}: ${v}`);
          log(`#${i} CHECK: ${last.length} violation(s): ${last.join(' | ')}`);
        } else {
          log(`#${i} CHECK: all invariants hold (after ${(quietMs / 1000 + seconds).toFixed(1)} s)`);
        }
      }
    }
    const final = await check(true).catch((err: unknown) => [`final check failed: ${errText(err)}`]);
    for (const v of final) if (!violations.some((x) => x.endsWith(v))) violations.push(`final: ${v}`);
  } finally {
    const r = await routes.stop();
    violations.push(...r.violations);
    await op.stop();
    await closeTemporal();
    print(`routes: ${r.seen} VirtualService versions seen, ${r.unjudged} unjudged`);
    summary = {
      seed: opts.seed, ops: opts.ops, opsByKind, opsRejected, faults, faultLog, violations,
      routeVersionsSeen: r.seen, routeVersionsUnjudged: r.unjudged,
      durationSeconds: (Date.now() - t0) / 1000, operatorLog: op.logFile, sequence,
    };
  }
  return summary;
}
