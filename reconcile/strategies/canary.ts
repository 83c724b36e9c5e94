// The canary strategy: a second Deployment takes a growing share of the traffic through the router, step by step.
import { parseDuration, type Application } from '../../api/application.ts';
import type { PlanStep } from '../plan.ts';
import { checksAt } from '../checks.ts';

/**
 * The spec's steps. Without steps, the seed's semantics: send `weight`% to the canary and wait for promote. With
 * steps, finishing the last step promotes.
 */
export function canarySteps(app: Application): PlanStep[] {
  const canary = app.spec.serviceMesh!.canary!;
  // prePromotion checks run after the last step, before the promotion (a promote by a person goes past them).
  const prePromotion = checksAt(canary.checks, 'prePromotion').map((c): PlanStep => ({ kind: 'check', check: c.name, phase: 'prePromotion' }));
  if (!canary.steps?.length) return [{ kind: 'weight', weight: canary.weight }, { kind: 'pause', ms: null }, ...prePromotion];
  return [...canary.steps.map((s): PlanStep => {
    if (s.check !== undefined) return { kind: 'check', check: s.check };
    if (s.setWeight !== undefined) return { kind: 'weight', weight: s.setWeight };
    if (s.setHeaderRoute) return { kind: 'header', match: (s.setHeaderRoute.match ?? []).map((m) => ({ ...m })) };
    if (s.setMirrorRoute) return { kind: 'mirror', percent: s.setMirrorRoute.percentage };
    return { kind: 'pause', ms: s.pause?.duration ? parseDuration(s.pause.duration) : null };
  }), ...prePromotion];
}
