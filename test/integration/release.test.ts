// Releases against the real API server, Temporal and kwok: several Applications rolled out as one unit in waves,
// with the rollback of the earlier waves when a canary fails, one control for all, conflicts refused, and deletions.
import assert from 'node:assert/strict';
import { before, describe, it } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { appStatus, control } from '../../client/control.ts';
import { controlRelease } from '../../client/release.ts';
import { RELEASE_ANNOTATION } from '../../api/constants.ts';
import { unreadyImage } from '../../stack/stack.ts';
import { applyAsUser, eventsOf, getApp, getDeployment, kube, temporalClient, waitForObject, waitForPhase, type Json } from '../../testkit/apps.ts';
import { eventually } from '../../lib/poll.ts';
import { assertRunsStable, getRelease, meshApp, releaseManifest, releasePhaseIs, waitRelease } from '../../testkit/release.ts';
import { operatorSuite } from '../../testkit/suite.ts';
import { testFlags } from '../../testkit/operator.ts';

const steps = [{ setWeight: 50 }, { pause: { duration: '1s' } }];

describe('Releases', () => {
  // A poll of ten minutes: every Release here must move on the watcher's signals alone (its Applications' status
  // and spec changes), never by waiting for its safety-net poll.
  const s = operatorSuite('release', { operator: { flags: testFlags.map((f) => (f.startsWith('--release-poll-seconds=') ? '--release-poll-seconds=600' : f)) } });

  before(async () => {
    for (const name of ['backend', 'web', 'mobile', 'api', 'shop', 'cart', 'pay', 'mail', 'solo', 'taken', 'busy', 'doomed', 'left', 'right', 'vanish', 'keep', 'north', 'south', 'hot', 'fix', 'cold']) {
      await applyAsUser(meshApp(s.ns, name));
    }
    for (const name of ['backend', 'web', 'mobile']) await waitForPhase(s.ns, name, 'Running');
  });

  it('three Applications in two waves are promoted in order; each CR ends with its new image and no canary', async () => {
    await applyAsUser(releaseManifest(s.ns, 'launch', { steps, waves: [{ name: 'backend', applications: [{ name: 'backend', canaryVersion: '2.0' }] }, { applications: [{ name: 'web', canaryVersion: '2.0' }, { name: 'mobile', canaryVersion: '2.0', image: 'registry.example/mobile:2.0-rc' }] }] }));
    const rel = await waitRelease(s.ns, 'launch', releasePhaseIs('Promoted'), 'Promoted');
    assert.equal(rel.status.wave, 2);
    assert.deepEqual(rel.status.applications.map((a: Json) => `${a.name}:${a.phase}`), ['backend:Promoted', 'web:Promoted', 'mobile:Promoted']);
    for (const [name, image] of [['backend', 'registry.example/backend:2.0'], ['web', 'registry.example/web:2.0'], ['mobile', 'registry.example/mobile:2.0-rc']] as const) {
      await assertRunsStable(s.ns, name, image);
    }
    const events = await eventsOf(s.ns, rel.metadata.uid);
    const at = (reason: string, text: RegExp) => events.find((e) => e.reason === reason && text.test(e.note))?.time ?? '';
    assert.ok(at('ReleaseWavePromoted', /wave 1/) !== '' && at('ReleaseWavePromoted', /wave 1/) <= at('ReleaseWaveStarted', /wave 2/), 'wave 2 started after wave 1 was promoted');
    assert.ok(at('ReleaseWaveStarted', /^wave 1 \(backend\): starting/) !== '' && at('ReleaseWaveStarted', /^wave 2: starting/) !== '', 'a named wave says its name once, an unnamed one only its number');
    assert.match(rel.status.workflowId, /^release\//);
    // Over: the Release's workflow ended with its outcome instead of waiting for a change that may never come.
    const handle = (await temporalClient()).workflow.getHandle(rel.status.workflowId);
    await eventually('the Release workflow to end', async () => ((await handle.describe()).status.name === 'COMPLETED' ? true : undefined), { timeoutMs: 30_000 });
    assert.equal(await handle.result(), 'Promoted');
  });

  it('a canary failing in wave 2 stops the wave and puts wave 1 back, last first; every route ends on stable', async () => {
    await applyAsUser(releaseManifest(s.ns, 'bad', {
      steps,
      waves: [{ applications: [{ name: 'api', canaryVersion: '2.0' }, { name: 'shop', canaryVersion: '2.0' }] }, { applications: [{ name: 'cart', canaryVersion: 'broken', image: unreadyImage }, { name: 'pay', canaryVersion: '2.0' }] }],
    }));
    const rel = await waitRelease(s.ns, 'bad', releasePhaseIs('RolledBack'), 'RolledBack', 180_000);
    assert.equal(rel.status.failedApplication, 'cart');
    assert.match(rel.status.message, /^the canary broken of cart was rolled back: .*health gate failed.*; every Application this release promoted runs its previous image again$/);
    const phases = Object.fromEntries(rel.status.applications.map((a: Json) => [a.name, a.phase]));
    assert.deepEqual(phases, { api: 'Reverted', shop: 'Reverted', cart: 'Failed', pay: phases['pay'] === 'Reverted' ? 'Reverted' : 'Stopped' });
    for (const name of ['api', 'shop', 'cart']) await assertRunsStable(s.ns, name, `registry.example/${name}:1.0`);
    if (phases['pay'] !== 'Reverted') await assertRunsStable(s.ns, 'pay', 'registry.example/pay:1.0');
    const events = await eventsOf(s.ns, rel.metadata.uid);
    const reverts = events.filter((e) => /back to registry.example\/(api|shop)/.test(e.note)).map((e) => /registry.example\/(\w+)/.exec(e.note)![1]);
    assert.ok(events.some((e) => e.reason === 'ReleaseRolledBack'));
    if (reverts.length) assert.deepEqual(reverts, ['shop', 'api'], 'last first');
    // Each Application says what happened to the rollout it had reported Promoted, and who undid it.
    for (const name of ['api', 'shop']) {
      const app = (await getApp(s.ns, name))!;
      assert.equal(app.status.canary.phase, 'RolledBack', `${name}: no longer says Promoted`);
      assert.equal(app.status.canary.reason, 'ReleaseReverted');
      assert.match(app.status.canary.message, new RegExp(`^Release bad put registry.example/${name}:1.0 back: the canary broken of cart was rolled back`));
      assert.ok((await eventsOf(s.ns, app.metadata.uid)).some((e) => e.reason === 'ReleaseReverted' && /Release bad put/.test(e.note)), `${name}: an Event says so`);
    }
    // A canary the Release stopped says the Release aborted it, not "the spec".
    if (phases['pay'] === 'Stopped') {
      const pay = (await getApp(s.ns, 'pay'))!;
      assert.equal(pay.status.canary.phase, 'Aborted');
      assert.match(pay.status.canary.abortedBy ?? '', /^Release bad/);
    }
  });

  it('a rollback leaves an image changed by hand after its promotion, and puts back a hotfix made before its wave, not the image claimed', async () => {
    await applyAsUser(releaseManifest(s.ns, 'edited', {
      steps, pauseBetweenWaves: {},
      waves: [{ applications: [{ name: 'hot', canaryVersion: '2.0' }] }, { applications: [{ name: 'fix', canaryVersion: '2.0' }, { name: 'cold', canaryVersion: 'broken', image: unreadyImage }] }],
    }));
    await waitRelease(s.ns, 'edited', (r) => r.status?.phase === 'Paused' && /waiting for a promote to start wave 2/.test(r.status.message), 'waiting for a promote');
    const setImage = (name: string, image: string) => kube(['-n', s.ns, 'patch', 'application', name, '--type=merge', '-p', JSON.stringify({ spec: { image } })]);
    await setImage('hot', 'registry.example/hot:2.0.1');
    await setImage('fix', 'registry.example/fix:1.0.1');
    await controlRelease(await temporalClient(), 'promote', s.ns, 'edited');
    // Before the fix it waited for ever for hot to run 1.0 again, which its revert (rightly) never wrote.
    const rel = await waitRelease(s.ns, 'edited', releasePhaseIs('RolledBack'), 'RolledBack', 180_000);
    assert.match(rel.status.message, /; every Application this release promoted runs its previous image again; left as changed after its promotion: hot \(registry\.example\/hot:2\.0\.1\)$/);
    const hot = rel.status.applications.find((a: Json) => a.name === 'hot');
    assert.deepEqual([hot.phase, hot.message], ['Promoted', 'left at registry.example/hot:2.0.1: its image was changed after the Release promoted registry.example/hot:2.0']);
    await assertRunsStable(s.ns, 'hot', 'registry.example/hot:2.0.1');
    await assertRunsStable(s.ns, 'fix', 'registry.example/fix:1.0.1');
    await assertRunsStable(s.ns, 'cold', 'registry.example/cold:1.0');
  });

  it('one control for all: a wave waiting for a promote, a pause and a resume, and an abort during the pause between waves', async () => {
    await applyAsUser(releaseManifest(s.ns, 'held', {
      steps, pauseBetweenWaves: {},
      waves: [{ applications: [{ name: 'mail', canaryVersion: '2.0' }] }, { applications: [{ name: 'solo', canaryVersion: '2.0' }], steps: [{ setWeight: 50 }, { pause: { duration: '10m' } }] }],
    }));
    await waitRelease(s.ns, 'held', (r) => r.status?.phase === 'Paused' && /waiting for a promote to start wave 2/.test(r.status.message), 'waiting for a promote');
    const client = await temporalClient();
    await controlRelease(client, 'promote', s.ns, 'held');
    await waitRelease(s.ns, 'held', (r) => r.status?.wave === 2, 'in wave 2');
    await waitForObject('solo in its 10 minute pause', () => getApp(s.ns, 'solo'), (a) => a?.status?.canary?.phase === 'Paused', 60_000);
    const paused = await controlRelease(client, 'pause', s.ns, 'held');
    assert.equal(paused.state.pausedByUser, true);
    const pausedAgain = await controlRelease(client, 'pause', s.ns, 'held');
    assert.deepEqual([pausedAgain.accepted, pausedAgain.note, pausedAgain.state.pausedByUser], [false, 'nothing to pause: the release is already paused', true]);
    await eventually('solo\'s rollout paused by the release', async () => ((await appStatus(client, s.ns, 'solo')).rollout?.pausedByUser ? true : undefined), { timeoutMs: 30_000 });
    // A resume of the release lifts its pause and its canaries' holds, nothing more: solo's pause step goes on.
    await controlRelease(client, 'resume', s.ns, 'held');
    await eventually('solo\'s hold lifted', async () => ((await appStatus(client, s.ns, 'solo')).rollout?.pausedByUser === false ? true : undefined), { timeoutMs: 30_000 });
    await sleep(2000);
    assert.equal((await getApp(s.ns, 'solo'))!.status?.canary?.phase, 'Paused', 'a resume is not an approval');
    assert.equal((await getRelease(s.ns, 'held'))?.status?.phase, 'Progressing');
    // A promote of the release is: solo promotes long before its 10 minutes.
    await controlRelease(client, 'promote', s.ns, 'held');
    await waitRelease(s.ns, 'held', releasePhaseIs('Promoted'), 'Promoted');

    await applyAsUser(releaseManifest(s.ns, 'stopped', { steps, pauseBetweenWaves: {}, waves: [{ applications: [{ name: 'left', canaryVersion: '2.0' }] }, { applications: [{ name: 'right', canaryVersion: '2.0' }] }] }));
    await waitRelease(s.ns, 'stopped', (r) => r.status?.phase === 'Paused', 'paused between waves');
    await controlRelease(client, 'abort', s.ns, 'stopped', 'change freeze');
    const aborted = await waitRelease(s.ns, 'stopped', releasePhaseIs('Aborted'), 'Aborted');
    assert.match(aborted.status.message, /aborted by .*: change freeze/);
    await assertRunsStable(s.ns, 'left', 'registry.example/left:1.0');
    assert.equal((await getApp(s.ns, 'right'))!.status?.canary?.phase, undefined, 'wave 2 never started');
    const again = await controlRelease(client, 'abort', s.ns, 'stopped');
    assert.equal(again.accepted, false);
    assert.match(again.note, /nothing to abort: the release is Aborted/);
  });

  it('an Application\'s own controls work inside a wave: one canary promoted early, another aborted, which rolls the release back', async () => {
    await applyAsUser(releaseManifest(s.ns, 'mixed', { steps: [{ setWeight: 20 }, { pause: {} }], waves: [{ applications: [{ name: 'north', canaryVersion: '2.0' }, { name: 'south', canaryVersion: '2.0' }] }] }));
    for (const name of ['north', 'south']) await waitForObject(`${name} waits for a promote`, () => getApp(s.ns, name), (a) => a?.status?.canary?.phase === 'Paused', 90_000);
    const client = await temporalClient();
    await control(client, 'promote', s.ns, 'north');
    await waitForObject('north promoted by its own control', () => getApp(s.ns, 'north'), (a) => a?.status?.canary?.phase === 'Promoted', 90_000);
    const waiting = await waitRelease(s.ns, 'mixed', (r) => r.status?.applications?.find((a: Json) => a.name === 'north')?.phase === 'Promoted', 'north counted as promoted');
    assert.equal(waiting.status.phase, 'Progressing', 'the wave still waits for south');
    await control(client, 'abort', s.ns, 'south', 'bad latency');
    const rel = await waitRelease(s.ns, 'mixed', releasePhaseIs('RolledBack'), 'RolledBack');
    assert.equal(rel.status.failedApplication, 'south');
    assert.match(rel.status.message, /^the canary 2\.0 of south was aborted by [^:]+: bad latency; every Application this release promoted/);
    await assertRunsStable(s.ns, 'north', 'registry.example/north:1.0');
    await assertRunsStable(s.ns, 'south', 'registry.example/south:1.0');
  });

  it('conflicts are refused with a status message: a missing Application, one in another running Release, one running its own canary', async () => {
    await applyAsUser(releaseManifest(s.ns, 'ghost', { waves: [{ applications: [{ name: 'nosuchapp', canaryVersion: '2.0' }] }] }));
    const ghost = await waitRelease(s.ns, 'ghost', releasePhaseIs('Failed'), 'Failed');
    assert.match(ghost.status.message, /refused: Application nosuchapp does not exist/);
    assert.equal(ghost.status.wave, undefined, 'no wave ran');
    assert.deepEqual(ghost.status.applications.map((a: Json) => [a.name, a.phase]), [['nosuchapp', 'Refused']]);
    // Its workflow is over; the Application made and the Release changed, a new run takes the new generation.
    await applyAsUser(meshApp(s.ns, 'nosuchapp'));
    await waitForPhase(s.ns, 'nosuchapp', 'Running');
    await applyAsUser(releaseManifest(s.ns, 'ghost', { steps, waves: [{ applications: [{ name: 'nosuchapp', canaryVersion: '2.1' }] }] }));
    const fixed = await waitRelease(s.ns, 'ghost', (r) => r.status?.observedGeneration === 2 && r.status.phase === 'Promoted', 'Promoted once fixed', 120_000);
    assert.deepEqual(fixed.status.applications.map((a: Json) => [a.name, a.phase]), [['nosuchapp', 'Promoted']]);

    await applyAsUser(releaseManifest(s.ns, 'first', { steps: [{ setWeight: 10 }, { pause: {} }], waves: [{ applications: [{ name: 'taken', canaryVersion: '2.0' }] }] }));
    await waitForObject('taken claimed', () => getApp(s.ns, 'taken'), (a) => a?.metadata?.annotations?.[RELEASE_ANNOTATION] === 'first', 60_000);
    await applyAsUser(releaseManifest(s.ns, 'second', { waves: [{ applications: [{ name: 'taken', canaryVersion: '3.0' }] }] }));
    const second = await waitRelease(s.ns, 'second', releasePhaseIs('Failed'), 'Failed');
    assert.match(second.status.message, /Application taken is already in Release first, which is running/);

    await kube(['-n', s.ns, 'patch', 'application', 'busy', '--type=merge', '-p', JSON.stringify({ spec: { serviceMesh: { canary: { enabled: true, canaryVersion: 'own', steps: [{ setWeight: 10 }, { pause: {} }] } } } })]);
    await waitForObject('busy runs its own canary', () => getApp(s.ns, 'busy'), (a) => a?.status?.canary?.phase === 'Paused', 60_000);
    await applyAsUser(releaseManifest(s.ns, 'third', { waves: [{ applications: [{ name: 'busy', canaryVersion: '2.0' }] }] }));
    const third = await waitRelease(s.ns, 'third', releasePhaseIs('Failed'), 'Failed');
    assert.match(third.status.message, /Application busy already runs its own canary \(own, Paused\)/);
    assert.equal((await getApp(s.ns, 'busy'))!.spec.serviceMesh.canary.canaryVersion, 'own', 'untouched');
    await controlRelease(await temporalClient(), 'abort', s.ns, 'first');
    await waitRelease(s.ns, 'first', releasePhaseIs('Aborted'), 'Aborted');
  });

  it('deleting a Release mid-flight compensates it first; deleting one of its Applications fails the wave with a clear reason', async () => {
    await applyAsUser(releaseManifest(s.ns, 'removed', { steps: [{ setWeight: 20 }, { pause: {} }], waves: [{ applications: [{ name: 'doomed', canaryVersion: '2.0' }] }] }));
    await waitForObject('doomed canary running', () => getApp(s.ns, 'doomed'), (a) => a?.status?.canary?.phase === 'Paused', 60_000);
    await kube(['-n', s.ns, 'delete', 'release', 'removed', '--wait=true', '--timeout=120s']);
    assert.equal(await getRelease(s.ns, 'removed'), null);
    await assertRunsStable(s.ns, 'doomed', 'registry.example/doomed:1.0');
    assert.equal((await getApp(s.ns, 'doomed'))!.status.canary.phase, 'Aborted');

    await applyAsUser(releaseManifest(s.ns, 'orphaned', { steps: [{ setWeight: 20 }, { pause: {} }], waves: [{ applications: [{ name: 'keep', canaryVersion: '2.0' }] }, { applications: [{ name: 'vanish', canaryVersion: '2.0' }] }] }));
    await waitRelease(s.ns, 'orphaned', (r) => r.status?.wave === 1 && r.status.applications?.[0]?.phase === 'Progressing', 'wave 1 running');
    await controlRelease(await temporalClient(), 'promote', s.ns, 'orphaned');
    await waitForObject('vanish canary running', () => getApp(s.ns, 'vanish'), (a) => a?.status?.canary?.phase === 'Paused', 90_000);
    await kube(['-n', s.ns, 'delete', 'application', 'vanish', '--wait=false']);
    const rel = await waitRelease(s.ns, 'orphaned', releasePhaseIs('RolledBack'), 'RolledBack');
    assert.equal(rel.status.failedApplication, 'vanish');
    assert.match(rel.status.message, /Application vanish was deleted during its wave/);
    await assertRunsStable(s.ns, 'keep', 'registry.example/keep:1.0');
    await eventually('vanish gone', async () => ((await getApp(s.ns, 'vanish')) === null ? true : undefined), { timeoutMs: 60_000 });
  });

  it('an Application off the mesh is rolled out on its own router; one with no router, or one whose router cannot take the Release\'s steps, is refused', async () => {
    // Off the mesh: traffic.router replicas (no proxy: the canary's share is its share of the pods).
    const offMesh = (name: string, traffic?: Json) => {
      const app = meshApp(s.ns, name);
      app.spec.serviceMesh.enabled = false;
      if (traffic) app.spec.traffic = traffic;
      return app;
    };
    await applyAsUser(offMesh('counted', { router: 'replicas' }));
    await applyAsUser(offMesh('bare'));
    await waitForPhase(s.ns, 'counted', 'Running');
    await waitForPhase(s.ns, 'bare', 'Running');

    await applyAsUser(releaseManifest(s.ns, 'unrouted', { steps, waves: [{ applications: [{ name: 'bare', canaryVersion: '2.0' }] }] }));
    const refused = await waitRelease(s.ns, 'unrouted', releasePhaseIs('Failed'), 'Failed');
    assert.match(refused.status.message, /refused: Application bare has no router for a canary: set serviceMesh.enabled \(Istio\), or traffic.router gatewayAPI or replicas/);
    assert.equal((await getApp(s.ns, 'bare'))!.spec.serviceMesh.canary.enabled, false, 'untouched');

    // A header step on replica counts: the spec the Release would write is one the API server refuses, so the
    // Release is refused before it claims anything.
    await applyAsUser(releaseManifest(s.ns, 'abtest', { steps: [{ setHeaderRoute: { match: [{ header: 'x-canary', exact: 'yes' }] } }, { pause: {} }], waves: [{ applications: [{ name: 'counted', canaryVersion: '2.0' }] }] }));
    const ab = await waitRelease(s.ns, 'abtest', releasePhaseIs('Failed'), 'Failed');
    assert.match(ab.status.message, /refused: Application counted cannot run this Release's canary: .*setHeaderRoute and setMirrorRoute need istio or gatewayAPI/);
    assert.equal((await getApp(s.ns, 'counted'))!.metadata.annotations?.[RELEASE_ANNOTATION], undefined, 'not claimed');

    await applyAsUser(releaseManifest(s.ns, 'byreplicas', { steps: [{ setWeight: 50 }, { pause: {} }], waves: [{ applications: [{ name: 'counted', canaryVersion: '2.0' }] }] }));
    // At 50% of one replica: a canary pod next to the stable one, no route anywhere.
    await waitForObject('counted\'s canary paused with a share', () => getApp(s.ns, 'counted'), (a) => a?.status?.canary?.phase === 'Paused' && a.status.canary.weight > 0, 90_000);
    await waitForObject('a canary pod of 2.0', () => getDeployment(s.ns, 'counted-canary'), (d) => d?.spec?.template?.spec?.containers?.[0]?.image === 'registry.example/counted:2.0' && d.status?.readyReplicas >= 1, 60_000);
    await controlRelease(await temporalClient(), 'promote', s.ns, 'byreplicas');
    const done = await waitRelease(s.ns, 'byreplicas', releasePhaseIs('Promoted'), 'Promoted');
    assert.deepEqual(done.status.applications.map((a: Json) => `${a.name}:${a.phase}`), ['counted:Promoted']);
    await assertRunsStable(s.ns, 'counted', 'registry.example/counted:2.0');
  });
});
