// The rollout's decisions as pure functions (no Temporal APIs): the workflow gathers, these decide, the workflow
// acts. Unit-tested directly; the canary activities use the routing rule too.
import { RolloutPhase } from '../../api/constants.ts';
import type { CanaryHealth } from '../../activities/types.ts';
import type { ControlRequest, GateVerdict } from '../contract.ts';
import type { HealthGates } from './plan.ts';

/** A health gate's verdict on the canary, with the reason shown in status and history. */
export function gateVerdict(health: CanaryHealth, gates: HealthGates): { ok: boolean; reason: string } {
  if (!health.exists) return { ok: false, reason: 'the canary Deployment does not exist' };
  if (health.restarts > gates.maxRestarts) {
    return { ok: false, reason: `canary containers restarted ${health.restarts} times (at most ${gates.maxRestarts} allowed)` };
  }
  if (health.readyReplicas < gates.minReadyReplicas) {
    return { ok: false, reason: `${health.readyReplicas}/${health.desiredReplicas} canary replicas ready (at least ${gates.minReadyReplicas} required)` };
  }
  return { ok: true, reason: `${health.readyReplicas}/${health.desiredReplicas} canary replicas ready, ${health.restarts} restarts` };
}

/** The rule every traffic change obeys: never route to a canary without a ready replica. */
export function routableWeight(weight: number, readyReplicas: number): number {
  return readyReplicas > 0 ? weight : 0;
}

/**
 * The canary's weight after a gate check: none while it has no ready replica; the step's target once the gate
 * passes; otherwise unchanged (a failing gate does not move traffic up).
 */
export function weightAfterGate(current: number, target: number, health: CanaryHealth, ok: boolean): number {
  if (health.readyReplicas === 0) return 0;
  return ok ? routableWeight(target, health.readyReplicas) : current;
}

/** Why a rollout must stop short of promotion, or null: the one place abort, gate failures and the deadline are decided. */
export interface Interruption {
  phase: typeof RolloutPhase.Aborted | typeof RolloutPhase.RolledBack;
  reason: string;
  by?: string;
}

export function interruption(s: {
  abort: ControlRequest | undefined;
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
  if (s.abort) return { phase: RolloutPhase.Aborted, reason: s.abort.reason ?? 'aborted', by: s.abort.by ?? 'unknown' };
  if (s.consecutiveFailures >= s.gates.failureThreshold) {
    return { phase: RolloutPhase.RolledBack, reason: `health gate failed ${s.consecutiveFailures} times in a row: ${s.lastGate?.reason ?? 'no verdict'}` };
  }
  if (!s.pausing && s.now >= s.deadline) {
    return { phase: RolloutPhase.RolledBack, reason: `progress deadline of ${Math.round(s.progressDeadlineMs / 1000)} s exceeded (${s.message})` };
  }
  return null;
}
