import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { parseApplication } from '../../api/application.ts';
import { valueOf } from '../../activities/metrics.ts';
import { analysisPlan, renderQuery, templates } from '../../reconcile/analysis.ts';
import { describeRange, judge, tally, type MetricTally } from '../../workflows/rollout/analysis.ts';
import type { AnalysisMetric } from '../../workflows/rollout/plan.ts';
import { UID } from '../fixtures/applications.ts';

const vars = { namespace: 'shop', name: 'cart', canaryVersion: 'v2', stableVersion: 'stable', canaryWorkload: 'cart-canary', stableWorkload: 'cart', interval: '30s' };

describe('query templating', () => {
  test('every variable is written out', () => {
    assert.equal(renderQuery('{{namespace}}/{{name}} {{canaryVersion}} {{stableVersion}} {{canaryWorkload}} {{stableWorkload}} [{{interval}}]', vars),
      'shop/cart v2 stable cart-canary cart [30s]');
  });
  test('an unknown variable is left as written (the CRD refuses it before)', () => assert.equal(renderQuery('{{nope}} {{name}}', vars), '{{nope}} cart'));
  test('request-success-rate on Istio telemetry for the canary workload', () => {
    assert.equal(renderQuery(templates['request-success-rate']!, vars),
      '100 * sum(rate(istio_requests_total{reporter="destination", destination_workload_namespace="shop", destination_workload="cart-canary", response_code!~"5.."}[30s])) / sum(rate(istio_requests_total{reporter="destination", destination_workload_namespace="shop", destination_workload="cart-canary"}[30s]))');
  });
  test('request-duration: p99 from the duration histogram', () => {
    assert.equal(renderQuery(templates['request-duration']!, vars),
      'histogram_quantile(0.99, sum(rate(istio_request_duration_milliseconds_bucket{reporter="destination", destination_workload_namespace="shop", destination_workload="cart-canary"}[30s])) by (le))');
  });
  test('the plan carries each query written out, the ranges and the limits', () => {
    const parsed = parseApplication({
      apiVersion: 'myapp.example.com/v1', kind: 'Application', metadata: { name: 'cart', namespace: 'shop', uid: UID },
      spec: {
        image: 'cart:1', serviceMesh: {
          enabled: true, canary: {
            enabled: true, canaryVersion: 'v2', analysis: {
              interval: '1m', prometheusAddress: 'http://prom:9090', metrics: [
                { name: 'ok', template: 'request-success-rate', thresholdRange: { min: 99 } },
                { name: 'errors', query: 'sum(rate(errors_total{app="{{name}}",version="{{canaryVersion}}"}[{{interval}}]))', thresholdRange: { max: 1 }, failureLimit: 1, inconclusiveLimit: 5, dryRun: true },
              ],
            },
          },
        },
      },
    });
    assert.ok(parsed.ok, parsed.ok ? '' : parsed.message);
    const a = parsed.app.spec.serviceMesh!.canary!.analysis!;
    const plan = analysisPlan(a, { namespace: 'shop', name: 'cart', canaryVersion: 'v2' });
    assert.equal(plan.intervalMs, 60_000);
    assert.equal(plan.prometheusAddress, 'http://prom:9090');
    assert.deepEqual(plan.metrics[0], { name: 'ok', query: renderQuery(templates['request-success-rate']!, { ...vars, interval: '1m' }), template: 'request-success-rate', range: { min: 99 }, failureLimit: 2, inconclusiveLimit: 3, dryRun: false });
    assert.deepEqual(plan.metrics[1], { name: 'errors', query: 'sum(rate(errors_total{app="cart",version="v2"}[1m]))', range: { max: 1 }, failureLimit: 1, inconclusiveLimit: 5, dryRun: true });
  });
});

const metric = (over: Partial<AnalysisMetric> = {}): AnalysisMetric => ({ name: 'm', query: 'q', range: { min: 99 }, failureLimit: 2, inconclusiveLimit: 3, dryRun: false, ...over });

describe('judge', () => {
  const cases: { name: string; range: AnalysisMetric['range']; value: number | null; result: string; message: RegExp }[] = [
    { name: 'inside a minimum', range: { min: 99 }, value: 99.5, result: 'pass', message: /99.5 is within the minimum 99/ },
    { name: 'at the minimum passes', range: { min: 99 }, value: 99, result: 'pass', message: /within/ },
    { name: 'below a minimum', range: { min: 99 }, value: 80, result: 'fail', message: /80 is below the minimum 99/ },
    { name: 'above a maximum', range: { max: 500 }, value: 812.3456, result: 'fail', message: /812.346 is above the maximum 500/ },
    { name: 'inside a range', range: { min: 1, max: 2 }, value: 1.5, result: 'pass', message: /within the range 1..2/ },
    { name: 'no value is inconclusive, never a pass', range: { min: 0 }, value: null, result: 'inconclusive', message: /no data/ },
  ];
  for (const c of cases) {
    test(c.name, () => {
      const v = judge(metric({ range: c.range }), { name: 'm', value: c.value, ...(c.value === null ? { error: 'no data' } : {}) }, 'T', 20);
      assert.equal(v.result, c.result);
      assert.match(v.message, c.message);
      assert.equal(v.weight, 20);
      assert.equal(v.query, 'q');
    });
  }
  test('describeRange', () => assert.equal(describeRange({ max: 3 }), 'the maximum 3'));
});

