// Canary analysis against the real Prometheus of the stack: a test exporter plays Istio's sidecars (request counts
// and durations for the stable and canary workloads at the rates the test sets), Prometheus scrapes it, and the
// operator's analysis queries Prometheus through the built-in templates.
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { queryMetrics } from '../../activities/metrics.ts';
import type { AnalysisSpec } from '../../api/application.ts';
import type { AnalysisVerdict } from '../../activities/types.ts';
import { eventually } from '../../lib/poll.ts';
import { analysisPlan } from '../../reconcile/analysis.ts';
import { readRouteWeights } from '../../render/istio.ts';
import { judge } from '../../workflows/rollout/analysis.ts';
import { appManifest, applyAsUser, getApp, kube, waitForObject, type Json } from '../../testkit/apps.ts';
import { assertPromoted, assertSteadyState, finishedRollout, virtualService, waitCanaryPhase } from '../../testkit/canary.ts';
import { testEnv } from '../../testkit/env.ts';
import { meshMetricsSuite } from '../fixtures/istio-exporter.ts';

const healthy = { rps: 20, errorRate: 0, latencyMs: 40 };
const metrics = [
  { name: 'success-rate', template: 'request-success-rate', thresholdRange: { min: 95 }, failureLimit: 2, inconclusiveLimit: 4 },
  { name: 'latency', template: 'request-duration', thresholdRange: { max: 500 }, failureLimit: 2, inconclusiveLimit: 4 },
];
const canaryApp = (ns: string, name: string, canary: Json) => appManifest(ns, name, {
  image: 'nginx:1.25', replicas: 1,
  serviceMesh: { enabled: true, canary: { enabled: true, canaryVersion: 'v2', healthGates: { interval: '1s', initialDelay: '2s' }, ...canary } },
});

