// The rollout's decisions as pure functions (no Temporal APIs): the workflow gathers, these decide, the workflow
// acts. Unit-tested directly. The routing rule they apply lives in routing/route.ts, below the routers too.
import { Reason, RolloutPhase } from '../../api/constants.ts';
import type { CanaryHealth } from '../../activities/types.ts';
import type { ControlRequest, GateVerdict } from '../contract.ts';
import { noCanaryRoute, routable, type CanaryRoute } from '../../routing/route.ts';
import type { HealthGates } from './plan.ts';

/**
 * A health gate's verdict on the canary, with the reason shown in status and history. A failing verdict names what
 * keeps a canary pod from running (pod, container, the kubelet's reason and message): it becomes the rollback's
 * message, and the rollback deletes the pods that showed it.
 */
export function gateVerdict(health: CanaryHealth, gates: HealthGates): { ok: boolean; reason: string } {
  if (!health.exists) return { ok: false, reason: 'the canary Deployment does not exist' };
  const why = health.issue ? `: ${health.issue.message}` : '';
  if (health.restarts > gates.maxRestarts) {
    return { ok: false, reason: `canary containers restarted ${health.restarts} times (at most ${gates.maxRestarts} allowed)${why}` };
  }
  if (health.readyReplicas < gates.minReadyReplicas) {
    return { ok: false, reason: `${health.readyReplicas}/${health.desiredReplicas} canary replicas ready (at least ${gates.minReadyReplicas} required)${why}` };
  }
  return { ok: true, reason: `${health.readyReplicas}/${health.desiredReplicas} canary replicas ready, ${health.restarts} restarts` };
}

/**
 * The canary's route after a gate check: nothing while it has no ready replica; what the steps ask for once the
 * gate passes; otherwise unchanged (a failing gate does not move traffic up).
 */
export function routeAfterGate(current: CanaryRoute, target: CanaryRoute, health: CanaryHealth, ok: boolean): CanaryRoute {
  if (health.readyReplicas === 0) return noCanaryRoute;
  return ok ? routable(target, health.readyReplicas) : current;
}

/**
 * Whether a failed check counts toward failureThreshold: only once the canary has been ready, or once the
 * start-up grace since it was created has passed. Slow starters (a JVM, a cache warming) are not rolled back for
 * starting slowly; a canary that never gets ready still is, after the grace.
 */
export function failureCounts(s: { everReady: boolean; now: number; createdAt: number; initialDelayMs: number }): boolean {
  return s.everReady || s.now - s.createdAt >= s.initialDelayMs;
}

/** Why a rollout stops short of promotion: its end phase, a CamelCase reason, a message, and who asked. */
export interface Interruption {
  phase: typeof RolloutPhase.Aborted | typeof RolloutPhase.RolledBack;
  reason: string;
  message: string;
  by?: string;
}

/** The one place an abort, failed gates and the deadline are decided; null to go on. */
export function interruption(s: {
  abort: ControlRequest | undefined;
  /** A metric outside its range failureLimit times in a row. */
  analysisFailed?: { metric: string; times: number; message: string } | undefined;
  consecutiveFailures: number;
  lastGate: GateVerdict | undefined;
  gates: HealthGates;
  now: number;
  deadline: number;
  /** Time in a pause (a pause step or a user's) does not count against the deadline. */
  pausing: boolean;
  progressDeadlineMs: number;
  message: string;
}): Interruption | null {
  if (s.abort) return { phase: RolloutPhase.Aborted, reason: Reason.CanaryAborted, message: s.abort.reason ?? 'aborted', by: s.abort.by ?? 'unknown' };
  if (s.analysisFailed) {
    const f = s.analysisFailed;
    return { phase: RolloutPhase.RolledBack, reason: Reason.AnalysisFailed, message: `analysis failed: ${f.metric} ${f.times} times in a row: ${f.message}` };
  }
  if (s.consecutiveFailures >= s.gates.failureThreshold) {
    return {
      phase: RolloutPhase.RolledBack, reason: Reason.HealthGateFailed,
      message: `health gate failed ${s.consecutiveFailures} times in a row: ${s.lastGate?.reason ?? 'no verdict'}`,
    };
  }
  if (!s.pausing && s.now >= s.deadline) {
    return {
      phase: RolloutPhase.RolledBack, reason: Reason.ProgressDeadlineExceeded,
      message: `progress deadline of ${Math.round(s.progressDeadlineMs / 1000)} s exceeded (${s.message})`,
    };
  }
  return null;
}
