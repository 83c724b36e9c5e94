// Releases against the real API server, Temporal and kwok: several Applications rolled out as one unit in waves,
// with the rollback of the earlier waves when a canary fails, one control for all, conflicts refused, and deletions.
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { appStatus } from '../../client/control.ts';
import { controlRelease } from '../../client/release.ts';
import { RELEASE_ANNOTATION } from '../../api/constants.ts';
import { readRouteWeights } from '../../render/istio.ts';
import { unreadyImage } from '../../stack/stack.ts';
import { appManifest, applyAsUser, closeTemporal, getApp, getDeployment, getObject, kube, temporalClient, testNamespace, waitForObject, waitForPhase, type Json } from '../../testkit/apps.ts';
import { virtualService } from '../../testkit/canary.ts';
import { startOperator, type OperatorProcess } from '../../testkit/operator.ts';
import { eventually } from '../../lib/poll.ts';

const steps = [{ setWeight: 50 }, { pause: { duration: '1s' } }];
const meshApp = (ns: string, name: string) => appManifest(ns, name, {
  image: `registry.example/${name}:1.0`, replicas: 1,
  serviceMesh: { enabled: true, canary: { healthGates: { interval: '1s', failureThreshold: 2, initialDelay: '2s' } } },
});
const release = (ns: string, name: string, spec: Json) => ({ apiVersion: 'myapp.example.com/v1', kind: 'Release', metadata: { name, namespace: ns }, spec });
const getRelease = (ns: string, name: string) => getObject('myapp.example.com/v1', 'Release', ns, name);

async function waitRelease(ns: string, name: string, ok: (r: Json) => boolean, what: string, timeoutMs = 120_000): Promise<Json> {
  return (await waitForObject(`release ${name} ${what}`, () => getRelease(ns, name), (r) => Boolean(r && ok(r)), timeoutMs))!;
}

const phaseIs = (phase: string) => (r: Json) => r.status?.phase === phase;

/** Reads the Events of an object by uid, oldest first. */
async function eventsOf(ns: string, uid: string): Promise<{ reason: string; note: string; time: string }[]> {
  const list = JSON.parse(await kube(['-n', ns, 'get', 'events.events.k8s.io', '--field-selector', `regarding.uid=${uid}`, '-o', 'json'])) as { items: Json[] };
  return list.items.map((e) => ({ reason: e.reason, note: e.note, time: e.eventTime ?? e.metadata.creationTimestamp })).sort((a, b) => a.time.localeCompare(b.time));
}

async function assertRunsStable(ns: string, name: string, image: string): Promise<void> {
  const app = await waitForObject(`${name} runs ${image}`, () => getApp(ns, name), (a) => a?.spec?.image === image && a.status?.phase === 'Running' && a.status.observedGeneration === a.metadata.generation, 90_000);
  assert.equal(app!.spec.serviceMesh.canary.enabled, false);
  await waitForObject(`${name}'s Deployment runs ${image}`, () => getDeployment(ns, name), (d) => d?.spec?.template?.spec?.containers?.[0]?.image === image && d.status?.availableReplicas >= 1, 90_000);
  assert.deepEqual({ ...readRouteWeights(await virtualService(ns, name)) }, { stable: 100, canary: 0, total: 100, headerRoute: false, mirror: 0 }, `${name}: all traffic on stable`);
  assert.equal(app!.metadata.annotations?.[RELEASE_ANNOTATION], undefined, `${name} let go by the release`);
}

