// The canary's analysis as the plan carries it: each metric's PromQL written out for this Application, from the
// spec's query or a built-in template on the metrics of what routes its requests (Istio's standard telemetry, or
// Traefik's). Pure, so the query in the history and in status is exactly the one sent.
import type { AnalysisSpec } from '../api/application.ts';
import { STABLE_VERSION, canaryName, childName } from '../api/constants.ts';
import type { AnalysisPlan } from './plan.ts';
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

/** Whose metrics the templates read: Istio's, Traefik's (for the canary's Service), or none known (queries only). */
export type MetricsSource = { kind: 'istio' } | { kind: 'traefik'; canaryServices: string[] } | { kind: 'none' };

/**
 * The guard every template answers under: requests reached the canary in the interval. So an empty answer (no data)
 * means exactly that no request reached it, and never hides a 0/0 or a canary that fails them all.
 */
const requestedBy = (rate: string) => `${rate} > 0`;

// Istio's standard metrics as its sidecars report them at the destination: the canary's workload is its Deployment.
const istioCanary = 'reporter="destination", destination_workload_namespace="{{namespace}}", destination_workload="{{canaryWorkload}}"';

// The canary's requests per second over the interval, of the response codes `codes` selects (all by default). Istio
// (and Traefik) writes a series for a response code only once it answered a request with it: a selector of some
// codes matches nothing, rather than 0, while every request ends otherwise.
const istioRate = (codes = '') => `sum(rate(istio_requests_total{${istioCanary}${codes}}[{{interval}}]))`;

/** Traefik's counters of the requests it sent to the canary's Service (`services`: the label's values naming it). */
function traefikTemplates(services: string[]): Record<string, string> {
  const canary = `service=~"${services.map((v) => v.replace(/[\\.+*?()|[\]{}^$]/g, '\\\\$&')).join('|')}"`;
  const rate = (codes = '') => `sum(rate(traefik_service_requests_total{${canary}${codes}}[{{interval}}]))`;
  const requested = requestedBy(rate());
  return {
    'request-success-rate': `100 * (${rate(', code!~"5.."')} or vector(0)) / (${requested})`,
    // Traefik measures in seconds; the threshold is in milliseconds, as with Istio.
    'request-duration': `(1000 * histogram_quantile(0.99, sum by (le) (rate(traefik_service_request_duration_seconds_bucket{${canary}}[{{interval}}]))) and on() (${requested})) or on() ((${requested}) * NaN)`,
  };
}

const istioRequested = requestedBy(istioRate());

/**
 * The built-in templates of Istio: what a mesh user would write for the canary's success rate and latency, written
 * so that every canary that answers requests gets a number; workflows/rollout/analysis.ts words what their other
 * answers mean. Traefik's say the same of Traefik's metrics.
 */
export const templates: Record<string, string> = {
  // Percentage (0-100) of the canary's requests over the interval that did not end in a 5xx: 0 when every one did
  // (no series of a non-5xx code exists then, hence `or vector(0)`); no data when no request reached it.
  'request-success-rate': `100 * (${istioRate(', response_code!~"5.."')} or vector(0)) / (${istioRequested})`,
  // 99th percentile of the canary's request duration over the interval, in milliseconds, failed requests included (a
  // canary failing fast is the success rate's to judge); no data when no request reached it, NaN when requests did
  // but Istio reported no durations for them (a histogram with no buckets for the canary answers nothing).
  'request-duration': `(histogram_quantile(0.99, sum by (le) (rate(istio_request_duration_milliseconds_bucket{${istioCanary}}[{{interval}}]))) and on() (${istioRequested})) or on() ((${istioRequested}) * NaN)`,
};

/** The templates for a source of metrics (none for an unknown Gateway API implementation). */
export function templatesFor(source: MetricsSource): Record<string, string> {
  if (source.kind === 'istio') return templates;
  return source.kind === 'traefik' ? traefikTemplates(source.canaryServices) : {};
}

/** Writes a query out: every `{{variable}}` replaced (the CRD admits only known ones). */
export function renderQuery(query: string, vars: QueryVariables): string {
  return query.replace(/[{][{](\w+)[}][}]/g, (whole, v: string) => (v in vars ? vars[v as keyof QueryVariables] : whole));
}

/** The analysis of a rollout of `canaryVersion` of the Application `namespace/name`. */
export function analysisPlan(spec: AnalysisSpec, app: { namespace: string; name: string; canaryVersion: string; metrics?: MetricsSource }): AnalysisPlan {
  const builtIn = templatesFor(app.metrics ?? { kind: 'istio' });
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
      query: renderQuery(m.query ?? builtIn[m.template ?? ''] ?? '', vars),
      ...(m.template ? { template: m.template } : {}),
      range: { ...(m.thresholdRange.min !== undefined ? { min: m.thresholdRange.min } : {}), ...(m.thresholdRange.max !== undefined ? { max: m.thresholdRange.max } : {}) },
      failureLimit: m.failureLimit,
      inconclusiveLimit: m.inconclusiveLimit,
      dryRun: m.dryRun,
    })),
  };
}
