// Canary analysis against the real Prometheus of the stack: a test exporter plays Istio's sidecars (request counts
// and durations for the stable and canary workloads at the rates the test sets), Prometheus scrapes it, and the
// operator's analysis queries Prometheus through the built-in templates.
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { readRouteWeights } from '../../render/istio.ts';
import { appManifest, applyAsUser, getApp, kube, waitForObject, type Json } from '../../testkit/apps.ts';
import { assertPromoted, assertSteadyState, finishedRollout, virtualService, waitCanaryPhase } from '../../testkit/canary.ts';
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
    assert.ok(history.entries.some((e) => e.kind === 'analysis' && /^success-rate: pass: 100 is within the minimum 95/.test(e.text)), 'history tells the verdicts');
    assert.ok(history.entries.some((e) => e.kind === 'analysis' && /^latency: pass: .* is within the maximum 500/.test(e.text)));
    const routed = history.entries.filter((e) => e.kind === 'route').map((e) => e.text);
    assert.deepEqual(routed, ['routed 0% to the canary', 'routed 20% to the canary', 'routed 50% to the canary', 'routed 0% to the canary']);
  });

  for (const bad of [
    { name: 'errors', traffic: { ...healthy, errorRate: 0.2 }, verdict: /success-rate 2 times in a row: 80 is below the minimum 95/ },
    { name: 'slow', traffic: { ...healthy, latencyMs: 800 }, verdict: /latency 2 times in a row: .* is above the maximum 500/ },
  ]) {
    it(`a canary with ${bad.name === 'errors' ? '20% 5xx' : 'a p99 over the maximum'} is rolled back at its first weighted step; traffic is back on stable and the history shows why`, async () => {
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
      assert.ok(history.entries.some((e) => e.kind === 'analysis' && /: fail: /.test(e.text)), 'the failing verdict is in the history');
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
    assert.ok(history.entries.some((e) => e.kind === 'analysis' && /^errors-dry \(dry run\): fail: 50 is below the minimum 99/.test(e.text)), 'recorded as failing');
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
