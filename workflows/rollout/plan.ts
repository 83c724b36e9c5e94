// What a rollout runs: fixed when it starts (a later spec change starts a new rollout instead), built from the
// Application by reconcile/canary-plan.ts.

/** One step: set the canary's traffic weight, or pause (ms; null until promoted or resumed). */
export type PlanStep = { kind: 'weight'; weight: number } | { kind: 'pause'; ms: number | null };

export interface HealthGates {
  minReadyReplicas: number;
  maxRestarts: number;
  intervalMs: number;
  failureThreshold: number;
  /** Start-up grace: failed checks count only once the canary has been ready, or this long after it was created. */
  initialDelayMs: number;
}

export interface RolloutPlan {
  /** Identity of the canary (`<version>|<image>`): a finished rollout of the same key is never restarted by itself. */
  key: string;
  version: string;
  image: string;
  /** The stable image when the rollout started, to restore if a promote fails half-way. */
  stableImage: string;
  steps: PlanStep[];
  gates: HealthGates;
  progressDeadlineMs: number;
}

/** A human description of a step, for the UI and status. */
export function describeStep(step: PlanStep | undefined, index: number, total: number): string {
  if (!step) return `all ${total} steps done`;
  const at = `step ${index + 1}/${total}`;
  if (step.kind === 'weight') return `${at}: set canary weight to ${step.weight}%`;
  if (step.ms === null) return `${at}: pause until promoted or resumed`;
  return `${at}: pause for ${step.ms < 1000 ? `${step.ms} ms` : `${Math.round(step.ms / 1000)} s`}`;
}
