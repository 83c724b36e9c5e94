// The rollout's decisions as pure functions (no Temporal APIs): the workflow gathers, these decide, the workflow
// acts. Unit-tested directly. The routing rule they apply lives in routing/route.ts, below the routers too.
import { Reason, RolloutPhase } from '../../api/constants.ts';
import type { CanaryHealth, CanaryObservation } from '../../activities/types.ts';
import type { ControlRequest, GateVerdict } from '../contract.ts';
import { noCanaryRoute, reachesCanary, routable, sameRoute, type CanaryRoute, type RouteWeights } from '../../routing/route.ts';
import { describeMatch, type HealthGates } from '../../reconcile/plan.ts';

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

/** What one gate check concludes from what it saw: the verdict to record, the counts, and what to do about the routes. */
export interface GateStep {
  record: GateVerdict;
  /** When the canary was first ready (set on its first passing check). */
  readySince: string | undefined;
  /** The failure counted toward failureThreshold now (at most one per interval), and the count after it. */
  counted: boolean;
  consecutiveFailures: number;
  /** The routes must change: to `route`, for `why`; `repair` when a hand edit took what the rollout set. */
  reroute?: { route: CanaryRoute; why: string; repair: boolean };
  /** A hand edit or deletion took the canary Deployment or what it is routed to, or resized or re-imaged it: put it back. */
  recreate?: string;
  /** Everything is as the rollout set it, and the canary passes. */
  clean: boolean;
}

/**
 * The gate step: the canary's health judged against the gates (a failure during the start-up grace recorded, not
 * counted; at most one failure counted per interval, so a burst of rechecks cannot roll a canary back in a second),
 * traffic moved by the routing rule (up after a passing gate, to nothing once the canary has no ready replica), and
 * what a hand edit or a deletion changed put back.
 */
export function gateStep(s: {
  seen: CanaryObservation; gates: HealthGates; now: number; createdAt: number; readySince: string | undefined; lastCountedAt: number;
  consecutiveFailures: number; route: CanaryRoute; target: CanaryRoute;
}): GateStep {
  const { health } = s.seen;
  const verdict = gateVerdict(health, s.gates);
  const at = new Date(s.now).toISOString();
  const readySince = s.readySince ?? (verdict.ok ? at : undefined);
  const counts = !verdict.ok && failureCounts({ everReady: readySince !== undefined, now: s.now, createdAt: s.createdAt, initialDelayMs: s.gates.initialDelayMs });
  const counted = counts && s.now - s.lastCountedAt >= s.gates.intervalMs;
  const record: GateVerdict = {
    at, ok: verdict.ok, readyReplicas: health.readyReplicas, restarts: health.restarts, reason: verdict.reason, ...(!verdict.ok && !counts ? { grace: true } : {}),
  };
  // A canary re-imaged by hand is not the one the rollout judges: no traffic until it is put back. One resized keeps
  // what its ready pods earn (none when scaled to nothing) while it is.
  const reimaged = s.seen.drift?.what === 'image';
  const desired = reimaged ? noCanaryRoute : routeAfterGate(s.route, s.target, health, verdict.ok);
  const moved = !sameRoute(desired, s.route);
  const reroute = moved || !s.seen.asIntended ? {
    route: desired, repair: !s.seen.asIntended && !s.seen.specChanged,
    why: reimaged && reachesCanary(s.route) ? `${s.seen.drift!.message}: all traffic moved to stable`
      : !reachesCanary(desired) && reachesCanary(s.route) ? 'the canary has no ready replica: all traffic moved to stable'
      : !s.seen.asIntended && s.seen.specChanged ? `the Application's spec changed what the routes say: written again, routing ${describeRoute(desired)}`
      : !s.seen.asIntended ? `the routes do not route what the rollout set (they route ${describeRouted(s.seen.routed)}): routing ${describeRoute(desired)} again`
        : `gate passed: routing ${describeRoute(desired)} to the canary`,
  } : undefined;
  const recreate = !health.exists ? 'the canary Deployment is gone' : s.seen.drift ? s.seen.drift.message : !s.seen.target ? 'what the canary is routed to (its subset, its Service) is gone' : undefined;
  return {
    record, readySince, counted, consecutiveFailures: verdict.ok ? 0 : s.consecutiveFailures + (counted ? 1 : 0),
    ...(reroute ? { reroute } : {}), ...(recreate ? { recreate } : {}),
    clean: verdict.ok && !reroute && !recreate,
  };
}

/** A route in words. */
export function describeRoute(r: CanaryRoute): string {
  return [`${r.weight}%`, describeExtras(r)].filter(Boolean).join(', ');
}

/** A header route and a mirror, in words (undefined when neither). */
export function describeExtras(r: CanaryRoute): string | undefined {
  const parts = [r.headers?.length ? `requests with ${describeMatch(r.headers)}` : '', r.mirror ? `a ${r.mirror}% mirror` : ''].filter(Boolean);
  return parts.length ? parts.join(', ') : undefined;
}

/** Routes read back, in words. */
export function describeRouted(w: RouteWeights | null): string {
  if (!w) return 'nothing (the route object is gone)';
  return [`${w.canary}%`, w.headerRoute ? 'a header route' : '', w.mirror ? `a ${w.mirror}% mirror` : ''].filter(Boolean).join(', ');
}
