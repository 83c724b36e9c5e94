// Disruptive: SIGKILLs the operator and restarts the run's Temporal server in the middle of rollouts. Each rollout
// must end exactly where it would have without the fault.
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { startServer, stopServer } from '../../stack/stack.ts';
import { control } from '../../client/control.ts';
import { appManifest, closeTemporal, getApp, getDeployment, getObject, kube, temporalClient, waitForObject, type Json } from '../../testkit/apps.ts';
import { readRouteWeights } from '../../render/istio.ts';
import { assertPromoted } from '../../testkit/canary.ts';
import { ownStack } from '../../testkit/env.ts';
import { eventually } from '../../lib/poll.ts';
import { operatorSuite } from '../../testkit/suite.ts';

const apply = (obj: Json) => kube(['apply', '--server-side', '--field-manager=test-user', '--force-conflicts', '-f', '-'], JSON.stringify(obj));
const canaryApp = (ns: string, name: string, canary: Json) => appManifest(ns, name, {
  image: 'nginx:1.25', replicas: 1,
  serviceMesh: { enabled: true, canary: { enabled: true, healthGates: { interval: '1s', failureThreshold: 3, initialDelay: '2s' }, ...canary } },
});

async function canaryPhase(ns: string, name: string): Promise<Json | undefined> {
  return (await getApp(ns, name))?.status?.canary;
}

describe('rollouts survive crashes', () => {
  const s = operatorSuite('crashproof', { routes: true });

  it('SIGKILL during a timed pause: the pause still ends on time and the rollout promotes', async () => {
    await apply(canaryApp(s.ns, 'pause', { canaryVersion: 'v2', steps: [{ setWeight: 20 }, { pause: { duration: '6s' } }, { setWeight: 50 }, { pause: { duration: '1s' } }] }));
    await eventually('paused at step 2', async () => ((await canaryPhase(s.ns, 'pause'))?.phase === 'Paused' ? true : undefined), { timeoutMs: 60_000 });
    await s.op.stop('SIGKILL');
    await sleep(7000);
    await s.op.restart();
    await assertPromoted(s.ns, 'pause', 'nginx:v2');
  });

  it('SIGKILL right after the weight write, before the next gate check: the rollout carries on', async () => {
    await apply(canaryApp(s.ns, 'weight', { canaryVersion: 'v3', steps: [{ setWeight: 30 }, { pause: { duration: '2s' } }] }));
    await eventually('VirtualService at 30%', async () => (readRouteWeights(await getObject('networking.istio.io/v1', 'VirtualService', s.ns, 'weight'))?.canary === 30 ? true : undefined), { intervalMs: 20, timeoutMs: 60_000 });
    await s.op.stop('SIGKILL');
    await sleep(1000);
    await s.op.restart();
    await assertPromoted(s.ns, 'weight', 'nginx:v3');
  });

  it('SIGKILL during promote: the promotion completes', async () => {
    await apply(canaryApp(s.ns, 'promo', { canaryVersion: 'v4', weight: 20 }));
    await eventually('paused for promote', async () => ((await canaryPhase(s.ns, 'promo'))?.phase === 'Paused' ? true : undefined), { timeoutMs: 60_000 });
    await control(await temporalClient(), 'promote', s.ns, 'promo');
    await eventually('promoting', async () => (['Promoting', 'Promoted'].includes((await canaryPhase(s.ns, 'promo'))?.phase) ? true : undefined), { intervalMs: 20 });
    await s.op.stop('SIGKILL');
    await sleep(1000);
    await s.op.restart();
    await assertPromoted(s.ns, 'promo', 'nginx:v4');
  });

  it('SIGKILL after an abort was accepted: the compensation finishes and traffic is back on stable', async () => {
    await apply(canaryApp(s.ns, 'abort', { canaryVersion: 'v5', weight: 40 }));
    await eventually('paused', async () => ((await canaryPhase(s.ns, 'abort'))?.phase === 'Paused' ? true : undefined), { timeoutMs: 60_000 });
    await control(await temporalClient(), 'abort', s.ns, 'abort', 'crash test');
    await s.op.stop('SIGKILL');
    await s.op.restart();
    await waitForObject('aborted', () => getApp(s.ns, 'abort'), (a) => a?.status?.canary?.phase === 'Aborted', 90_000);
    await waitForObject('abort-canary removed', () => getDeployment(s.ns, 'abort-canary'), (d) => d === null);
    const vs = await getObject('networking.istio.io/v1', 'VirtualService', s.ns, 'abort');
    assert.deepEqual({ ...readRouteWeights(vs) }, { stable: 100, canary: 0, total: 100, headerRoute: false, mirror: 0 });
    assert.equal((await getApp(s.ns, 'abort'))!.spec.image, 'nginx:1.25');
  });

  it('a Temporal server restart (same SQLite file) mid-rollout: the rollout promotes', async () => {
    const stack = await ownStack();
    await apply(canaryApp(s.ns, 'temporal', { canaryVersion: 'v6', steps: [{ setWeight: 20 }, { pause: { duration: '5s' } }, { setWeight: 40 }, { pause: { duration: '1s' } }] }));
    await eventually('paused at step 2', async () => ((await canaryPhase(s.ns, 'temporal'))?.phase === 'Paused' ? true : undefined), { timeoutMs: 60_000 });
    await closeTemporal();
    await stopServer(stack, 'temporal', 'SIGKILL');
    await sleep(2000);
    await startServer(stack, 'temporal');
    await assertPromoted(s.ns, 'temporal', 'nginx:v6');
  });

  it('through all of it, every VirtualService summed to 100 and never routed to a canary without ready pods', async () => {
    const { seen, violations } = await s.routes.stop();
    assert.ok(seen >= 10, `observed ${seen} VirtualService versions`);
    assert.deepEqual(violations, []);
  });
});
