// Disruptive: blue-green rollouts without a mesh (the Service's selector switches) while the operator is SIGKILLed
// and the run's Temporal server restarted at each boundary: before the switch, in the switch-back window, during the
// undoing of an abort. Each rollout must end exactly where it would have without the fault, and the Service must
// never select pods that are not ready (a switch to a preview with none, or back to a stable Deployment with none).
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { control } from '../../client/control.ts';
import { eventually } from '../../lib/poll.ts';
import { startServer, stopServer } from '../../stack/stack.ts';
import { appManifest, closeTemporal, getApp, getDeployment, getObject, kube, temporalClient, waitForObject, type Json } from '../../testkit/apps.ts';
import { waitCanaryPhase } from '../../testkit/canary.ts';
import { ownStack } from '../../testkit/env.ts';
import { operatorSuite } from '../../testkit/suite.ts';

const apply = (obj: Json) => kube(['apply', '--server-side', '--field-manager=test-user', '--force-conflicts', '-f', '-'], JSON.stringify(obj));
const blueGreenApp = (ns: string, name: string, version: string, blueGreen: Json) => appManifest(ns, name, {
  image: 'nginx:1.25', replicas: 2,
  serviceMesh: { canary: { enabled: true, canaryVersion: version, strategy: 'blueGreen', blueGreen, healthGates: { interval: '1s', failureThreshold: 3, initialDelay: '2s' } } },
});
const selectorOf = async (ns: string, name: string) => ((await getObject('v1', 'Service', ns, name)))?.spec?.selector?.version as string | undefined;
const phaseOf = async (ns: string, name: string) => (await getApp(ns, name))?.status?.canary?.phase as string | undefined;

/** Promoted, blue-green style: the stable Deployment runs the new image, the Service selects it again, the preview is gone. */
async function assertSwitchedAndSettled(ns: string, name: string, image: string): Promise<void> {
  const app = await waitCanaryPhase(ns, name, 'Promoted', 120_000);
  assert.equal(app.spec.image, image);
  assert.equal(app.spec.serviceMesh.canary.enabled, false);
  assert.equal((await getDeployment(ns, name))!.spec.template.spec.containers[0].image, image);
  await waitForObject(`${name}-canary removed`, () => getDeployment(ns, `${name}-canary`), (d) => d === null);
  await waitForObject(`${name}-preview removed`, () => getObject('v1', 'Service', ns, `${name}-preview`), (svc) => svc === null, 60_000);
  // The reconciler takes its Service back once the rollout is over, pinning the stable pods as the rollout left it
  // (the preview's pods may outlive its Deployment a moment: a selector of every version would take them).
  await eventually('the Service pins the stable pods', async () => ((await selectorOf(ns, name)) === 'stable' ? true : undefined), { timeoutMs: 60_000 });
}

describe('blue-green rollouts survive crashes', () => {
  const s = operatorSuite('bgcrash');

  it('SIGKILL while the preview waits for its auto-promotion: the switch still comes, and the rollout ends promoted', async () => {
    await apply(blueGreenApp(s.ns, 'auto', 'v2', { autoPromotionSeconds: 6, scaleDownDelaySeconds: 2 }));
    await eventually('waiting for the switch', async () => ((await phaseOf(s.ns, 'auto')) === 'Paused' ? true : undefined), { timeoutMs: 90_000 });
    assert.equal(await selectorOf(s.ns, 'auto'), 'stable', 'the Service pins the stable pods while the preview runs');
    await s.op.stop('SIGKILL');
    await sleep(7000);
    await s.op.restart();
    await assertSwitchedAndSettled(s.ns, 'auto', 'nginx:v2');
  });

  it('SIGKILL in the switch-back window: the window ends and the rollout promotes', async () => {
    await apply(blueGreenApp(s.ns, 'window', 'v3', { autoPromotionSeconds: 0, scaleDownDelaySeconds: 8 }));
    await eventually('switched', async () => ((await selectorOf(s.ns, 'window')) === 'v3' ? true : undefined), { intervalMs: 50, timeoutMs: 90_000 });
    await s.op.stop('SIGKILL');
    await sleep(2000);
    assert.equal(await selectorOf(s.ns, 'window'), 'v3', 'with the operator down, traffic stays where the rollout put it');
    await s.op.restart();
    await assertSwitchedAndSettled(s.ns, 'window', 'nginx:v3');
  });

  it('SIGKILL right after an abort in the switch-back window: the switch-back finishes, the old version untouched', async () => {
    await apply(blueGreenApp(s.ns, 'back', 'v4', { autoPromotionSeconds: 0, scaleDownDelaySeconds: 300 }));
    await eventually('switched', async () => ((await selectorOf(s.ns, 'back')) === 'v4' ? true : undefined), { intervalMs: 50, timeoutMs: 90_000 });
    await control(await temporalClient(), 'abort', s.ns, 'back', 'crash test');
    await s.op.stop('SIGKILL');
    await s.op.restart();
    await waitForObject('aborted', () => getApp(s.ns, 'back'), (a) => a?.status?.canary?.phase === 'Aborted', 90_000);
    await waitForObject('back-canary removed', () => getDeployment(s.ns, 'back-canary'), (d) => d === null);
    assert.notEqual(await selectorOf(s.ns, 'back'), 'v4', 'the Service no longer selects the new version');
    const app = (await getApp(s.ns, 'back'))!;
    assert.equal(app.spec.image, 'nginx:1.25');
    assert.equal((await getDeployment(s.ns, 'back'))!.spec.template.spec.containers[0].image, 'nginx:1.25', 'the stable Deployment never changed');
  });

  it('a Temporal server restart (same SQLite file) in the switch-back window: the rollout promotes', async () => {
    const stack = await ownStack();
    await apply(blueGreenApp(s.ns, 'temporal', 'v5', { autoPromotionSeconds: 0, scaleDownDelaySeconds: 8 }));
    await eventually('switched', async () => ((await selectorOf(s.ns, 'temporal')) === 'v5' ? true : undefined), { intervalMs: 50, timeoutMs: 90_000 });
    await closeTemporal();
    await stopServer(stack, 'temporal', 'SIGKILL');
    await sleep(2000);
    await startServer(stack, 'temporal');
    await assertSwitchedAndSettled(s.ns, 'temporal', 'nginx:v5');
  });
});
