// Pure decisions of a canary rollout (no Temporal APIs), so they are unit-tested directly.
import type { CanaryHealth, HealthGates, PlanStep } from './messages.ts';

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

/** The weight it is safe to route to the canary: none while it has no ready replica. */
export function safeWeight(target: number, health: CanaryHealth): number {
  return health.readyReplicas > 0 ? target : 0;
}

/** Terminal phases: the rollout is over and its key is not restarted by itself. */
export function isTerminal(phase: string | undefined): boolean {
  return phase === 'Promoted' || phase === 'Aborted' || phase === 'RolledBack' || phase === 'Failed';
}

/** A human description of a step, for the UI and status. */
export function describeStep(step: PlanStep | undefined, index: number, total: number): string {
  if (!step) return `all ${total} steps done`;
  const at = `step ${index + 1}/${total}`;
  if (step.kind === 'weight') return `${at}: set canary weight to ${step.weight}%`;
  if (step.ms === null) return `${at}: pause until promoted or resumed`;
  return `${at}: pause for ${step.ms < 1000 ? `${step.ms} ms` : `${Math.round(step.ms / 1000)} s`}`;
}

/** The weight the canary should have once the first `done` steps have run. */
export function weightAfter(steps: PlanStep[], done: number): number {
  let w = 0;
  for (const s of steps.slice(0, done)) if (s.kind === 'weight') w = s.weight;
  return w;
}
