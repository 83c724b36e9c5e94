// The canary's analysis as the plan carries it: each metric's PromQL written out for this Application, from the
// spec's query or a built-in template on Istio's standard telemetry. Pure, so the query in the history and in
// status is exactly the one sent.
import type { AnalysisSpec } from '../api/application.ts';
import { STABLE_VERSION, canaryName, childName } from '../api/constants.ts';
import type { AnalysisPlan } from '../workflows/rollout/plan.ts';
import { parseDuration } from '../api/application.ts';

/** What `{{...}}` in a query stands for. */
export interface QueryVariables {
  namespace: string;
  name: string;
  canaryVersion: string;
  stableVersion: string;
  canaryWorkload: string;
  stableWorkload: string;
  interval: string;
}

// Istio's standard metrics as its sidecars report them at the destination: the canary's workload is its Deployment.
const canaryRequests = 'reporter="destination", destination_workload_namespace="{{namespace}}", destination_workload="{{canaryWorkload}}"';

// The canary's requests per second over the interval, of the response codes `codes` selects (all by default). Istio
// writes a series for a response code only once it answered a request with it: a selector of some codes matches
// nothing, rather than 0, while every request ends otherwise.
const requestRate = (codes = '') => `sum(rate(istio_requests_total{${canaryRequests}${codes}}[{{interval}}]))`;

// Requests reached the canary in the interval. Each template answers only under this guard, so an empty answer (no
// data) means exactly that no request reached the canary, and never hides a 0/0 or a canary that fails them all.
const requested = `${requestRate()} > 0`;

/**
 * The built-in templates: what a mesh user would write for the canary's success rate and latency, written so that
 * every canary that answers requests gets a number; workflows/rollout/analysis.ts words what their other answers mean.
 */
export const templates: Record<string, string> = {
  // Percentage (0-100) of the canary's requests over the interval that did not end in a 5xx: 0 when every one did
  // (no series of a non-5xx code exists then, hence `or vector(0)`); no data when no request reached it.
  'request-success-rate': `100 * (${requestRate(', response_code!~"5.."')} or vector(0)) / (${requested})`,
  // 99th percentile of the canary's request duration over the interval, in milliseconds, failed requests included (a
  // canary failing fast is the success rate's to judge); no data when no request reached it, NaN when requests did
  // but Istio reported no durations for them (a histogram with no buckets for the canary answers nothing).
  'request-duration': `(histogram_quantile(0.99, sum by (le) (rate(istio_request_duration_milliseconds_bucket{${canaryRequests}}[{{interval}}]))) and on() (${requested})) or on() ((${requested}) * NaN)`,
};

/** Writes a query out: every `{{variable}}` replaced (the CRD admits only known ones). */
export function renderQuery(query: string, vars: QueryVariables): string {
  return query.replace(/[{][{](\w+)[}][}]/g, (whole, v: string) => (v in vars ? vars[v as keyof QueryVariables] : whole));
}

/** The analysis of a rollout of `canaryVersion` of the Application `namespace/name`. */
export function analysisPlan(spec: AnalysisSpec, app: { namespace: string; name: string; canaryVersion: string }): AnalysisPlan {
  const named = { metadata: { name: app.name } };
  const vars: QueryVariables = {
    namespace: app.namespace, name: app.name, canaryVersion: app.canaryVersion, stableVersion: STABLE_VERSION,
    canaryWorkload: canaryName(named), stableWorkload: childName(named), interval: spec.interval,
  };
  return {
    intervalMs: parseDuration(spec.interval),
    ...(spec.prometheusAddress ? { prometheusAddress: spec.prometheusAddress } : {}),
    metrics: spec.metrics.map((m) => ({
      name: m.name,
      query: renderQuery(m.query ?? templates[m.template ?? ''] ?? '', vars),
      ...(m.template ? { template: m.template } : {}),
      range: { ...(m.thresholdRange.min !== undefined ? { min: m.thresholdRange.min } : {}), ...(m.thresholdRange.max !== undefined ? { max: m.thresholdRange.max } : {}) },
      failureLimit: m.failureLimit,
      inconclusiveLimit: m.inconclusiveLimit,
      dryRun: m.dryRun,
    })),
  };
}