describe('tally', () => {
  const metrics = [metric({ name: 'a' }), metric({ name: 'b', failureLimit: 1, inconclusiveLimit: 2 }), metric({ name: 'dry', dryRun: true, failureLimit: 1 })];
  const v = (name: string, result: 'pass' | 'fail' | 'inconclusive') => ({ metric: name, result, at: 'T', range: {}, query: 'q', message: result, weight: 10 });
  const run = (t: Record<string, MetricTally>, results: Record<string, 'pass' | 'fail' | 'inconclusive'>) => tally(t, Object.entries(results).map(([k, r]) => v(k, r)), metrics);

  test('all deciding metrics pass: pass (a dry run failing does not matter)', () => assert.deepEqual(run({}, { a: 'pass', b: 'pass', dry: 'fail' }).decision, { kind: 'pass' }));
  test('one failure below its limit: not decided yet', () => assert.deepEqual(run({}, { a: 'fail', b: 'pass' }).decision, { kind: 'pending' }));
  test('failureLimit failures in a row: fail, naming the metric', () => {
    const first = run({}, { a: 'fail', b: 'pass' });
    const second = run(first.tallies, { a: 'fail', b: 'pass' });
    assert.equal(second.decision.kind, 'fail');
    assert.equal(second.decision.kind === 'fail' && second.decision.verdict.metric, 'a');
  });
  test('a pass breaks a failure streak', () => {
    const t = run(run(run({}, { a: 'fail' }).tallies, { a: 'pass' }).tallies, { a: 'fail' });
    assert.equal(t.decision.kind, 'pending');
    assert.equal(t.tallies['a']?.failures, 1);
  });
  test('an inconclusive result neither breaks nor adds to a failure streak', () => {
    const t = run(run(run({}, { a: 'fail' }).tallies, { a: 'inconclusive' }).tallies, { a: 'fail' });
    assert.equal(t.decision.kind, 'fail');
  });
  test('inconclusiveLimit inconclusive results in a row: blind', () => {
    const t = run(run({}, { a: 'pass', b: 'inconclusive' }).tallies, { a: 'pass', b: 'inconclusive' });
    assert.equal(t.decision.kind, 'blind');
  });
  test('a conclusive result resets the inconclusive streak', () => {
    const t = run(run(run({}, { b: 'inconclusive' }).tallies, { b: 'pass' }).tallies, { b: 'inconclusive' });
    assert.equal(t.decision.kind, 'pending');
  });
  test('a dry run never decides, however often it fails', () => {
    let t = run({}, { a: 'pass', b: 'pass', dry: 'fail' });
    t = run(t.tallies, { a: 'pass', b: 'pass', dry: 'fail' });
    assert.deepEqual(t.decision, { kind: 'pass' });
    assert.equal(t.tallies['dry'], undefined);
  });
});

describe('valueOf: one number from an instant query', () => {
  const cases: { name: string; data: any; value: number | null; error?: RegExp }[] = [
    { name: 'one sample', data: { resultType: 'vector', result: [{ metric: {}, value: [1, '99.5'] }] }, value: 99.5 },
    { name: 'a scalar', data: { resultType: 'scalar', result: [1, '3'] }, value: 3 },
    { name: 'no series: no data', data: { resultType: 'vector', result: [] }, value: null, error: /no data/ },
    { name: 'NaN (0/0): no data', data: { resultType: 'vector', result: [{ metric: {}, value: [1, 'NaN'] }] }, value: null, error: /no data.*NaN/ },
    { name: 'two series: it must return one', data: { resultType: 'vector', result: [{ value: [1, '1'] }, { value: [1, '2'] }] }, value: null, error: /2 series/ },
    { name: 'a matrix', data: { resultType: 'matrix', result: [] }, value: null, error: /matrix/ },
  ];
  for (const c of cases) {
    test(c.name, () => {
      const r = valueOf(c.data);
      assert.equal(r.value, c.value);
      if (c.error) assert.match(r.error ?? '', c.error);
    });
  }
});
