import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import type { AppObservation } from '../../activities/release.ts';
import { parseRelease, releaseAppKey } from '../../api/release.ts';
import { releasePlan } from '../../reconcile/release-plan.ts';
import { appPhase, canaryEnd, changedSince, promoted, reverted, rollbackOrder, stopped, waveLabel, waveOutcome, type Want } from '../../workflows/release/decide.ts';
import type { ReleaseAppState, ReleaseState } from '../../workflows/contract.ts';
import { formatRelease } from '../../client/release.ts';

const want = (name: string): Want => ({ name, canaryVersion: 'v2', image: `${name}:v2` });
const obs = (name: string, over: Partial<AppObservation> & { phase?: string; version?: string } = {}): AppObservation => {
  const { phase, version, ...rest } = over;
  return {
    name, exists: true, specImage: `${name}:old`, running: true, deploymentImage: `${name}:old`,
    canary: { enabled: true, ...(phase ? { phase } : {}), version: version ?? 'v2', message: `${phase ?? ''} msg`, ...(phase === 'RolledBack' ? { reason: 'HealthGateFailed' } : {}) },
    ...rest,
  };
};

describe('waveOutcome', () => {
  test('all promoted, specs saying the new image: promoted', () => assert.deepEqual(
    waveOutcome([want('a'), want('b')], [obs('a', { phase: 'Promoted', specImage: 'a:v2' }), obs('b', { phase: 'Promoted', specImage: 'b:v2' })]), { kind: 'promoted' }));
  test('one still going: running', () => assert.deepEqual(waveOutcome([want('a'), want('b')], [obs('a', { phase: 'Promoted', specImage: 'a:v2' }), obs('b', { phase: 'Paused' })]), { kind: 'running' }));
  test('a Promoted status of another version does not count', () => assert.deepEqual(waveOutcome([want('a')], [obs('a', { phase: 'Promoted', version: 'v1', specImage: 'a:v2' })]), { kind: 'running' }));
  test('a rolled back canary fails the wave, naming it and why', () => {
    const out = waveOutcome([want('a'), want('b')], [obs('a', { phase: 'Paused' }), obs('b', { phase: 'RolledBack' })]);
    assert.deepEqual(out, { kind: 'failed', app: 'b', reason: 'HealthGateFailed', message: 'the canary v2 of b was rolled back: RolledBack msg' });
  });
  test('how a canary ended, said once: its own "rolled back:" and the tail of its message are not repeated', () => {
    const ended = (phase: string, message?: string) => canaryEnd({ ...obs('a', { phase }), canary: { enabled: false, phase, ...(message !== undefined ? { message } : {}) } });
    assert.equal(ended('RolledBack', 'rolled back: the health gate failed: 0/1 ready; all traffic on stable, canary removed'), 'rolled back: the health gate failed: 0/1 ready');
    assert.equal(ended('Aborted', 'aborted by ana@ops: not today; all traffic on stable, canary removed'), 'aborted by ana@ops: not today');
    assert.equal(ended('RolledBack', 'the rollout of v2 ended without finishing'), 'rolled back: the rollout of v2 ended without finishing');
    assert.equal(ended('Aborted'), 'aborted');
  });
  test('an aborted canary fails it too', () => assert.equal(waveOutcome([want('a')], [obs('a', { phase: 'Aborted' })]).kind, 'failed'));
  test('a deleted Application fails it', () => assert.deepEqual(waveOutcome([want('a')], [{ name: 'a', exists: false, running: false }]),
    { kind: 'failed', app: 'a', reason: 'ApplicationDeleted', message: 'Application a was deleted during its wave' }));
  test('appPhase', () => {
    assert.equal(appPhase(obs('a', { phase: 'Progressing' }), want('a')), 'Progressing');
    assert.equal(appPhase(obs('a', { phase: 'Promoted', specImage: 'a:v2' }), want('a')), 'Promoted');
    assert.equal(appPhase(obs('a', { phase: 'RolledBack' }), want('a')), 'Failed');
    assert.equal(promoted(obs('a', { phase: 'Promoted' }), want('a')), false, 'not until the spec says the new image');
  });
});

describe('waveLabel', () => {
  test('an unnamed wave is "wave N", a named one says its name once', () => {
    assert.equal(waveLabel(0, { name: 'wave 1', apps: [] }), 'wave 1');
    assert.equal(waveLabel(1, { name: 'eu', apps: [] }), 'wave 2 (eu)');
    assert.equal(waveLabel(1, { name: 'wave 1', apps: [] }), 'wave 2 (wave 1)', 'a name that is another wave\'s number is kept');
  });
});

