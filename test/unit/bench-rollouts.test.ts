import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { parseOptions } from '../../bench/options.ts';
import { rolloutsTargets } from '../../bench/report.ts';
import { plan } from '../../bench/rollout-plan.ts';
import { rolloutFigures, timerLateness, type AppTimes } from '../../bench/rollouts.ts';

const rows = (t: ReturnType<typeof rolloutsTargets>) => t.map((x) => `${x.target}: ${x.results[0]!.verdict} ${x.results[0]!.value}`);
const at = (ms: number) => ({ seconds: Math.floor(ms / 1000), nanos: (ms % 1000) * 1e6 });

describe('bench options: --scenario rollouts', () => {
  test('100 apps by default, one process, its promote floor, no promote sample', () => {
    const c = parseOptions(['--scenario', 'rollouts']);
    assert.ok('run' in c);
    assert.deepEqual([c.run.scenario, c.run.apps, c.run.workers, c.run.floor, c.run.promoteSample], ['rollouts', 100, [1], true, 0]);
    const nf = parseOptions(['--scenario', 'rollouts', '--no-floor']);
    assert.ok('run' in nf && nf.run.floor === false);
    const n = parseOptions(['--scenario', 'rollouts', '--apps', '20', '--idle-seconds', '5', '--promote-sample', '2']);
    assert.ok('run' in n);
    assert.deepEqual([n.run.apps, n.run.idleSeconds, n.run.promoteSample], [20, 5, 2]);
  });

  test('refuses --workers; the other scenarios keep their defaults', () => {
    assert.throws(() => parseOptions(['--scenario', 'rollouts', '--workers', '2']), /--scenario rollouts converges with one operator process/);
    assert.throws(() => parseOptions(['--scenario', 'rollouts', '--apps', '0']), /--apps must be an integer >= 1/);
    assert.throws(() => parseOptions(['--scenario', 'restart']), /--apps must be an integer >= 1/);
    const c = parseOptions(['--apps', '10']);
    assert.ok('run' in c && c.run.promoteSample === 5);
  });
});

describe('rolloutFigures', () => {
  test('each figure only where both ends were seen; lateness against weight 20 + the pause', () => {
    const full: AppTimes = {
      patchedAt: 1000, firstWeightAt: 1800, secondWeightAt: 1800 + plan.pauseMs + 300, pauseEndsAt: 1800 + plan.pauseMs + 100,
      approvalAt: 9000, promoteSentAt: 10_000, promoteAcceptedAt: 10_050, stableAt: 10_900, promotedAt: 11_200,
    };
    const stuck: AppTimes = { patchedAt: 1000, firstWeightAt: 2500, ended: 'RolledBack: gate' };
    assert.deepEqual(rolloutFigures([full, stuck], plan.pauseMs), {
      toFirstWeightMs: [800, 1500], pauseLatenessMs: [300], pauseLatenessFromEndMs: [200],
      promoteMs: [900], promoteFromAcceptedMs: [850], promoteUpdateMs: [50], promotedMs: [1200],
    });
  });
});

describe('timerLateness', () => {
  test('fired and seen (next workflow task start) against TimerStarted + timeout; cancelled timers left out', () => {
    const events = [
      { eventType: 17, eventTime: at(10_000), timerStartedEventAttributes: { timerId: '1', startToFireTimeout: { seconds: 2, nanos: 0 } } },
      { eventType: 17, eventTime: at(10_000), timerStartedEventAttributes: { timerId: '2', startToFireTimeout: { seconds: 60 } } },
      { eventType: 18, eventTime: at(12_020), timerFiredEventAttributes: { timerId: '1' } },
      { eventType: 6, eventTime: at(12_021) },
      { eventType: 5, eventTime: at(12_400) },
      // timer 2 cancelled: no TimerFired
      { eventType: 17, eventTime: at(13_000), timerStartedEventAttributes: { timerId: '3', startToFireTimeout: { seconds: 5 } } },
      { eventType: 18, eventTime: at(18_000), timerFiredEventAttributes: { timerId: '3' } },
      { eventType: 5, eventTime: at(21_000) },
      { eventType: 5, eventTime: at(30_000) },
    ];
    const t = timerLateness(events);
    assert.deepEqual(t.firedMs.map(Math.round), [20, 0]);
    assert.deepEqual(t.seenMs.map(Math.round), [400, 3000]);
  });
});

describe('rolloutsTargets', () => {
  const base = { apps: 4, plan, errors: [] as string[], timers: { histories: 4, timers: 20, fired: null, seen: { count: 20, min: 0, p50: 100, p95: 500, p99: 900, max: 1500, mean: 200 } } };
  test('PASS and MISS; promote p99 and pause lateness against one gate interval', () => {
    assert.deepEqual(rows(rolloutsTargets({ ...base, promoteMs: [800, 900, 1000, 6000], pauseLatenessMs: [100, 200, 300, 2500] })), [
      'promote -> 100% stable p50 < 1.5 s: PASS 0.90 s',
      'promote -> 100% stable p99 < 5 s: MISS 6.00 s',
      'no timed pause late by more than one gate interval (2 s): MISS max 2.50 s',
      'no timer seen late by more than one gate interval (2 s): PASS max 1.50 s (20 timers in 4 histories)',
      'every rollout reached its approval and was promoted: PASS 4/4, 0 errors',
    ]);
  });
  test('apps that never got there count as never; no histories is n/a', () => {
    assert.deepEqual(rows(rolloutsTargets({ ...base, timers: null, errors: ['app-3: RolledBack: gate'], promoteMs: [800, 900, 1000], pauseLatenessMs: [100, 200, 300] })), [
      'promote -> 100% stable p50 < 1.5 s: PASS 0.90 s (1/4 did not complete)',
      'promote -> 100% stable p99 < 5 s: MISS did not complete (1/4 did not complete)',
      'no timed pause late by more than one gate interval (2 s): MISS max did not complete (1/4 did not complete)',
      'no timer seen late by more than one gate interval (2 s): n/a not measured',
      'every rollout reached its approval and was promoted: MISS 3/4, 1 errors',
    ]);
  });
  test("the promote floor's percentiles beside the operator's, with the ratio; a floor promote that failed counts as never", () => {
    const floor = { namespace: 'f', apps: 4, setupSeconds: 1, promoteMs: [300, 400, 500, 600], promoteSeconds: 0.6, writesPerApp: 3, cpu: {}, load: { samples: 0 } as never, errors: [] };
    assert.deepEqual(rows(rolloutsTargets({ ...base, floor, promoteMs: [800, 900, 1000, 6000], pauseLatenessMs: [100] })).slice(0, 2), [
      'promote -> 100% stable p50 < 1.5 s: PASS 0.90 s; floor 0.40 s, 2.25x',
      'promote -> 100% stable p99 < 5 s: MISS 6.00 s; floor 0.60 s, 10.00x',
    ]);
    const broken = { ...floor, promoteMs: [300, 400, 500], errors: ['app-3: timeout'] };
    assert.deepEqual(rows(rolloutsTargets({ ...base, floor: broken, promoteMs: [800, 900, 1000, 6000], pauseLatenessMs: [100] }))[1], 'promote -> 100% stable p99 < 5 s: MISS 6.00 s; floor did not complete');
  });
});
