// What a rollout runs: fixed when it starts (a later spec change starts a new rollout instead), built from the
// Application by reconcile/canary-plan.ts.
import type { HeaderMatch } from '../../routing/route.ts';

/**
 * One step: set the canary's traffic weight; pause (ms; null until promoted: an approval); route requests matching
 * headers or a cookie to the canary (an empty match removes the route); or mirror a percentage of requests to it.
 */
export type PlanStep =
  | { kind: 'weight'; weight: number }
  | { kind: 'pause'; ms: number | null }
  | { kind: 'header'; match: HeaderMatch[] }
  | { kind: 'mirror'; percent: number };

/** One metric that judges the canary, its query already written out for this Application (as it is sent). */
export interface AnalysisMetric {
  name: string;
  query: string;
  /** The built-in template it came from, if any. */
  template?: string;
  range: { min?: number; max?: number };
  failureLimit: number;
  inconclusiveLimit: number;
  dryRun: boolean;
}

export interface AnalysisPlan {
  intervalMs: number;
  /** Overrides the operator's --prometheus-address. */
  prometheusAddress?: string;
  metrics: AnalysisMetric[];
}

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
  analysis?: AnalysisPlan;
  progressDeadlineMs: number;
}

/** A human description of a step, for the UI and status. */
export function describeStep(step: PlanStep | undefined, index: number, total: number): string {
  if (!step) return `all ${total} steps done`;
  const at = `step ${index + 1}/${total}`;
  if (step.kind === 'weight') return `${at}: set canary weight to ${step.weight}%`;
  if (step.kind === 'header') return step.match.length ? `${at}: route requests matching ${describeMatch(step.match)} to the canary` : `${at}: remove the header route`;
  if (step.kind === 'mirror') return step.percent ? `${at}: mirror ${step.percent}% of requests to the canary` : `${at}: stop mirroring`;
  if (step.ms === null) return `${at}: pause until promoted`;
  return `${at}: pause for ${step.ms < 1000 ? `${step.ms} ms` : `${Math.round(step.ms / 1000)} s`}`;
}

/** The conditions of a header route in words. */
export function describeMatch(match: HeaderMatch[]): string {
  return match.map((m) => {
    const op = m.exact !== undefined ? `= ${m.exact}` : m.prefix !== undefined ? `starting with ${m.prefix}` : `~ ${m.regex ?? ''}`;
    return m.cookie !== undefined ? `cookie ${m.cookie} ${op}` : `header ${m.header ?? ''} ${op}`;
  }).join(' and ');
}