describe('rollbackOrder: what this release promoted, last wave first, last app first', () => {
  const app = (name: string, wave: number, phase: string): ReleaseAppState => ({ name, wave, phase, canaryVersion: 'v2' });
  test('reverse order, skipping what was not promoted', () => assert.deepEqual(
    rollbackOrder([app('a', 1, 'Promoted'), app('b', 1, 'Promoted'), app('c', 2, 'Promoted'), app('d', 2, 'Failed'), app('e', 3, 'Waiting')]).map((a) => a.name),
    ['c', 'b', 'a']));
});

describe('reverted and stopped', () => {
  test('changedSince names an image that is neither the Release\'s nor the one before it (someone else\'s edit)', () => {
    assert.equal(changedSince(obs('a', { specImage: 'a:hotfix' }), 'a:v2', 'a:old'), 'a:hotfix');
    assert.equal(changedSince(obs('a'), 'a:v2', 'a:old'), undefined, 'the image before');
    assert.equal(changedSince(obs('a', { specImage: 'a:v2' }), 'a:v2', 'a:old'), undefined, 'the Release\'s');
    assert.equal(changedSince({ name: 'a', exists: false, running: false }, 'a:v2', 'a:old'), undefined, 'gone');
  });
  test('reverted once spec and Deployment run the old image and it is Running', () => {
    assert.equal(reverted(obs('a'), 'a:old'), true);
    assert.equal(reverted(obs('a', { deploymentImage: 'a:v2' }), 'a:old'), false);
    assert.equal(reverted(obs('a', { running: false }), 'a:old'), false);
    assert.equal(reverted({ name: 'a', exists: false, running: false }, 'a:old'), true);
  });
  test('a Deployment admission pinned to a digest runs the old image; one with another tag or digest does not', () => {
    const digest = `sha256:${'0'.repeat(63)}1`;
    assert.equal(reverted(obs('a', { deploymentImage: `a:old@${digest}` }), 'a:old'), true);
    assert.equal(reverted(obs('a', { deploymentImage: `a:v2@${digest}` }), 'a:old'), false);
    assert.equal(reverted(obs('a', { deploymentImage: `a@${digest}` }), 'a:old'), false, 'the tag dropped: the digest may be any tag\'s');
  });
  test('a Deployment that runs what admission stored for the old image before the Release (a registry mirror) is reverted', () => {
    const mirrored = `mirror.local/a:old@sha256:${'0'.repeat(63)}1`;
    assert.equal(reverted(obs('a', { deploymentImage: mirrored }), 'a:old', mirrored), true);
    assert.equal(reverted(obs('a', { deploymentImage: mirrored }), 'a:old'), false, 'not without knowing what was stored');
    assert.equal(reverted(obs('a', { deploymentImage: 'mirror.local/a:v2' }), 'a:old', mirrored), false, 'another image');
    assert.equal(reverted(obs('a', { deploymentImage: mirrored, specImage: 'a:v2' }), 'a:old', mirrored), false, 'the spec not put back yet');
    assert.equal(reverted(obs('a', { deploymentImage: mirrored, running: false }), 'a:old', mirrored), false, 'not Running yet');
  });
  test('stopped once its canary ended, or never started', () => {
    assert.equal(stopped(obs('a', { phase: 'Aborted' }), 'v2'), true);
    assert.equal(stopped(obs('a', { phase: 'Paused' }), 'v2'), false);
    assert.equal(stopped(obs('a', { canary: { enabled: false } }), 'v2'), true);
  });
});

describe('releasePlan', () => {
  test('wave steps win over the release\'s; analysis and the pause carry over', () => {
    const parsed = parseRelease({
      apiVersion: 'myapp.example.com/v1', kind: 'Release', metadata: { name: 'r', namespace: 'n', generation: 4 },
      spec: {
        steps: [{ setWeight: 10 }], pauseBetweenWaves: {},
        analysis: { metrics: [{ name: 'ok', template: 'request-success-rate', thresholdRange: { min: 99 } }] },
        waves: [{ applications: [{ name: 'a', canaryVersion: 'v2' }], steps: [{ setWeight: 50 }] }, { name: 'front', applications: [{ name: 'b', canaryVersion: 'v3', image: 'b:3' }] }],
      },
    });
    assert.ok(parsed.ok, parsed.ok ? '' : parsed.message);
    const plan = releasePlan(parsed.release);
    assert.equal(plan.generation, 4);
    assert.equal(plan.pauseBetweenWavesMs, null);
    assert.deepEqual(plan.waves.map((w) => [w.name, w.steps?.[0]?.setWeight, w.apps]), [['wave 1', 50, [{ name: 'a', canaryVersion: 'v2' }]], ['front', 10, [{ name: 'b', canaryVersion: 'v3', image: 'b:3' }]]]);
    assert.equal(plan.waves[1]?.analysis?.metrics[0]?.name, 'ok');
  });
});

