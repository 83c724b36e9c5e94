// What a rollout runs: fixed when it starts (a later spec change starts a new rollout instead), built from the
// Application by reconcile/canary-plan.ts.
import type { Check } from '../api/application.ts';
import type { PlanNotification } from './notify.ts';
import { DEFAULT_DRAIN_SECONDS, type RolloutRouterName, type StrategyName } from '../api/constants.ts';
import type { HeaderMatch } from '../routing/route.ts';
import { formatDuration } from '../lib/duration.ts';
import { fingerprint } from '../lib/json.ts';

/**
 * One step: set the canary's traffic weight; pause (ms; null until promoted: an approval); route requests matching
 * headers or a cookie to the canary (an empty match removes the route); mirror a percentage of requests to it;
 * judge it by the analysis for a while, whatever reaches it (a blue-green preview gets no user requests); or wait,
 * not paused, for a reason (a blue-green switch-back window).
 *
 * A pause with `approval` is passed by a promote and the rollout goes on (a blue-green switch); without it, a
 * promote ends the steps and promotes at once (a canary's).
 */
export type PlanStep =
  | { kind: 'weight'; weight: number; label?: string }
  | { kind: 'pause'; ms: number | null; approval?: string }
  | { kind: 'header'; match: HeaderMatch[] }
  | { kind: 'mirror'; percent: number }
  | { kind: 'analysis'; ms: number; label: string }
  | { kind: 'wait'; ms: number; label: string }
  | { kind: 'check'; check: string; phase?: 'prePromotion' | 'postPromotion' };

/** A check (spec.serviceMesh.canary.checks) as the rollout runs it. */
export interface PlanCheck {
  name: string;
  kind: 'http' | 'job';
  /** An HTTP check that waits, paused, until its endpoint answers 2xx (asked every intervalMs). */
  confirm: boolean;
  intervalMs: number;
  /** The longest one call of the check's activity may take (an HTTP check's attempts and pauses). */
  maxMs: number;
  /** A Job check fails if its Job has not finished this long after it was made. */
  timeoutMs: number;
  spec: Check;
}

/** The rollout's checks: all of them by name, and those that run by themselves outside the steps. */
export interface PlanChecks {
  all: PlanCheck[];
  /** Before anything is created; a failure ends the rollout (RolledBack, nothing to undo). */
  beforeStart: string[];
  /** After the promotion is complete: reported, they cannot undo it. */
  afterPromotion: string[];
  /** After a rollback or abort has undone everything: reported. */
  onRollback: string[];
}

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
  /** The strategy that built the plan; it names the rollout's workflow type (workflows/strategies.ts). Absent: canary. */
  strategy?: StrategyName;
  /** The router the rollout moves traffic with, fixed at its start. Absent (older plans): the spec's. */
  router?: RolloutRouterName;
  version: string;
  image: string;
  /** The stable image when the rollout started, to restore if a promote fails half-way. */
  stableImage: string;
  steps: PlanStep[];
  gates: HealthGates;
  analysis?: AnalysisPlan;
  checks?: PlanChecks;
  progressDeadlineMs: number;
  /**
   * After all traffic was routed away from the new version (a promote, an abort, a rollback), how long its pods keep
   * serving before they go (spec drainSeconds). Absent in plans from before it, which drained only on promotion and
   * only when routing by Service selector (drainMs), and removed an aborted canary at once.
   */
  canaryDrainMs?: number;
  /** Plans from before canaryDrainMs: after routing everything to stable on promotion, how long the new version's pods kept serving. */
  drainMs?: number;
  /** Where the rollout's notifications go (spec.notifications and the operator's --notify-url); absent: none. */
  notifications?: PlanNotification[];
  /**
   * What the rollout was planned from, part by part (specParts), fingerprinted: status.canary keeps the running
   * rollout's, so a pass can tell that the spec changed under it. Absent in plans from before it.
   */
  specDigest?: string;
}

const defaultDrainMs = DEFAULT_DRAIN_SECONDS * 1000;

/** The parts of the canary's spec a running rollout keeps to (a change to them applies to the next rollout), by their spec name. */
export function specParts(plan: Omit<RolloutPlan, 'specDigest'>): Record<string, unknown> {
  // drainSeconds only when it is not the default, so that the digests of rollouts planned before it still match.
  const drain = plan.canaryDrainMs !== undefined && plan.canaryDrainMs !== defaultDrainMs ? { drainSeconds: plan.canaryDrainMs / 1000 } : {};
  return { steps: plan.steps, analysis: plan.analysis ?? null, checks: plan.checks ?? null, healthGates: plan.gates, progressDeadline: plan.progressDeadlineMs, ...drain };
}

/** The fingerprint of each part, in one string ("steps=1a2b3c4d,analysis=..."). */
export function specDigest(plan: Omit<RolloutPlan, 'specDigest'>): string {
  return Object.entries(specParts(plan)).map(([k, v]) => `${k}=${fingerprint(v)}`).join(',');
}

/** The parts whose fingerprints differ between two digests (all of them when either is unreadable). */
export function changedSpecParts(running: string, now: string): string[] {
  const parse = (d: string) => new Map(d.split(',').map((kv) => kv.split('=') as [string, string]));
  const a = parse(running);
  const b = parse(now);
  return [...new Set([...a.keys(), ...b.keys()])].filter((k) => a.get(k) !== b.get(k));
}

/** A human description of a step, for the UI and status. */
export function describeStep(step: PlanStep | undefined, index: number, total: number): string {
  if (!step) return `all ${total} steps done`;
  const at = `step ${index + 1}/${total}`;
  if (step.kind === 'weight') return step.label ? `${at}: ${step.label}` : `${at}: set canary weight to ${step.weight}%`;
  if (step.kind === 'analysis' || step.kind === 'wait') return `${at}: ${step.label} for ${formatDuration(step.ms)}`;
  if (step.kind === 'check') return `${at}: ${step.phase ? `${step.phase} ` : ''}check ${step.check}`;
  if (step.kind === 'header') return step.match.length ? `${at}: route requests matching ${describeMatch(step.match)} to the canary` : `${at}: remove the header route`;
  if (step.kind === 'mirror') return step.percent ? `${at}: mirror ${step.percent}% of requests to the canary` : `${at}: stop mirroring`;
  if (step.approval) return step.ms === null ? `${at}: ${step.approval}: waiting for a promote` : `${at}: ${step.approval} in ${formatDuration(step.ms)} (or at a promote)`;
  if (step.ms === null) return `${at}: pause until promoted`;
  return `${at}: pause for ${formatDuration(step.ms)}`;
}

/** The conditions of a header route in words. */
export function describeMatch(match: HeaderMatch[]): string {
  return match.map((m) => {
    const op = m.exact !== undefined ? `= ${m.exact}` : m.prefix !== undefined ? `starting with ${m.prefix}` : `~ ${m.regex ?? ''}`;
    return m.cookie !== undefined ? `cookie ${m.cookie} ${op}` : `header ${m.header ?? ''} ${op}`;
  }).join(' and ');
}
