// Disruptive: canary analysis while Prometheus is stopped and the operator is SIGKILLed. Inconclusive is never a
// pass, a hold survives a crash, and so does a metric's failure streak.
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { startServer, stopServer } from '../../stack/stack.ts';
import { appManifest, applyAsUser, getApp, waitForObject, type Json } from '../../testkit/apps.ts';
import { assertPromoted, finishedRollout, waitCanaryPhase } from '../../testkit/canary.ts';
import { ownStack } from '../../testkit/env.ts';
import { meshMetricsSuite } from '../fixtures/istio-exporter.ts';

const canaryApp = (ns: string, name: string, canary: Json) => appManifest(ns, name, {
  image: 'nginx:1.25', replicas: 1,
  serviceMesh: { enabled: true, canary: { enabled: true, canaryVersion: 'v2', healthGates: { interval: '1s', initialDelay: '2s' }, ...canary } },
});

describe('analysis under faults', () => {
  const { s, exporter } = meshMetricsSuite('anfaults');

  it('Prometheus stopped: inconclusive, the rollout holds and says so, the hold survives a SIGKILL; Prometheus back: it completes, never promoted blind', async () => {
    const stack = await ownStack();
    exporter.set(s.ns, 'blind-canary', { rps: 20, errorRate: 0, latencyMs: 30 });
    await applyAsUser(canaryApp(s.ns, 'blind', {
      steps: [{ setWeight: 20 }, { setWeight: 50 }, { pause: { duration: '2s' } }],
      analysis: { interval: '2s', metrics: [{ name: 'success-rate', template: 'request-success-rate', thresholdRange: { min: 95 }, inconclusiveLimit: 2 }] },
    }));
    await waitForObject('a passing verdict at 20%', () => getApp(s.ns, 'blind'),
      (a) => (a?.status?.canary?.analysis ?? []).some((v: Json) => v.result === 'pass' && v.weight === 20), 90_000);
    await stopServer(stack, 'prometheus');
    try {
      const held = await waitForObject('held: analysis inconclusive', () => getApp(s.ns, 'blind'),
        (a) => a?.status?.canary?.phase === 'Paused' && /analysis inconclusive, holding: success-rate inconclusive 2 times in a row: Prometheus at .* unreachable/.test(a.status.canary.message), 60_000);
      assert.equal(held!.spec.image, 'nginx:1.25', 'not promoted while blind');
      const weight = held!.status.canary.weight;
      await s.op.stop('SIGKILL');
      await sleep(3000);
      await s.op.restart();
      await sleep(6000);
      const still = await getApp(s.ns, 'blind');
      assert.equal(still!.status.canary.phase, 'Paused', 'the hold survived the crash');
      assert.match(still!.status.canary.message, /analysis inconclusive/);
      assert.equal(still!.status.canary.weight, weight, 'no traffic moved while blind');
      assert.equal(still!.spec.image, 'nginx:1.25');
    } finally {
      await startServer(stack, 'prometheus');
    }
    await assertPromoted(s.ns, 'blind', 'nginx:v2', 180_000);
    const history = await finishedRollout(s.ns, 'blind');
    const at = (re: RegExp) => history.entries.find((e) => re.test(e.text))?.at ?? '';
    assert.ok(at(/analysis answers again/) !== '', 'the history tells the recovery');
    assert.ok(at(/^Promoting:/) > at(/analysis answers again/), 'promoted only after the analysis could see again');
  });

  it('the operator SIGKILLed between failing analyses: the failure streak survives (rolled back at failureLimit, not later)', async () => {
    exporter.set(s.ns, 'streak-canary', { rps: 20, errorRate: 0.3, latencyMs: 30 });
    await applyAsUser(canaryApp(s.ns, 'streak', {
      steps: [{ setWeight: 20 }, { pause: {} }],
      analysis: { interval: '4s', metrics: [{ name: 'success-rate', template: 'request-success-rate', thresholdRange: { min: 95 }, failureLimit: 3, inconclusiveLimit: 10 }] },
    }));
    await waitForObject('a first failing verdict', () => getApp(s.ns, 'streak'),
      (a) => (a?.status?.canary?.analysis ?? []).some((v: Json) => v.result === 'fail'), 90_000);
    await s.op.stop('SIGKILL');
    await sleep(1000);
    await s.op.restart();
    const app = await waitCanaryPhase(s.ns, 'streak', 'RolledBack', 90_000);
    assert.match(app.status.canary.message, /analysis failed: success-rate 3 times in a row/);
    const fails = (app.status.canary.analysis as Json[]).filter((v) => v.result === 'fail');
    assert.equal(fails.length, 3, `rolled back at the third failure in a row, counting the one before the crash (verdicts: ${JSON.stringify(app.status.canary.analysis.map((v: Json) => v.result))})`);
  });
});