describe('Releases', () => {
  let ns: { name: string; cleanup: () => Promise<void> };
  let op: OperatorProcess;

  before(async () => {
    ns = await testNamespace('release');
    op = await startOperator({ namespaces: [ns.name] });
    for (const name of ['backend', 'web', 'mobile', 'api', 'shop', 'cart', 'pay', 'mail', 'solo', 'taken', 'busy', 'doomed', 'left', 'right', 'vanish', 'keep']) {
      await applyAsUser(meshApp(ns.name, name));
    }
    for (const name of ['backend', 'web', 'mobile']) await waitForPhase(ns.name, name, 'Running');
  });
  after(async () => {
    await op?.stop();
    await closeTemporal();
    await ns?.cleanup();
  });

  it('three Applications in two waves are promoted in order; each CR ends with its new image and no canary', async () => {
    await applyAsUser(release(ns.name, 'launch', { steps, waves: [{ name: 'backend', applications: [{ name: 'backend', canaryVersion: '2.0' }] }, { applications: [{ name: 'web', canaryVersion: '2.0' }, { name: 'mobile', canaryVersion: '2.0', image: 'registry.example/mobile:2.0-rc' }] }] }));
    const rel = await waitRelease(ns.name, 'launch', phaseIs('Promoted'), 'Promoted');
    assert.equal(rel.status.wave, 2);
    assert.deepEqual(rel.status.applications.map((a: Json) => `${a.name}:${a.phase}`), ['backend:Promoted', 'web:Promoted', 'mobile:Promoted']);
    for (const [name, image] of [['backend', 'registry.example/backend:2.0'], ['web', 'registry.example/web:2.0'], ['mobile', 'registry.example/mobile:2.0-rc']] as const) {
      await assertRunsStable(ns.name, name, image);
    }
    const events = await eventsOf(ns.name, rel.metadata.uid);
    const at = (reason: string, text: RegExp) => events.find((e) => e.reason === reason && text.test(e.note))?.time ?? '';
    assert.ok(at('ReleaseWavePromoted', /wave 1/) !== '' && at('ReleaseWavePromoted', /wave 1/) <= at('ReleaseWaveStarted', /wave 2/), 'wave 2 started after wave 1 was promoted');
    assert.match(rel.status.workflowId, /^release\//);
  });

  it('a canary failing in wave 2 stops the wave and puts wave 1 back, last first; every route ends on stable', async () => {
    await applyAsUser(release(ns.name, 'bad', {
      steps,
      waves: [{ applications: [{ name: 'api', canaryVersion: '2.0' }, { name: 'shop', canaryVersion: '2.0' }] }, { applications: [{ name: 'cart', canaryVersion: 'broken', image: unreadyImage }, { name: 'pay', canaryVersion: '2.0' }] }],
    }));
    const rel = await waitRelease(ns.name, 'bad', phaseIs('RolledBack'), 'RolledBack', 180_000);
    assert.equal(rel.status.failedApplication, 'cart');
    assert.match(rel.status.message, /rolled back: canary broken of cart RolledBack: .*health gate failed/);
    const phases = Object.fromEntries(rel.status.applications.map((a: Json) => [a.name, a.phase]));
    assert.deepEqual(phases, { api: 'Reverted', shop: 'Reverted', cart: 'Failed', pay: phases['pay'] === 'Reverted' ? 'Reverted' : 'Stopped' });
    for (const name of ['api', 'shop', 'cart']) await assertRunsStable(ns.name, name, `registry.example/${name}:1.0`);
    if (phases['pay'] !== 'Reverted') await assertRunsStable(ns.name, 'pay', 'registry.example/pay:1.0');
    const events = await eventsOf(ns.name, rel.metadata.uid);
    const reverts = events.filter((e) => /back to registry.example\/(api|shop)/.test(e.note)).map((e) => /registry.example\/(\w+)/.exec(e.note)![1]);
    assert.ok(events.some((e) => e.reason === 'ReleaseRolledBack'));
    if (reverts.length) assert.deepEqual(reverts, ['shop', 'api'], 'last first');
  });

  it('one control for all: a wave waiting for a promote, a pause and a resume, and an abort during the pause between waves', async () => {
    await applyAsUser(release(ns.name, 'held', {
      steps, pauseBetweenWaves: {},
      waves: [{ applications: [{ name: 'mail', canaryVersion: '2.0' }] }, { applications: [{ name: 'solo', canaryVersion: '2.0' }], steps: [{ setWeight: 50 }, { pause: { duration: '10m' } }] }],
    }));
    await waitRelease(ns.name, 'held', (r) => r.status?.phase === 'Paused' && /waiting for a promote to start wave 2/.test(r.status.message), 'waiting for a promote');
    const client = await temporalClient();
    await controlRelease(client, 'promote', ns.name, 'held');
    await waitRelease(ns.name, 'held', (r) => r.status?.wave === 2, 'in wave 2');
    await waitForObject('solo in its 10 minute pause', () => getApp(ns.name, 'solo'), (a) => a?.status?.canary?.phase === 'Paused', 60_000);
    const paused = await controlRelease(client, 'pause', ns.name, 'held');
    assert.equal(paused.pausedByUser, true);
    await eventually('solo\'s rollout paused by the release', async () => ((await appStatus(client, ns.name, 'solo')).rollout?.pausedByUser ? true : undefined), { timeoutMs: 30_000 });
    // A resume of the release resumes its canaries: solo's pause ends and it promotes, long before its 10 minutes.
    await controlRelease(client, 'resume', ns.name, 'held');
    await waitRelease(ns.name, 'held', phaseIs('Promoted'), 'Promoted');

    await applyAsUser(release(ns.name, 'stopped', { steps, pauseBetweenWaves: {}, waves: [{ applications: [{ name: 'left', canaryVersion: '2.0' }] }, { applications: [{ name: 'right', canaryVersion: '2.0' }] }] }));
    await waitRelease(ns.name, 'stopped', (r) => r.status?.phase === 'Paused', 'paused between waves');
    await controlRelease(client, 'abort', ns.name, 'stopped', 'change freeze');
    const aborted = await waitRelease(ns.name, 'stopped', phaseIs('Aborted'), 'Aborted');
    assert.match(aborted.status.message, /aborted by .*: change freeze/);
    await assertRunsStable(ns.name, 'left', 'registry.example/left:1.0');
    assert.equal((await getApp(ns.name, 'right'))!.status?.canary?.phase, undefined, 'wave 2 never started');
    await assert.rejects(controlRelease(client, 'abort', ns.name, 'stopped'), /abort rejected: the release is Aborted: nothing to abort/);
  });

  it('conflicts are refused with a status message: a missing Application, one in another running Release, one running its own canary', async () => {
    await applyAsUser(release(ns.name, 'ghost', { waves: [{ applications: [{ name: 'nosuchapp', canaryVersion: '2.0' }] }] }));
    const ghost = await waitRelease(ns.name, 'ghost', phaseIs('Failed'), 'Failed');
    assert.match(ghost.status.message, /refused: Application nosuchapp does not exist/);

    await applyAsUser(release(ns.name, 'first', { steps: [{ setWeight: 10 }, { pause: {} }], waves: [{ applications: [{ name: 'taken', canaryVersion: '2.0' }] }] }));
    await waitForObject('taken claimed', () => getApp(ns.name, 'taken'), (a) => a?.metadata?.annotations?.[RELEASE_ANNOTATION] === 'first', 60_000);
    await applyAsUser(release(ns.name, 'second', { waves: [{ applications: [{ name: 'taken', canaryVersion: '3.0' }] }] }));
    const second = await waitRelease(ns.name, 'second', phaseIs('Failed'), 'Failed');
    assert.match(second.status.message, /Application taken is already in Release first, which is running/);

    await kube(['-n', ns.name, 'patch', 'application', 'busy', '--type=merge', '-p', JSON.stringify({ spec: { serviceMesh: { canary: { enabled: true, canaryVersion: 'own', steps: [{ setWeight: 10 }, { pause: {} }] } } } })]);
    await waitForObject('busy runs its own canary', () => getApp(ns.name, 'busy'), (a) => a?.status?.canary?.phase === 'Paused', 60_000);
    await applyAsUser(release(ns.name, 'third', { waves: [{ applications: [{ name: 'busy', canaryVersion: '2.0' }] }] }));
    const third = await waitRelease(ns.name, 'third', phaseIs('Failed'), 'Failed');
    assert.match(third.status.message, /Application busy already runs its own canary \(own, Paused\)/);
    assert.equal((await getApp(ns.name, 'busy'))!.spec.serviceMesh.canary.canaryVersion, 'own', 'untouched');
    await controlRelease(await temporalClient(), 'abort', ns.name, 'first');
    await waitRelease(ns.name, 'first', phaseIs('Aborted'), 'Aborted');
  });

  it('deleting a Release mid-flight compensates it first; deleting one of its Applications fails the wave with a clear reason', async () => {
    await applyAsUser(release(ns.name, 'removed', { steps: [{ setWeight: 20 }, { pause: {} }], waves: [{ applications: [{ name: 'doomed', canaryVersion: '2.0' }] }] }));
    await waitForObject('doomed canary running', () => getApp(ns.name, 'doomed'), (a) => a?.status?.canary?.phase === 'Paused', 60_000);
    await kube(['-n', ns.name, 'delete', 'release', 'removed', '--wait=true', '--timeout=120s']);
    assert.equal(await getRelease(ns.name, 'removed'), null);
    await assertRunsStable(ns.name, 'doomed', 'registry.example/doomed:1.0');
    assert.equal((await getApp(ns.name, 'doomed'))!.status.canary.phase, 'Aborted');

    await applyAsUser(release(ns.name, 'orphaned', { steps: [{ setWeight: 20 }, { pause: {} }], waves: [{ applications: [{ name: 'keep', canaryVersion: '2.0' }] }, { applications: [{ name: 'vanish', canaryVersion: '2.0' }] }] }));
    await waitRelease(ns.name, 'orphaned', (r) => r.status?.wave === 1 && r.status.applications?.[0]?.phase === 'Progressing', 'wave 1 running');
    await controlRelease(await temporalClient(), 'promote', ns.name, 'orphaned');
    await waitForObject('vanish canary running', () => getApp(ns.name, 'vanish'), (a) => a?.status?.canary?.phase === 'Paused', 90_000);
    await kube(['-n', ns.name, 'delete', 'application', 'vanish', '--wait=false']);
    const rel = await waitRelease(ns.name, 'orphaned', phaseIs('RolledBack'), 'RolledBack');
    assert.equal(rel.status.failedApplication, 'vanish');
    assert.match(rel.status.message, /Application vanish was deleted during its wave/);
    await assertRunsStable(ns.name, 'keep', 'registry.example/keep:1.0');
    await eventually('vanish gone', async () => ((await getApp(ns.name, 'vanish')) === null ? true : undefined), { timeoutMs: 60_000 });
  });
});
