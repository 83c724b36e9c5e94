import { canaryImage, parseDuration, rolloutRouterOf, routerOf, type Application, type Check } from '../api/application.ts';
import { changedSpecParts, specDigest, type PlanCheck, type PlanChecks, type RolloutPlan } from './plan.ts';
import { checksAt, httpCheckMaxMs } from './checks.ts';
import { canaryName, isTerminal } from '../api/constants.ts';
import { routePort } from '../render/gateway.ts';
import { analysisPlan, type MetricsSource } from './analysis.ts';
import { strategies } from './strategies/index.ts';

/**
 * Whose metrics the built-in analysis templates read: Istio's sidecars', or, through the Gateway API on Traefik,
 * Traefik's, which counts the canary's requests under the name of the route's backend: `<ns>-<Service>-http-<port>`
 * for the HTTPRoute's (a weight, a header route; the `http` is Traefik's, whatever the port's name) and
 * `<ns>-<Service>-<port>@kubernetescrd` for the copies the mirroring TraefikService sends (a mirror step). Both are
 * the canary's requests (measured on the local stack's Traefik).
 */
export function metricsSource(app: Application): MetricsSource {
  const gw = app.spec.traffic?.gatewayAPI;
  const router = routerOf(app.spec);
  if (router === 'istio') return { kind: 'istio' };
  if (router !== 'gatewayAPI' || gw?.implementation !== 'traefik') return { kind: 'none' };
  const service = `${app.metadata.namespace ?? ''}-${canaryName(app)}`;
  const port = routePort(app);
  return { kind: 'traefik', canaryServices: [`${service}-http-${port}@kubernetesgateway`, `${service}-${port}@kubernetescrd`] };
}

/** Identity of a canary: a finished rollout with the same key is not restarted by itself. */
export function rolloutKey(version: string, image: string): string {
  return `${version}|${image}`;
}

/**
 * The rollout the spec asks for, or undefined when the canary is off (or cannot run: a canary without a router).
 * Its steps come from the spec's strategy (reconcile/strategies/).
 */
export function rolloutPlan(app: Application): RolloutPlan | undefined {
  const canary = app.spec.serviceMesh?.canary;
  const router = rolloutRouterOf(app.spec);
  if (!router || !canary?.enabled || !canary.canaryVersion) return undefined;
  const image = canaryImage(app.spec);
  const strategy = strategies[canary.strategy];
  const steps = strategy.steps(app);
  const plan: RolloutPlan = {
    key: rolloutKey(canary.canaryVersion, image),
    // The canary's plans say nothing new, so a canary's plan reads as before this field.
    ...(canary.strategy === 'canary' ? {} : { strategy: canary.strategy }),
    router,
    version: canary.canaryVersion,
    image,
    stableImage: app.spec.image,
    steps,
    gates: {
      minReadyReplicas: strategy.minReadyReplicas?.(app) ?? canary.healthGates.minReadyReplicas,
      maxRestarts: canary.healthGates.maxRestarts,
      intervalMs: parseDuration(canary.healthGates.interval),
      failureThreshold: canary.healthGates.failureThreshold,
      initialDelayMs: parseDuration(canary.healthGates.initialDelay),
    },
    ...(canary.checks?.length ? { checks: planChecks(canary.checks, strategy.postPromotionInSteps === true) } : {}),
    ...(canary.analysis ? { analysis: analysisPlan(canary.analysis, { namespace: app.metadata.namespace ?? '', name: app.metadata.name, canaryVersion: canary.canaryVersion, metrics: metricsSource(app) }) } : {}),
    progressDeadlineMs: parseDuration(canary.progressDeadline),
    // Whatever carries the requests follows a switch back a moment after it is written: the new version's pods keep
    // serving meanwhile, after a promote, an abort or a rollback alike.
    canaryDrainMs: canary.drainSeconds * 1000,
  };
  return { ...plan, specDigest: specDigest(plan) };
}

/** The rollout's checks as it runs them; which run outside the steps, by phase. */
export function planChecks(checks: Check[], postPromotionInSteps: boolean): PlanChecks {
  const names = (phase: Parameters<typeof checksAt>[1]) => checksAt(checks, phase).map((c) => c.name);
  return {
    all: checks.map((c): PlanCheck => ({
      name: c.name, kind: c.http ? 'http' : 'job', confirm: c.http?.confirm === true, intervalMs: (c.http?.intervalSeconds ?? 10) * 1000,
      maxMs: c.http ? httpCheckMaxMs(c.http) : 30_000, timeoutMs: (c.job?.timeoutSeconds ?? 600) * 1000, spec: c,
    })),
    beforeStart: names('beforeStart'),
    afterPromotion: postPromotionInSteps ? [] : names('postPromotion'),
    onRollback: names('onRollback'),
  };
}

/** Whether the running rollout keeps to the canary spec of today (`deferred` names what changed under it), or none runs. */
export type RolloutSpecState = { running: false } | { running: true; version: string; deferred?: string[] };

/**
 * Whether a rollout is in flight for the spec's canary (status.canary names its version and image, not ended) and
 * which parts of the canary spec changed since it started (status.canary.specDigest against today's plan): a
 * rollout keeps to the spec it started with, so such a change applies to the next rollout.
 */
export function rolloutSpecState(app: Application, plan: RolloutPlan | undefined): RolloutSpecState {
  const last = app.status?.canary;
  if (!plan || !last?.version || !last.image || !last.phase || isTerminal(last.phase) || rolloutKey(last.version, last.image) !== plan.key) return { running: false };
  const deferred = last.specDigest && plan.specDigest ? changedSpecParts(last.specDigest, plan.specDigest) : [];
  return { running: true, version: plan.version, ...(deferred.length ? { deferred } : {}) };
}
