// Disruptive: a Release survives the operator being SIGKILLed mid-wave and the Temporal server restarting
// mid-release, and its rollback survives a SIGKILL too. Each release must end exactly where it would have without
// the faults: every wave promoted once, in order (or the earlier waves put back), every route on stable.
import assert from 'node:assert/strict';
import { before, describe, it } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { startServer, stopServer, unreadyImage } from '../../stack/stack.ts';
import { rolloutWorkflowId } from '../../workflows/contract.ts';
import { applyAsUser, closeTemporal, getApp, temporalClient, waitForPhase, type Json } from '../../testkit/apps.ts';
import { ownStack } from '../../testkit/env.ts';
import { assertRunsStable, meshApp, releaseManifest, releasePhaseIs, waitRelease } from '../../testkit/release.ts';
import { operatorSuite } from '../../testkit/suite.ts';

/** The release is in `wave` and the canary of `app` is in its timed pause. */
const midWave = (wave: number, app: string) => (r: Json) => r.status?.wave === wave
  && r.status.applications?.some((a: Json) => a.name === app && a.phase === 'Progressing' && /^Paused/.test(a.message ?? ''));

/** How many rollout workflow runs `app` has had: a fault must not start a canary twice. */
async function rolloutRuns(ns: string, app: string): Promise<number> {
  let n = 0;
  for await (const _ of (await temporalClient()).workflow.list({ query: `WorkflowId = '${rolloutWorkflowId(ns, app)}'` })) n++;
  return n;
}

describe('releases survive crashes', () => {
  const s = operatorSuite('release-crash', { routes: true });

  before(async () => {
    for (const name of ['orders', 'web', 'mobile', 'api', 'cart']) await applyAsUser(meshApp(s.ns, name));
    for (const name of ['orders', 'web', 'mobile', 'api', 'cart']) await waitForPhase(s.ns, name, 'Running');
  });

  it('SIGKILL mid-wave 1, then a Temporal server restart mid-wave 2: every wave is promoted once, in order', async () => {
    const stack = await ownStack();
    const steps = [{ setWeight: 50 }, { pause: { duration: '6s' } }];
    await applyAsUser(releaseManifest(s.ns, 'launch', {
      steps, pauseBetweenWaves: { duration: '2s' },
      waves: [{ name: 'backend', applications: [{ name: 'orders', canaryVersion: '2.0' }] }, { name: 'frontends', applications: [{ name: 'web', canaryVersion: '2.0' }, { name: 'mobile', canaryVersion: '2.0' }] }],
    }));

    await waitRelease(s.ns, 'launch', midWave(1, 'orders'), 'wave 1 mid-pause', 180_000);
    await s.op.stop('SIGKILL');
    await sleep(3000);
    await s.op.restart();

    await waitRelease(s.ns, 'launch', midWave(2, 'web'), 'wave 2 mid-pause', 180_000);
    await closeTemporal();
    await stopServer(stack, 'temporal', 'SIGKILL');
    await sleep(2000);
    await startServer(stack, 'temporal');

    const rel = await waitRelease(s.ns, 'launch', releasePhaseIs('Promoted'), 'Promoted', 240_000);
    assert.deepEqual(rel.status.applications.map((a: Json) => `${a.wave}:${a.name}:${a.phase}`), ['1:orders:Promoted', '2:web:Promoted', '2:mobile:Promoted']);
    for (const name of ['orders', 'web', 'mobile']) {
      await assertRunsStable(s.ns, name, `registry.example/${name}:2.0`);
      assert.equal(await rolloutRuns(s.ns, name), 1, `${name}'s canary ran once`);
    }
    // Wave 2 started only after wave 1 was promoted: its canaries' rollouts began after orders' ended.
    const orders = (await getApp(s.ns, 'orders'))!;
    const web = (await getApp(s.ns, 'web'))!;
    assert.ok(Date.parse(web.status.canary.startedAt) > Date.parse(orders.status.canary.startedAt), 'wave 2 after wave 1');
  });

  it('SIGKILL during the rollback of a failed wave 2: wave 1 is still put back and the release ends RolledBack', async () => {
    await applyAsUser(releaseManifest(s.ns, 'bad', {
      steps: [{ setWeight: 50 }, { pause: { duration: '1s' } }],
      waves: [{ applications: [{ name: 'api', canaryVersion: '2.0' }] }, { applications: [{ name: 'cart', canaryVersion: 'broken', image: unreadyImage }] }],
    }));
    await waitRelease(s.ns, 'bad', (r) => r.status?.phase === 'RollingBack' || r.status?.phase === 'RolledBack', 'rolling back', 180_000);
    await s.op.stop('SIGKILL');
    await sleep(2000);
    await s.op.restart();
    const rel = await waitRelease(s.ns, 'bad', releasePhaseIs('RolledBack'), 'RolledBack', 240_000);
    assert.equal(rel.status.failedApplication, 'cart');
    assert.deepEqual(Object.fromEntries(rel.status.applications.map((a: Json) => [a.name, a.phase])), { api: 'Reverted', cart: 'Failed' });
    await assertRunsStable(s.ns, 'api', 'registry.example/api:1.0');
    await assertRunsStable(s.ns, 'cart', 'registry.example/cart:1.0');
  });

  it('through all of it, every VirtualService summed to 100 and never routed to a canary without ready pods', async () => {
    const { seen, violations } = await s.routes.stop();
    assert.ok(seen >= 10, `observed ${seen} VirtualService versions`);
    assert.deepEqual(violations, []);
  });
});
