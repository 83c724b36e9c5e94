// The blue-green strategy: the new version runs in full beside the old one (the preview, reachable through the
// Service <app>-preview), is judged there, then takes all traffic in one switch; the old version stays for
// scaleDownDelaySeconds so that an abort or a failed post-promotion analysis switches back at once. Said as steps
// of the one rollout engine: the switch is a 100% route, the switch-back the rollout's compensation.
import { parseDuration, type Application } from '../../api/application.ts';
import { canaryReplicas } from '../../render/deployment.ts';
import type { PlanStep } from '../plan.ts';
import { checksAt } from '../checks.ts';

export function blueGreenSteps(app: Application): PlanStep[] {
  const canary = app.spec.serviceMesh!.canary!;
  const bg = canary.blueGreen;
  const version = canary.canaryVersion!;
  const switchTo = `switch all traffic to ${version}`;
  const delayMs = (bg?.scaleDownDelaySeconds ?? 30) * 1000;
  const checks = (phase: 'prePromotion' | 'postPromotion') => checksAt(canary.checks, phase).map((c): PlanStep => ({ kind: 'check', check: c.name, phase }));
  return [
    ...(bg?.prePromotionAnalysis ? [{ kind: 'analysis', ms: parseDuration(bg.prePromotionAnalysis.duration), label: 'judge the preview by analysis' } as const] : []),
    // Against the preview (its Service <app>-preview), before the switch; after it, with a switch-back on failure.
    ...checks('prePromotion'),
    { kind: 'pause', ms: bg?.autoPromotionSeconds === undefined ? null : bg.autoPromotionSeconds * 1000, approval: switchTo },
    { kind: 'weight', weight: 100, label: switchTo },
    ...checks('postPromotion'),
    ...(bg?.postPromotionAnalysis ? [{ kind: 'analysis', ms: parseDuration(bg.postPromotionAnalysis.duration), label: 'judge the new version by analysis after the switch' } as const] : []),
    ...(delayMs > 0 ? [{ kind: 'wait', ms: delayMs, label: 'keep the old version for a switch-back' } as const] : []),
  ];
}

/** The whole preview must be ready before the switch: it takes all traffic at once. */
export function blueGreenMinReady(app: Application): number {
  return Math.max(app.spec.serviceMesh!.canary!.healthGates.minReadyReplicas, canaryReplicas(app));
}
