import { canaryImage, parseDuration, type Application } from '../api/application.ts';
import type { PlanStep, RolloutPlan } from '../workflows/rollout/plan.ts';
import { analysisPlan } from './analysis.ts';

/** Identity of a canary: a finished rollout with the same key is not restarted by itself. */
export function rolloutKey(version: string, image: string): string {
  return `${version}|${image}`;
}

/**
 * The rollout the spec asks for, or undefined when the canary is off. Without steps, the seed's semantics: send
 * `weight`% to the canary and wait for promote. With steps, finishing the last step promotes.
 */
export function rolloutPlan(app: Application): RolloutPlan | undefined {
  const canary = app.spec.serviceMesh?.canary;
  if (!app.spec.serviceMesh?.enabled || !canary?.enabled || !canary.canaryVersion) return undefined;
  const image = canaryImage(app.spec);
  const steps: PlanStep[] = canary.steps?.length
    ? canary.steps.map((s): PlanStep => {
      if (s.setWeight !== undefined) return { kind: 'weight', weight: s.setWeight };
      if (s.setHeaderRoute) return { kind: 'header', match: (s.setHeaderRoute.match ?? []).map((m) => ({ ...m })) };
      if (s.setMirrorRoute) return { kind: 'mirror', percent: s.setMirrorRoute.percentage };
      return { kind: 'pause', ms: s.pause?.duration ? parseDuration(s.pause.duration) : null };
    })
    : [{ kind: 'weight', weight: canary.weight }, { kind: 'pause', ms: null }];
  return {
    key: rolloutKey(canary.canaryVersion, image),
    version: canary.canaryVersion,
    image,
    stableImage: app.spec.image,
    steps,
    gates: {
      minReadyReplicas: canary.healthGates.minReadyReplicas,
      maxRestarts: canary.healthGates.maxRestarts,
      intervalMs: parseDuration(canary.healthGates.interval),
      failureThreshold: canary.healthGates.failureThreshold,
      initialDelayMs: parseDuration(canary.healthGates.initialDelay),
    },
    ...(canary.analysis ? { analysis: analysisPlan(canary.analysis, { namespace: app.metadata.namespace ?? '', name: app.metadata.name, canaryVersion: canary.canaryVersion }) } : {}),
    progressDeadlineMs: parseDuration(canary.progressDeadline),
  };
}
