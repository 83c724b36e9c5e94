// The chaos run: a seeded random sequence of user operations over a small pool of Applications, interleaved with
// faults (operator SIGKILL, Temporal / kube-apiserver / etcd restarts), then quiet periods and invariant checks.
// This file wires the pieces: operations.ts (the model and the ops), faults.ts, invariants.ts (gather a snapshot,
// then decide). It drives a real operator process against a real stack through the testkit (which reads the stack
// from the environment: KUBECONFIG, TEMPORAL_ADDRESS, WORKFLOW_BUNDLE_PATH), so the caller sets those up first.
import { setTimeout as sleep } from 'node:timers/promises';
import type { StackInfo } from '../stack/stack.ts';
import { closeTemporal, kubeApi } from '../testkit/apps.ts';
import { startOperator } from '../testkit/operator.ts';
import { recordRoutes } from '../testkit/routes.ts';
import { faultKinds, faultSchedule, injectFault, type FaultKind } from './faults.ts';
import { checkInvariants, gatherSnapshot, type RolloutMemory } from './invariants.ts';
import { newModel, nextOp, runOp } from './operations.ts';
import { mulberry32 } from './prng.ts';
import { errText } from './util.ts';

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

/** Runs the whole chaos sequence on an existing stack and namespace, starting (and stopping) its own operator process. */
export async function runChaos(opts: ChaosOptions): Promise<ChaosSummary> {
  const print = opts.print ?? ((l: string) => console.log(l));
  const rng = mulberry32(opts.seed);
  const ns = opts.namespace;
  const quietMs = (opts.quietSeconds ?? 15) * 1000;
  const settleMs = (opts.settleSeconds ?? 150) * 1000;
  const batchSize = opts.batchSize ?? 10;
  const t0 = Date.now();
  const kube = await kubeApi();
  const model = newModel(opts.poolSize ?? 4);
  const faultAfter = faultSchedule({ ops: opts.ops, plannedFaults: opts.plannedFaults, faultRate: opts.faultRate ?? 0.15 }, rng);

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

  const operator = await startOperator({ namespaces: [ns], readyTimeoutMs: 120_000 });
  print(`operator started (task queue ${operator.taskQueue}, log ${operator.logFile})`);
  const routes = recordRoutes(ns);

  let memory: RolloutMemory = new Map();
  /** Every invariant about the current state (routes are watched separately). Returns the violations now. */
  const check = async (final: boolean): Promise<string[]> => {
    const snapshot = await gatherSnapshot({ kube, namespace: ns, operator, final });
    const verdict = checkInvariants(snapshot, model, Date.now(), memory);
    memory = verdict.memory;
    return verdict.violations;
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
      const { kind, name } = nextOp(model, rng);
      opsByKind[kind] = (opsByKind[kind] ?? 0) + 1;
      let text: string;
      try {
        const r = await runOp({ kube, namespace: ns, rng, model }, kind, name);
        text = r.text;
        if (r.refused) opsRejected++;
      } catch (err) {
        // Most of these are expected refusals (e.g. patching an app that is still being deleted).
        text = `${kind} ${name}: error ${errText(err)}`;
        opsRejected++;
      }
      log(`#${i} ${text}`);
      await sleep(rng.int(0, 1500));

      const fault = faultAfter(i);
      if (fault) {
        const f0 = Date.now();
        await injectFault(fault, { stack: opts.stack, operator, rng });
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
    await operator.stop();
    await closeTemporal();
    print(`routes: ${r.seen} VirtualService versions seen, ${r.unjudged} unjudged`);
    summary = {
      seed: opts.seed, ops: opts.ops, opsByKind, opsRejected, faults, faultLog, violations,
      routeVersionsSeen: r.seen, routeVersionsUnjudged: r.unjudged,
      durationSeconds: (Date.now() - t0) / 1000, operatorLog: operator.logFile, sequence,
    };
  }
  return summary;
}
