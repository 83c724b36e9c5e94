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

/** The built-in templates: what a mesh user would write for the canary's success rate and latency. */
export const templates: Record<string, string> = {
  // Percentage (0-100) of the canary's requests over the interval that did not end in a 5xx.
  'request-success-rate': `100 * sum(rate(istio_requests_total{${canaryRequests}, response_code!~"5.."}[{{interval}}])) / sum(rate(istio_requests_total{${canaryRequests}}[{{interval}}]))`,
  // 99th percentile of the canary's request duration over the interval, in milliseconds.
  'request-duration': `histogram_quantile(0.99, sum(rate(istio_request_duration_milliseconds_bucket{${canaryRequests}}[{{interval}}])) by (le))`,
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
