// What a rollout routes to its canary, in terms no router owns (Istio's VirtualService, the Gateway API's HTTPRoute,
// or the next one), what a router reads back, and the one routing rule every traffic change obeys: nothing goes to
// a canary without a ready replica. The workflows, the activities and every router's renderer share these; they
// import nothing but each other's types.

/** One condition of a header route: a header (exact, prefix or regex) or a cookie (exact value). */
export interface HeaderMatch {
  header?: string;
  cookie?: string;
  exact?: string;
  prefix?: string;
  regex?: string;
}

/** What a rollout routes to the canary: a weight, requests that match headers or a cookie (A/B), and a mirror. */
export interface CanaryRoute {
  weight: number;
  /** All must match; absent or empty: no header route. */
  headers?: HeaderMatch[];
  /** Percentage of requests copied to the canary; absent or 0: no mirror. */
  mirror?: number;
}

/** What a router's objects route, read back from the cluster: the weighted split, and what else reaches the canary. */
export interface RouteWeights {
  stable: number;
  canary: number;
  total: number;
  /** Some requests (those matching a header route) go to the canary whatever the weights. */
  headerRoute: boolean;
  /** Percentage of requests mirrored to the canary. */
  mirror: number;
  /** How the split is made, where that is worth saying (a canary by replicas: approximately, by pods). */
  note?: string;
}

/** One step of a plan, as far as routing is concerned: the steps of other kinds route nothing. */
export type RouteStep =
  | { kind: 'weight'; weight: number }
  | { kind: 'header'; match: HeaderMatch[] }
  | { kind: 'mirror'; percent: number }
  | { kind: 'pause' | 'analysis' | 'wait' | 'check' };

/** No request to the canary: the route before the first step and after a rollback. */
export const noCanaryRoute: Readonly<CanaryRoute> = { weight: 0 };

/** Whether a route sends any request to the canary: by weight, a header route or a mirror. */
export function reachesCanary(r: CanaryRoute): boolean {
  return r.weight > 0 || Boolean(r.headers?.length) || Boolean(r.mirror);
}

/** Whether routes read back send any request to the canary. */
export function routesToCanary(w: RouteWeights | null): boolean {
  return Boolean(w && (w.canary > 0 || w.headerRoute || w.mirror > 0));
}

/** Two routes that send the same requests to the canary. */
export function sameRoute(a: CanaryRoute, b: CanaryRoute): boolean {
  return a.weight === b.weight && (a.mirror ?? 0) === (b.mirror ?? 0) && JSON.stringify(a.headers ?? []) === JSON.stringify(b.headers ?? []);
}

/** The rule every traffic change obeys, in the workflow and in every router: nothing to a canary without a ready replica. */
export function routable(route: CanaryRoute, readyReplicas: number): CanaryRoute {
  return readyReplicas > 0 ? route : noCanaryRoute;
}

/** The route a step asks for: the current target with the step's change (an empty header match or 0% mirror removes it). */
export function withStep(target: CanaryRoute, step: RouteStep): CanaryRoute {
  if (step.kind !== 'weight' && step.kind !== 'header' && step.kind !== 'mirror') return target;
  const { headers, mirror, ...rest } = target;
  const next: CanaryRoute = { ...rest, ...(headers?.length ? { headers } : {}), ...(mirror ? { mirror } : {}) };
  if (step.kind === 'weight') return { ...next, weight: step.weight };
  if (step.kind === 'header') {
    const { headers: _h, ...without } = next;
    return step.match.length ? { ...without, headers: step.match } : without;
  }
  const { mirror: _m, ...without } = next;
  return step.percent ? { ...without, mirror: step.percent } : without;
}

/** What the steps before `step` ask to route to the canary: where a rollout taken up again at `step` stands. */
export function routeAtStep(steps: RouteStep[], step: number): CanaryRoute {
  return steps.slice(0, step).reduce(withStep, noCanaryRoute);
}

/** A percentage a router writes: an integer from 0 to 100, or a RangeError naming `what`. */
export function percent(what: string, n: number): number {
  if (!Number.isInteger(n) || n < 0 || n > 100) throw new RangeError(`${what} must be an integer from 0 to 100, got ${n}`);
  return n;
}
