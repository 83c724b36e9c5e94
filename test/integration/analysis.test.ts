// Canary analysis against the real Prometheus of the stack: a test exporter plays Istio's sidecars (request counts
// and durations for the stable and canary workloads at the rates the test sets), Prometheus scrapes it, and the
// operator's analysis queries Prometheus through the built-in templates.
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { rolloutHistory } from '../../client/history.ts';
import { readRouteWeights } from '../../render/istio.ts';
import { addScrapeTarget, removeScrapeTarget } from '../../stack/stack.ts';
import { appManifest, applyAsUser, closeTemporal, getApp, kube, temporalClient, testNamespace, waitForObject, type Json } from '../../testkit/apps.ts';
import { assertPromoted, assertSteadyState, virtualService, waitCanaryPhase } from '../../testkit/canary.ts';
import { ownStack } from '../../testkit/env.ts';
import { startOperator, type OperatorProcess } from '../../testkit/operator.ts';
import { recordRoutes } from '../../testkit/routes.ts';
import { IstioExporter } from '../fixtures/istio-exporter.ts';

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
  let ns: { name: string; cleanup: () => Promise<void> };
  let op: OperatorProcess;
  let routes: ReturnType<typeof recordRoutes>;
  const exporter = new IstioExporter();
  const job = `istio-${process.pid}`;

  before(async () => {
    ns = await testNamespace('analysis');
    await exporter.start();
    await addScrapeTarget(await ownStack(), { job, targets: [`127.0.0.1:${exporter.port}`] });
    op = await startOperator({ namespaces: [ns.name] });
    routes = recordRoutes(ns.name);
  });
  after(async () => {
    await op?.stop();
    await closeTemporal();
    await removeScrapeTarget(await ownStack(), job).catch(() => undefined);
    await exporter.stop();
    await ns?.cleanup();
  });

  it('a healthy canary walks its steps on passing analyses and is promoted; the verdicts are in status and in the history', async () => {
    exporter.set(ns.name, 'good-canary', healthy);
    await applyAsUser(canaryApp(ns.name, 'good', {
      steps: [{ setWeight: 20 }, { pause: { duration: '2s' } }, { setWeight: 50 }, { pause: { duration: '2s' } }],
      analysis: { interval: '3s', metrics },
    }));
    const passed = await waitForObject('a passing verdict in status', () => getApp(ns.name, 'good'),
      (a) => (a?.status?.canary?.analysis ?? []).some((v: Json) => v.metric === 'success-rate' && v.result === 'pass'), 90_000);
    const verdict = passed!.status.canary.analysis.find((v: Json) => v.metric === 'success-rate' && v.result === 'pass');
    assert.ok(Math.abs(verdict.value - 100) < 1e-6, `success rate ${verdict.value}`);
    assert.deepEqual(verdict.range, { min: 95 });
    assert.match(verdict.query, new RegExp(`destination_workload_namespace="${ns.name}", destination_workload="good-canary"`));
    await assertPromoted(ns.name, 'good', 'nginx:v2');
    const [history] = await rolloutHistory(await temporalClient(), ns.name, 'good');
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
      exporter.set(ns.name, `${bad.name}-canary`, bad.traffic);
      await applyAsUser(canaryApp(ns.name, bad.name, { steps: [{ setWeight: 20 }, { setWeight: 50 }, { pause: {} }], analysis: { interval: '3s', metrics } }));
      const app = await waitCanaryPhase(ns.name, bad.name, 'RolledBack', 90_000);
      assert.equal(app.status.canary.reason, 'AnalysisFailed');
      assert.match(app.status.canary.message, bad.verdict);
      await assertSteadyState(ns.name, bad.name);
      assert.deepEqual({ ...readRouteWeights(await virtualService(ns.name, bad.name)) }, { stable: 100, canary: 0, total: 100, headerRoute: false, mirror: 0 });
      const events = await kube(['-n', ns.name, 'get', 'events', '--field-selector', `involvedObject.uid=${app.metadata.uid}`, '-o', 'jsonpath={.items[*].reason}']);
      assert.match(events, /CanaryRolledBack/);
      const [history] = await rolloutHistory(await temporalClient(), ns.name, bad.name);
      assert.equal(history?.outcome?.phase, 'RolledBack');
      assert.ok(history.entries.some((e) => e.kind === 'analysis' && /: fail: /.test(e.text)), 'the failing verdict is in the history');
      assert.ok(!history.entries.some((e) => e.kind === 'route' && /routed 50%/.test(e.text)), 'traffic never moved past the first step');
    });
  }

  it('dry-run metrics are judged and recorded, and never decide', async () => {
    exporter.set(ns.name, 'dry-canary', { ...healthy, errorRate: 0.5 });
    await applyAsUser(canaryApp(ns.name, 'dry', {
      steps: [{ setWeight: 30 }, { pause: { duration: '1s' } }],
      analysis: { interval: '3s', metrics: [{ name: 'latency', template: 'request-duration', thresholdRange: { max: 500 } }, { name: 'errors-dry', template: 'request-success-rate', thresholdRange: { min: 99 }, failureLimit: 1, dryRun: true }] },
    }));
    await assertPromoted(ns.name, 'dry', 'nginx:v2');
    const [history] = await rolloutHistory(await temporalClient(), ns.name, 'dry');
    assert.ok(history!.entries.some((e) => e.kind === 'analysis' && /^errors-dry \(dry run\): fail: 50 is below the minimum 99/.test(e.text)), 'recorded as failing');
  });

  it('header and mirror steps produce VirtualServices the Istio CRDs accept, and an abort removes them', async () => {
    await applyAsUser(canaryApp(ns.name, 'ab', {
      steps: [{ setWeight: 10 }, { setHeaderRoute: { match: [{ header: 'x-canary', exact: 'yes' }, { cookie: 'beta', exact: 'on' }] } }, { setMirrorRoute: { percentage: 40 } }, { pause: {} }],
    }));
    await waitForObject('header route and mirror in place', () => virtualService(ns.name, 'ab'), (vs) => {
      const w = readRouteWeights(vs);
      return w?.headerRoute === true && w.mirror === 40 && w.canary === 10;
    }, 60_000);
    const vs = await virtualService(ns.name, 'ab');
    assert.deepEqual(vs!.spec.http[0].match, [{ headers: { 'x-canary': { exact: 'yes' }, cookie: { regex: '^(.*?;\\s*)?beta=on(;.*)?$' } } }]);
    assert.deepEqual(vs!.spec.http[1].mirror, { host: `ab.${ns.name}.svc.cluster.local`, subset: 'canary' });
    const app = await waitCanaryPhase(ns.name, 'ab', 'Paused');
    assert.match(app.status.canary.routing, /requests with header x-canary = yes and cookie beta = on, a 40% mirror/);
    await kube(['-n', ns.name, 'patch', 'application', 'ab', '--type=merge', '-p', JSON.stringify({ spec: { serviceMesh: { canary: { enabled: false } } } })]);
    await waitCanaryPhase(ns.name, 'ab', 'Aborted');
    await assertSteadyState(ns.name, 'ab');
    const after = await virtualService(ns.name, 'ab');
    assert.equal(after!.spec.http.length, 1, 'only the stable route is left');
    assert.equal(after!.spec.http[0].mirror, undefined);
  });

  it('every VirtualService written in this file summed to 100 and never routed to a canary without ready pods', async () => {
    const { seen, violations } = await routes.stop();
    assert.ok(seen >= 8, `observed ${seen} VirtualService versions`);
    assert.deepEqual(violations, []);
  });
});