describe('canary analysis on the real Prometheus', () => {
  const { s, exporter } = meshMetricsSuite('analysis', { routes: true });

  /**
   * One analysis of the canary of Application `app` as the operator runs it, minus the workflow: the plan's queries
   * written out (templates or `query`), sent to the stack's Prometheus by the activity, each answer judged.
   */
  async function analyse(app: string, ...ms: Omit<AnalysisSpec['metrics'][number], 'failureLimit' | 'inconclusiveLimit' | 'dryRun'>[]): Promise<Record<string, AnalysisVerdict>> {
    const plan = analysisPlan({ interval: '5s', metrics: ms.map((m) => ({ failureLimit: 1, inconclusiveLimit: 1, dryRun: false, ...m })) }, { namespace: s.ns, name: app, canaryVersion: 'v2' });
    const answers = await queryMetrics({}, { namespace: s.ns, name: app, address: (await testEnv()).prometheusUrl, queries: plan.metrics });
    return Object.fromEntries(plan.metrics.map((m) => [m.name, judge(m, answers.find((a) => a.name === m.name)!, new Date().toISOString(), 20)]));
  }
  const successRate = { name: 'success-rate', template: 'request-success-rate', thresholdRange: { min: 99 } } as const;
  const latency = { name: 'latency', template: 'request-duration', thresholdRange: { max: 500 } } as const;
  const noRequests = /^no data: no request reached the canary in the interval$/;

  it('each template on a canary that fails every request (Istio has no 200 series for it) answers a number: a success rate of 0, a fail, and the failed requests\' p99', async () => {
    exporter.set(s.ns, 'q-failing-canary', { ...healthy, errorRate: 1 });
    const v = await eventually('both templates answering a number', async () => {
      const r = await analyse('q-failing', successRate, latency);
      if (r['success-rate']!.result === 'inconclusive' || r['latency']!.result === 'inconclusive') throw new Error(JSON.stringify(r));
      return r;
    }, { timeoutMs: 30_000, intervalMs: 1000 });
    assert.equal(v['success-rate']!.value, 0);
    assert.equal(v['success-rate']!.result, 'fail');
    assert.equal(v['success-rate']!.message, '0 is below the minimum 99');
    // Every request takes 40 ms: the p99 lies in the bucket (25, 50].
    assert.ok(v['latency']!.value! > 25 && v['latency']!.value! <= 50, `p99 ${v['latency']!.value}`);
    assert.equal(v['latency']!.result, 'pass');
  });

  it('no request at all, or none in the interval: no data from each template, saying that no request reached the canary; a ratio of nothing is NaN and an x/0 is +Inf', async () => {
    exporter.set(s.ns, 'q-stopped-canary', healthy);
    await eventually('the canary answering before it stops', async () => {
      const r = await analyse('q-stopped', successRate, latency);
      return r['success-rate']!.value === 100 && r['latency']!.result === 'pass' ? r : undefined;
    }, { timeoutMs: 30_000, intervalMs: 1000 });
    exporter.set(s.ns, 'q-stopped-canary', { ...healthy, rps: 0 });
    const rate = (codes: string) => `sum(rate(istio_requests_total{destination_workload_namespace="{{namespace}}", destination_workload="{{canaryWorkload}}"${codes}}[{{interval}}]))`;
    // Queries of one's own: a success ratio is 0/0 without requests, and anything over their rate is x/0.
    const ratio = { name: 'success-ratio', query: `${rate(', response_code!~"5.."')} / ${rate('')}`, thresholdRange: { min: 0.99 } };
    const perRequest = { name: 'one-per-request', query: `1 / ${rate('')}`, thresholdRange: { min: 100 } };
    const stopped = await eventually('no requests in the last 5s', async () => {
      const r = await analyse('q-stopped', successRate, latency, ratio, perRequest);
      return r['success-rate']!.result === 'inconclusive' ? r : undefined;
    }, { timeoutMs: 30_000, intervalMs: 1000 });
    assert.match(stopped['success-rate']!.message, noRequests);
    assert.match(stopped['latency']!.message, noRequests);
    assert.equal(stopped['success-ratio']!.result, 'inconclusive', 'NaN (0/0) is no pass');
    assert.match(stopped['success-ratio']!.message, /^the query returned NaN, not a number \(a 0\/0.*\): neither a pass nor a fail$/);
    assert.equal(stopped['one-per-request']!.result, 'pass', '+Inf is over every minimum');
    assert.equal(stopped['one-per-request']!.message, '+Inf (a division by zero) is within the minimum 100');

    // Never a request: Istio has no series for the workload at all (while it has the stopped one's, just asked).
    const idle = await analyse('q-idle', successRate, latency, ratio);
    assert.equal(idle['success-rate']!.result, 'inconclusive');
    assert.match(idle['success-rate']!.message, noRequests);
    assert.match(idle['latency']!.message, noRequests);
    assert.equal(idle['success-ratio']!.message, 'no data: the query matched no series', 'a query of its own gets no guess why');
  });

  it('requests without durations (the histogram has no buckets for the canary): the latency is inconclusive and says so, not "no requests"', async () => {
    exporter.set(s.ns, 'q-untimed-canary', { ...healthy, durations: false });
    const v = await eventually('the success rate answering', async () => {
      const r = await analyse('q-untimed', successRate, latency);
      return r['success-rate']!.value === 100 ? r : undefined;
    }, { timeoutMs: 30_000, intervalMs: 1000 });
    assert.equal(v['latency']!.result, 'inconclusive');
    assert.match(v['latency']!.message, /^NaN: requests reached the canary but Istio reported no durations for them/);
  });

  it('a healthy canary walks its steps on passing analyses and is promoted; the verdicts are in status and in the history', async () => {
    exporter.set(s.ns, 'good-canary', healthy);
    await applyAsUser(canaryApp(s.ns, 'good', {
      steps: [{ setWeight: 20 }, { pause: { duration: '2s' } }, { setWeight: 50 }, { pause: { duration: '2s' } }],
      analysis: { interval: '3s', metrics },
    }));
    const passed = await waitForObject('a passing verdict in status', () => getApp(s.ns, 'good'),
      (a) => (a?.status?.canary?.analysis ?? []).some((v: Json) => v.metric === 'success-rate' && v.result === 'pass'), 90_000);
    const verdict = passed!.status.canary.analysis.find((v: Json) => v.metric === 'success-rate' && v.result === 'pass');
    assert.ok(Math.abs(verdict.value - 100) < 1e-6, `success rate ${verdict.value}`);
    assert.deepEqual(verdict.range, { min: 95 });
    assert.match(verdict.query, new RegExp(`destination_workload_namespace="${s.ns}", destination_workload="good-canary"`));
    await assertPromoted(s.ns, 'good', 'nginx:v2');
    const history = await finishedRollout(s.ns, 'good');
    assert.equal(history?.outcome?.phase, 'Promoted');
    assert.ok(history.entries.some((e) => e.kind === 'analysis' && e.text === 'success-rate: 100 vs >= 95: pass'), 'history tells the verdicts');
    assert.ok(history.entries.some((e) => e.kind === 'analysis' && /^latency: [\d.]+ vs <= 500: pass$/.test(e.text)));
    assert.deepEqual(history.analysis?.queries.map((q) => [q.metric, q.range]), [['success-rate', '>= 95'], ['latency', '<= 500']], 'each query once');
    // The promote switched the spec's canary off; the abort its Application's workflow sent for that changed nothing.
    assert.ok(history.entries.filter((e) => e.action === 'abort').every((e) => e.ignored), 'no abort taken in a promoted rollout');
    const routed = history.entries.filter((e) => e.kind === 'route').map((e) => e.text);
    // The canary's 0% is set with it: no repair of a route the Application's last pass applied before it.
    assert.deepEqual(routed, ['routed 20% to the canary', 'routed 50% to the canary', 'routed 0% to the canary']);
    assert.ok(!history.entries.some((e) => /do not route what the rollout set/.test(e.text)), 'no repair at the start');
  });

  for (const bad of [
    { name: 'errors', what: '20% 5xx', traffic: { ...healthy, errorRate: 0.2 }, verdict: /success-rate 2 times in a row: 80 is below the minimum 95/ },
    { name: 'failing', what: '100% 5xx (never held as "no data")', traffic: { ...healthy, errorRate: 1 }, verdict: /success-rate 2 times in a row: 0 is below the minimum 95/ },
    { name: 'slow', what: 'a p99 over the maximum', traffic: { ...healthy, latencyMs: 800 }, verdict: /latency 2 times in a row: .* is above the maximum 500/ },
  ]) {
    it(`a canary with ${bad.what} is rolled back at its first weighted step; traffic is back on stable and the history shows why`, async () => {
      exporter.set(s.ns, `${bad.name}-canary`, bad.traffic);
      await applyAsUser(canaryApp(s.ns, bad.name, { steps: [{ setWeight: 20 }, { setWeight: 50 }, { pause: {} }], analysis: { interval: '3s', metrics } }));
      const app = await waitCanaryPhase(s.ns, bad.name, 'RolledBack', 90_000);
      assert.equal(app.status.canary.reason, 'AnalysisFailed');
      assert.match(app.status.canary.message, bad.verdict);
      await assertSteadyState(s.ns, bad.name);
      assert.deepEqual({ ...readRouteWeights(await virtualService(s.ns, bad.name)) }, { stable: 100, canary: 0, total: 100, headerRoute: false, mirror: 0 });
      const events = await kube(['-n', s.ns, 'get', 'events', '--field-selector', `involvedObject.uid=${app.metadata.uid}`, '-o', 'jsonpath={.items[*].reason}']);
      assert.match(events, /CanaryRolledBack/);
      const history = await finishedRollout(s.ns, bad.name);
      assert.equal(history?.outcome?.phase, 'RolledBack');
      assert.ok(history.entries.some((e) => e.kind === 'analysis' && / vs .*: fail$/.test(e.text)), 'the failing verdict is in the history');
      assert.ok(!history.entries.some((e) => e.kind === 'route' && /routed 50%/.test(e.text)), 'traffic never moved past the first step');
    });
  }

  it('dry-run metrics are judged and recorded, and never decide', async () => {
    exporter.set(s.ns, 'dry-canary', { ...healthy, errorRate: 0.5 });
    await applyAsUser(canaryApp(s.ns, 'dry', {
      steps: [{ setWeight: 30 }, { pause: { duration: '1s' } }],
      analysis: { interval: '3s', metrics: [{ name: 'latency', template: 'request-duration', thresholdRange: { max: 500 } }, { name: 'errors-dry', template: 'request-success-rate', thresholdRange: { min: 99 }, failureLimit: 1, dryRun: true }] },
    }));
    await assertPromoted(s.ns, 'dry', 'nginx:v2');
    const history = await finishedRollout(s.ns, 'dry');
    assert.ok(history.entries.some((e) => e.kind === 'analysis' && e.text === 'errors-dry (dry run): 50 vs >= 99: fail'), 'recorded as failing');
  });

  it('header and mirror steps produce VirtualServices the Istio CRDs accept, and an abort removes them', async () => {
    await applyAsUser(canaryApp(s.ns, 'ab', {
      steps: [{ setWeight: 10 }, { setHeaderRoute: { match: [{ header: 'x-canary', exact: 'yes' }, { cookie: 'beta', exact: 'on' }] } }, { setMirrorRoute: { percentage: 40 } }, { pause: {} }],
    }));
    await waitForObject('header route and mirror in place', () => virtualService(s.ns, 'ab'), (vs) => {
      const w = readRouteWeights(vs);
      return w?.headerRoute === true && w.mirror === 40 && w.canary === 10;
    }, 60_000);
    const vs = await virtualService(s.ns, 'ab');
    assert.deepEqual(vs!.spec.http[0].match, [{ headers: { 'x-canary': { exact: 'yes' }, cookie: { regex: '^(.*?;\\s*)?beta=on(;.*)?$' } } }]);
    assert.deepEqual(vs!.spec.http[1].mirror, { host: `ab.${s.ns}.svc.cluster.local`, subset: 'canary' });
    const app = await waitCanaryPhase(s.ns, 'ab', 'Paused');
    assert.match(app.status.canary.routing, /requests with header x-canary = yes and cookie beta = on, a 40% mirror/);
    await kube(['-n', s.ns, 'patch', 'application', 'ab', '--type=merge', '-p', JSON.stringify({ spec: { serviceMesh: { canary: { enabled: false } } } })]);
    await waitCanaryPhase(s.ns, 'ab', 'Aborted');
    await assertSteadyState(s.ns, 'ab');
    const after = await virtualService(s.ns, 'ab');
    assert.equal(after!.spec.http.length, 1, 'only the stable route is left');
    assert.equal(after!.spec.http[0].mirror, undefined);
  });

  it('every VirtualService written in this file summed to 100 and never routed to a canary without ready pods', async () => {
    const { seen, violations } = await s.routes.stop();
    assert.ok(seen >= 8, `observed ${seen} VirtualService versions`);
    assert.deepEqual(violations, []);
  });
});
