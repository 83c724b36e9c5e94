import { canaryImage, parseDuration, routerOf, type Application } from '../api/application.ts';
import type { PlanStep, RolloutPlan } from '../workflows/rollout/plan.ts';
import { canaryName } from '../api/constants.ts';
import { routePort } from '../render/gateway.ts';
import { analysisPlan, type MetricsSource } from './analysis.ts';

/**
 * Whose metrics the built-in analysis templates read: Istio's sidecars', or, through the Gateway API on Traefik,
 * Traefik's, which counts the canary's requests under its Service and port as `<ns>-<Service>-http-<port>` (the
 * `http` is Traefik's, whatever the port's name; measured on the local stack's Traefik).
 */
export function metricsSource(app: Application): MetricsSource {
  const gw = app.spec.traffic?.gatewayAPI;
  if (routerOf(app.spec) !== 'gatewayAPI') return { kind: 'istio' };
  if (gw?.implementation !== 'traefik') return { kind: 'none' };
  return { kind: 'traefik', canaryService: `${app.metadata.namespace ?? ''}-${canaryName(app)}-http-${routePort(app)}@kubernetesgateway` };
}

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
  if (!routerOf(app.spec) || !canary?.enabled || !canary.canaryVersion) return undefined;
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
    ...(canary.analysis ? { analysis: analysisPlan(canary.analysis, { namespace: app.metadata.namespace ?? '', name: app.metadata.name, canaryVersion: canary.canaryVersion, metrics: metricsSource(app) }) } : {}),
    progressDeadlineMs: parseDuration(canary.progressDeadline),
  };
}
