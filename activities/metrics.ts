// Asks Prometheus for the canary's metrics: each query sent as written in the plan, each answer a value or the
// reason there is none. The verdict is the workflow's (workflows/rollout/analysis.ts); here only facts.
import { ApplicationFailure } from '@temporalio/activity';
import { FailureType } from '../api/constants.ts';
import { describeUrl, hostRefusal } from '../reconcile/checks.ts';
import type { ActivityDeps } from './deps.ts';
import type { MetricsInput, MetricValue, NonFiniteSample } from './types.ts';

interface QueryResponse {
  status: 'success' | 'error';
  errorType?: string;
  error?: string;
  data?: { resultType: string; result: unknown };
}

/**
 * Queries Prometheus (the Application's own, else the operator's) for each metric; never throws for an answer it
 * cannot use. An Application's own Prometheus must be on a host --check-allowed-hosts allows: whoever writes an
 * Application could otherwise make the operator send requests from where it runs. Another is refused for good
 * (CheckNotAllowed) before any request; the operator's own address is its operator's choice, never refused.
 */
export async function queryMetrics(deps: Pick<ActivityDeps, 'prometheusAddress' | 'checkAllowedHosts'>, input: MetricsInput): Promise<MetricValue[]> {
  if (input.address !== undefined) {
    const refusal = hostRefusal(deps.checkAllowedHosts ?? [], input.address, `analysis.prometheusAddress of ${input.namespace}/${input.name} is ${input.address}`);
    if (refusal) throw ApplicationFailure.nonRetryable(refusal, FailureType.CheckNotAllowed);
  }
  const address = input.address ?? deps.prometheusAddress;
  if (!address) {
    return input.queries.map((q) => ({ name: q.name, value: null, error: 'no Prometheus to ask: set the operator\'s --prometheus-address or analysis.prometheusAddress' }));
  }
  return Promise.all(input.queries.map(async (q) => ({ name: q.name, ...(await instantQuery(address, q.query)) })));
}

/** One instant query: its single value, or what came instead. */
async function instantQuery(address: string, query: string): Promise<Omit<MetricValue, 'name'>> {
  let body: QueryResponse;
  try {
    // Redirects are not followed (as an HTTP check's and a notification's are not): the host asked is the one
    // --check-allowed-hosts allowed, not wherever it points (a login proxy, an open redirect).
    const res = await fetch(`${address.replace(/\/$/, '')}/api/v1/query?${new URLSearchParams({ query }).toString()}`, { redirect: 'manual', signal: AbortSignal.timeout(10_000) });
    if (res.status >= 300 && res.status < 400) {
      const location = res.headers.get('location');
      return { value: null, error: `Prometheus at ${address} answered ${res.status}, a redirect (not followed)${location ? ` to ${describeUrl(location)}` : ''}` };
    }
    const text = await res.text();
    try {
      body = JSON.parse(text) as QueryResponse;
    } catch {
      return { value: null, error: `Prometheus at ${address} answered ${res.status}: ${text.slice(0, 200)}` };
    }
  } catch (err) {
    const cause = (err as { cause?: { code?: string; message?: string } }).cause;
    return { value: null, error: `Prometheus at ${address} unreachable: ${cause?.code ?? cause?.message ?? (err as Error).message}` };
  }
  if (body.status !== 'success') return { value: null, error: `Prometheus rejected the query: ${body.errorType ?? 'error'}: ${body.error ?? '?'}` };
  return valueOf(body.data);
}

const nonFiniteSamples: readonly string[] = ['NaN', '+Inf', '-Inf'] satisfies NonFiniteSample[];

/** What an instant query answered: a scalar or a vector of exactly one sample, a number or not; or no series. */
export function valueOf(data: QueryResponse['data']): Omit<MetricValue, 'name'> {
  let raw: string;
  if (data?.resultType === 'scalar') raw = (data.result as [number, string])[1];
  else if (data?.resultType === 'vector') {
    const series = data.result as { value: [number, string] }[];
    if (series.length === 0) return { value: null, noSeries: true };
    if (series.length > 1) return { value: null, error: `the query returned ${series.length} series; it must return one value (aggregate it, e.g. with sum())` };
    raw = series[0]!.value[1];
  } else return { value: null, error: `the query returned a ${data?.resultType ?? 'missing'} result; it must return one value` };
  if (nonFiniteSamples.includes(raw)) return { value: null, nonFinite: raw as NonFiniteSample };
  const value = Number(raw);
  if (!Number.isFinite(value)) return { value: null, error: `the query returned ${JSON.stringify(raw)}, which is no number` };
  return { value };
}
