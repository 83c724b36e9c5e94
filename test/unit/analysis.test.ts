import assert from 'node:assert/strict';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { after, before, describe, test } from 'node:test';
import { parseApplication } from '../../api/application.ts';
import { queryMetrics, valueOf } from '../../activities/metrics.ts';
import { parseHostAllowlist } from '../../reconcile/checks.ts';
import type { AnalysisVerdict, MetricValue } from '../../activities/types.ts';
import { analysisPlan, renderQuery, templates } from '../../reconcile/analysis.ts';
import { describeRange, judge, keepPerMetric, lastVerdicts, tally, type MetricTally } from '../../workflows/rollout/analysis.ts';
import type { AnalysisMetric } from '../../reconcile/plan.ts';
import { UID } from '../fixtures/applications.ts';

const vars = { namespace: 'shop', name: 'cart', canaryVersion: 'v2', stableVersion: 'stable', canaryWorkload: 'cart-canary', stableWorkload: 'cart', interval: '30s' };

describe('query templating', () => {
  test('every variable is written out', () => {
    assert.equal(renderQuery('{{namespace}}/{{name}} {{canaryVersion}} {{stableVersion}} {{canaryWorkload}} {{stableWorkload}} [{{interval}}]', vars),
      'shop/cart v2 stable cart-canary cart [30s]');
  });
  test('an unknown variable is left as written (the CRD refuses it before)', () => assert.equal(renderQuery('{{nope}} {{name}}', vars), '{{nope}} cart'));
  // What these queries answer on real series (a canary failing every request, none reaching it, no histogram) is
  // proven against the stack's Prometheus in test/integration/analysis.test.ts.
  const canary = 'reporter="destination", destination_workload_namespace="shop", destination_workload="cart-canary"';
  const requested = `sum(rate(istio_requests_total{${canary}}[30s])) > 0`;
  test('request-success-rate on Istio telemetry for the canary workload: 0 when no non-5xx series exists, nothing without requests', () => {
    assert.equal(renderQuery(templates['request-success-rate']!, vars),
      `100 * (sum(rate(istio_requests_total{${canary}, response_code!~"5.."}[30s])) or vector(0)) / (${requested})`);
  });
  test('request-duration: p99 from the duration histogram, only while requests reach the canary, NaN when they do but no durations were reported', () => {
    assert.equal(renderQuery(templates['request-duration']!, vars),
      `(histogram_quantile(0.99, sum by (le) (rate(istio_request_duration_milliseconds_bucket{${canary}}[30s]))) and on() (${requested})) or on() ((${requested}) * NaN)`);
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
  const template = { template: 'request-success-rate' };
  const duration = { template: 'request-duration' };
  const answer = (a: Partial<MetricValue>): MetricValue => ({ name: 'm', value: null, ...a });
  const cases: { name: string; metric?: Partial<AnalysisMetric>; answer: MetricValue; result: AnalysisVerdict['result']; value?: number; message: RegExp }[] = [
    { name: 'inside a minimum', metric: { range: { min: 99 } }, answer: answer({ value: 99.5 }), result: 'pass', value: 99.5, message: /^99.5 is within the minimum 99$/ },
    { name: 'at the minimum passes', metric: { range: { min: 99 } }, answer: answer({ value: 99 }), result: 'pass', value: 99, message: /within/ },
    { name: 'below a minimum', metric: { range: { min: 99 } }, answer: answer({ value: 80 }), result: 'fail', value: 80, message: /^80 is below the minimum 99$/ },
    { name: 'a success rate of 0 (every request failed) is a fail', metric: { ...template, range: { min: 99 } }, answer: answer({ value: 0 }), result: 'fail', value: 0, message: /^0 is below the minimum 99$/ },
    { name: 'above a maximum', metric: { range: { max: 500 } }, answer: answer({ value: 812.3456 }), result: 'fail', value: 812.3456, message: /^812.346 is above the maximum 500$/ },
    { name: 'inside a range', metric: { range: { min: 1, max: 2 } }, answer: answer({ value: 1.5 }), result: 'pass', value: 1.5, message: /within the range 1..2/ },
    { name: 'a template with no series: no request reached the canary', metric: template, answer: answer({ noSeries: true }), result: 'inconclusive', message: /^no data: no request reached the canary in the interval$/ },
    { name: 'a query with no series: no data, and no guess why', answer: answer({ noSeries: true }), result: 'inconclusive', message: /^no data: the query matched no series$/ },
    { name: 'NaN from a query is no pass, and says so', metric: { range: { min: 0 } }, answer: answer({ nonFinite: 'NaN' }), result: 'inconclusive', message: /^the query returned NaN, not a number \(a 0\/0.*\): neither a pass nor a fail$/ },
    { name: 'NaN from request-duration: requests without durations', metric: { ...duration, range: { max: 500 } }, answer: answer({ nonFinite: 'NaN' }), result: 'inconclusive', message: /^NaN: requests reached the canary but Istio reported no durations for them/ },
    { name: '+Inf above a maximum is a fail', metric: { range: { max: 0.01 } }, answer: answer({ nonFinite: '+Inf' }), result: 'fail', message: /^\+Inf \(a division by zero\) is above the maximum 0.01$/ },
    { name: '+Inf over a minimum is a pass', metric: { range: { min: 50 } }, answer: answer({ nonFinite: '+Inf' }), result: 'pass', message: /^\+Inf \(a division by zero\) is within the minimum 50$/ },
    { name: '-Inf below a minimum is a fail', metric: { range: { min: 0 } }, answer: answer({ nonFinite: '-Inf' }), result: 'fail', message: /^-Inf \(a division by zero\) is below the minimum 0$/ },
    { name: 'an error is inconclusive with the error', answer: answer({ error: 'Prometheus at http://p unreachable: ECONNREFUSED' }), result: 'inconclusive', message: /^Prometheus at http:\/\/p unreachable: ECONNREFUSED$/ },
    { name: 'an answer recorded before noSeries existed keeps its message', metric: template, answer: answer({ error: 'no data: the query matched no series (no requests to the canary yet?)' }), result: 'inconclusive', message: /^no data: the query matched no series/ },
  ];
  for (const c of cases) {
    test(c.name, () => {
      const v = judge(metric(c.metric), c.answer, 'T', 20);
      assert.equal(v.result, c.result);
      assert.match(v.message, c.message);
      assert.equal(v.value, c.value, 'only a finite value is recorded (status and history are JSON)');
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
  const vector = (...values: string[]) => ({ resultType: 'vector', result: values.map((v) => ({ metric: {}, value: [1, v] })) });
  const cases: { name: string; data: any; answer: Omit<MetricValue, 'name' | 'error'>; error?: RegExp }[] = [
    { name: 'one sample', data: vector('99.5'), answer: { value: 99.5 } },
    { name: 'zero is a value', data: vector('0'), answer: { value: 0 } },
    { name: 'a scalar', data: { resultType: 'scalar', result: [1, '3'] }, answer: { value: 3 } },
    { name: 'no series', data: vector(), answer: { value: null, noSeries: true } },
    { name: 'NaN (0/0), as Prometheus writes it', data: vector('NaN'), answer: { value: null, nonFinite: 'NaN' } },
    { name: '+Inf (x/0)', data: vector('+Inf'), answer: { value: null, nonFinite: '+Inf' } },
    { name: '-Inf', data: { resultType: 'scalar', result: [1, '-Inf'] }, answer: { value: null, nonFinite: '-Inf' } },
    { name: 'two series: it must return one', data: vector('1', '2'), answer: { value: null }, error: /2 series/ },
    { name: 'a matrix', data: { resultType: 'matrix', result: [] }, answer: { value: null }, error: /matrix/ },
    { name: 'a sample that is no number at all', data: vector('x'), answer: { value: null }, error: /"x", which is no number/ },
  ];
  for (const c of cases) {
    test(c.name, () => {
      const { error, ...r } = valueOf(c.data);
      assert.deepEqual(r, c.answer);
      if (c.error) assert.match(error ?? '', c.error);
      else assert.equal(error, undefined);
    });
  }
});

describe('queryMetrics: the request to Prometheus (servers on 127.0.0.1)', () => {
  const servers: Server[] = [];
  const serve = async (handler: Parameters<typeof createServer>[1]) => {
    const server = createServer(handler);
    servers.push(server);
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    return `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  };
  let elsewhere = '';
  const asked: string[] = [];
  before(async () => {
    // What a redirect would lead to: a Prometheus-like answer of 42 the operator must never take.
    elsewhere = await serve((req, res) => {
      asked.push(req.url ?? '');
      res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ status: 'success', data: { resultType: 'scalar', result: [1, '42'] } }));
    });
  });
  after(() => {
    for (const s of servers) s.close();
  });
  const query = [{ name: 'rate', query: 'sum(rate(x[1m]))' }];

  test('a redirect is not followed: the address allowed is the one asked, and the answer says where it pointed', async () => {
    // An allowed Prometheus behind a login proxy, or a path of the allowed host that redirects anywhere: following
    // it would send the query (and its answer would decide the rollout) from wherever --check-allowed-hosts says not.
    const login = await serve((_req, res) => res.writeHead(302, { location: `${elsewhere}/api/v1/query?query=1` }).end('moved'));
    const [answer] = await queryMetrics({ checkAllowedHosts: parseHostAllowlist('127.0.0.0/8') }, { namespace: 'shop', name: 'cart', address: login, queries: query });
    assert.equal(answer!.value, null);
    assert.match(answer!.error ?? '', new RegExp(`^Prometheus at ${login} answered 302, a redirect \\(not followed\\) to ${elsewhere.replace(/[.]/g, '\\.')}/api/v1/query$`));
    assert.deepEqual(asked, []);
  });

  test('an answer that is not JSON names the status and the start of the body', async () => {
    const html = await serve((_req, res) => res.writeHead(503).end('<html>down for maintenance</html>'));
    const [answer] = await queryMetrics({}, { namespace: 'shop', name: 'cart', address: html, queries: query });
    assert.equal(answer!.error, `Prometheus at ${html} answered 503: <html>down for maintenance</html>`);
  });

  test('a JSON answer is read (the address may end with a slash)', async () => {
    const [answer] = await queryMetrics({}, { namespace: 'shop', name: 'cart', address: `${elsewhere}/`, queries: query });
    assert.deepEqual(answer, { name: 'rate', value: 42 });
    assert.match(asked.at(-1) ?? '', /^\/api\/v1\/query\?query=sum%28rate%28x%5B1m%5D%29%29$/);
  });
});

describe('verdicts kept and shown', () => {
  const v = (metric: string, i: number, result: 'pass' | 'fail' | 'inconclusive' = 'pass') =>
    ({ metric, at: `t${i}`, result, message: '', range: { min: 99 }, query: 'q', weight: 10, ...(result === 'inconclusive' ? {} : { value: 90 + i }) });
  test('the newest few of each metric, however many metrics', () => {
    const all = [...Array.from({ length: 8 }, (_, i) => v('a', i)), v('b', 0), v('c', 0), v('c', 1)];
    const kept = keepPerMetric(all, 3);
    assert.deepEqual(kept.map((x) => `${x.metric}${x.at}`), ['at5', 'at6', 'at7', 'bt0', 'ct0', 'ct1']);
  });
  test('the last verdict of each metric in one line', () => {
    assert.deepEqual(lastVerdicts([v('a', 0), v('b', 1, 'inconclusive'), v('a', 9, 'fail')]), ['a: 99 vs the minimum 99: fail', 'b: no value vs the minimum 99: inconclusive']);
  });
});