describe('formatRelease', () => {
  const state = (over: Partial<ReleaseState>): ReleaseState => ({
    namespace: 'shop', name: 'r1', phase: 'Progressing', wave: 1, waves: 2, message: 'wave 1: 0/1 promoted', pausedByUser: false, applications: [], ...over,
  });
  test('the wave it is in, or that none started (a refused Release)', () => {
    assert.match(formatRelease(state({})), /^release shop\/r1 — Progressing, wave 1\/2\n/);
    assert.match(formatRelease(state({ phase: 'Failed', wave: 0, message: 'refused: ...' })), /^release shop\/r1 — Failed, 2 wave\(s\), none started\n/);
  });
  test('a fleet release says where each Application is, how each cluster stands, and which cluster holds it', () => {
    const out = formatRelease(state({
      wave: 2, heldByCluster: 'eu-1', message: 'held: cluster eu-1 cannot be reached (looking at api): ...',
      applications: [
        { name: 'api', wave: 1, phase: 'Promoted', canaryVersion: 'v2' },
        { name: 'api', cluster: 'eu-1', wave: 2, phase: 'Progressing', canaryVersion: 'v2' },
        { name: 'web', cluster: 'eu-1', wave: 2, phase: 'Promoted', canaryVersion: 'v2' },
      ],
    }));
    assert.match(out, /\n {2}held by cluster eu-1: it goes on when that cluster answers\n/);
    assert.match(out, /\n {2}clusters: \(this cluster\): 1 Promoted · eu-1 \(unreachable\): 1 Progressing, 1 Promoted\n/);
    assert.match(out, /\n {2}wave 2 {2}eu-1 {11}api /);
    assert.doesNotMatch(formatRelease(state({ applications: [{ name: 'api', wave: 1, phase: 'Promoted', canaryVersion: 'v2' }] })), /clusters:|this cluster/, 'a release of one cluster reads as before');
  });
});

describe('fleet releases: keys, plans and outcomes', () => {
  test('an Application is keyed by its cluster: the same name in three clusters is three Applications', () => {
    assert.equal(releaseAppKey({ name: 'api' }), 'api');
    assert.equal(releaseAppKey({ name: 'api', cluster: 'b' }), 'b/api');
    const parsed = parseRelease({ apiVersion: 'myapp.example.com/v1', kind: 'Release', metadata: { name: 'r', generation: 3 }, spec: { waves: [{ applications: [{ name: 'api', canaryVersion: 'v2' }, { name: 'api', cluster: 'b', canaryVersion: 'v2' }] }] } });
    assert.ok(parsed.ok);
    assert.deepEqual(releasePlan(parsed.release).waves[0]?.apps, [{ name: 'api', canaryVersion: 'v2' }, { name: 'api', cluster: 'b', canaryVersion: 'v2' }]);
  });
  test('a wave fails on the Application of the right cluster, and says which', () => {
    const want = (cluster?: string) => ({ name: 'api', canaryVersion: 'v2', image: 'api:v2', ...(cluster ? { cluster } : {}) });
    const seen = (cluster: string | undefined, phase: string) => ({ name: 'api', exists: true, running: true, specImage: phase === 'Promoted' ? 'api:v2' : 'api:v1', canary: { enabled: phase !== 'Promoted', phase, version: 'v2', message: 'rolled back: the health gate failed' }, ...(cluster ? { cluster } : {}) });
    const out = waveOutcome([want(), want('b')], [seen(undefined, 'Promoted'), seen('b', 'RolledBack')]);
    assert.deepEqual(out.kind === 'failed' ? [out.app, out.message] : out, ['b/api', 'the canary v2 of api in cluster b was rolled back: the health gate failed']);
    assert.deepEqual(waveOutcome([want(), want('b')], [seen(undefined, 'Promoted'), seen('b', 'Promoted')]), { kind: 'promoted' });
    assert.deepEqual(waveOutcome([want('b')], [seen(undefined, 'RolledBack'), seen('b', 'Progressing')]), { kind: 'running' }, "the hub's Application of that name is another one");
  });
});
