import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import type { CanaryDrift, CanaryHealth } from '../../activities/types.ts';
import { isTerminal } from '../../api/constants.ts';
import { reachesCanary, routable, routeAtStep, sameRoute, withStep, type CanaryRoute } from '../../routing/route.ts';
import { failureCounts, gateStep, gateVerdict, interruption, routeAfterGate } from '../../workflows/rollout/decide.ts';
import { describeStep, type HealthGates, type PlanStep } from '../../reconcile/plan.ts';

const gates: HealthGates = { minReadyReplicas: 2, maxRestarts: 3, intervalMs: 10_000, failureThreshold: 3, initialDelayMs: 0 };

/** A healthy canary of 2 replicas, with `h` overriding any field. */
const health = (h: Partial<CanaryHealth> = {}): CanaryHealth => ({ exists: true, readyReplicas: 2, desiredReplicas: 2, restarts: 0, ...h });

const weight = (w: number): PlanStep => ({ kind: 'weight', weight: w });
const pause = (ms: number | null): PlanStep => ({ kind: 'pause', ms });

describe('gateVerdict', () => {
  const cases: { name: string; health: CanaryHealth; ok: boolean; reason: string }[] = [
    { name: 'healthy', health: health(), ok: true, reason: '2/2 canary replicas ready, 0 restarts' },
    { name: 'restarts at the limit pass', health: health({ restarts: 3 }), ok: true, reason: '2/2 canary replicas ready, 3 restarts' },
    { name: 'more ready than required', health: health({ readyReplicas: 3, desiredReplicas: 3 }), ok: true, reason: '3/3 canary replicas ready, 0 restarts' },
    { name: 'no canary Deployment', health: health({ exists: false, readyReplicas: 0, restarts: 9 }), ok: false, reason: 'the canary Deployment does not exist' },
    { name: 'one restart too many', health: health({ restarts: 4 }), ok: false, reason: 'canary containers restarted 4 times (at most 3 allowed)' },
    { name: 'too few ready', health: health({ readyReplicas: 1 }), ok: false, reason: '1/2 canary replicas ready (at least 2 required)' },
    { name: 'restarts are reported before readiness', health: health({ readyReplicas: 0, restarts: 5 }), ok: false, reason: 'canary containers restarted 5 times (at most 3 allowed)' },
    {
      name: 'too few ready, naming what keeps a pod from running',
      health: health({ readyReplicas: 0, issue: { reason: 'ImagePullBackOff', message: 'pod shop-canary-1: container app: ImagePullBackOff: Back-off pulling image "x:2"' } }),
      ok: false, reason: '0/2 canary replicas ready (at least 2 required): pod shop-canary-1: container app: ImagePullBackOff: Back-off pulling image "x:2"',
    },
    {
      name: 'too many restarts, naming the crash loop',
      health: health({ readyReplicas: 1, restarts: 4, issue: { reason: 'CrashLoopBackOff', message: 'pod shop-canary-1: container app: CrashLoopBackOff: back-off 40s' } }),
      ok: false, reason: 'canary containers restarted 4 times (at most 3 allowed): pod shop-canary-1: container app: CrashLoopBackOff: back-off 40s',
    },
    {
      name: 'a passing gate does not dwell on one pod of several',
      health: health({ readyReplicas: 3, desiredReplicas: 3, issue: { reason: 'CreateContainerConfigError', message: 'pod b: container app: CreateContainerConfigError: secret "s" not found' } }),
      ok: true, reason: '3/3 canary replicas ready, 0 restarts',
    },
  ];
  for (const c of cases) test(c.name, () => assert.deepEqual(gateVerdict(c.health, gates), { ok: c.ok, reason: c.reason }));
});

describe('routable: never route to a canary without a ready replica', () => {
  const cases: { name: string; route: CanaryRoute; ready: number; want: CanaryRoute }[] = [
    { name: 'no ready replica: nothing, weight', route: { weight: 30 }, ready: 0, want: { weight: 0 } },
    { name: 'no ready replica: nothing, header route', route: { weight: 0, headers: [{ header: 'x', exact: '1' }] }, ready: 0, want: { weight: 0 } },
    { name: 'no ready replica: nothing, mirror', route: { weight: 0, mirror: 50 }, ready: 0, want: { weight: 0 } },
    { name: 'one ready replica: the route', route: { weight: 30, mirror: 10 }, ready: 1, want: { weight: 30, mirror: 10 } },
  ];
  for (const c of cases) test(c.name, () => assert.deepEqual(routable(c.route, c.ready), c.want));
  test('reachesCanary', () => {
    assert.equal(reachesCanary({ weight: 0 }), false);
    assert.equal(reachesCanary({ weight: 0, headers: [] }), false);
    assert.equal(reachesCanary({ weight: 0, headers: [{ header: 'x', exact: '1' }] }), true);
    assert.equal(reachesCanary({ weight: 0, mirror: 1 }), true);
  });
  test('sameRoute ignores absent versus empty extras', () => {
    assert.equal(sameRoute({ weight: 5 }, { weight: 5, headers: [], mirror: 0 }), true);
    assert.equal(sameRoute({ weight: 5 }, { weight: 6 }), false);
  });
});

describe('routeAfterGate', () => {
  const cases: { name: string; current: CanaryRoute; target: CanaryRoute; ready: number; ok: boolean; want: CanaryRoute }[] = [
    { name: 'a passing gate moves traffic to the target', current: { weight: 0 }, target: { weight: 30 }, ready: 2, ok: true, want: { weight: 30 } },
    { name: 'a failing gate does not move traffic up', current: { weight: 10 }, target: { weight: 30 }, ready: 1, ok: false, want: { weight: 10 } },
    { name: 'no ready replica drops everything at once, pass or fail', current: { weight: 30, mirror: 5 }, target: { weight: 30, mirror: 5 }, ready: 0, ok: false, want: { weight: 0 } },
    { name: 'a passing gate can lower the weight to a lower target', current: { weight: 50 }, target: { weight: 20 }, ready: 2, ok: true, want: { weight: 20 } },
  ];
  for (const c of cases) test(c.name, () => assert.deepEqual(routeAfterGate(c.current, c.target, health({ readyReplicas: c.ready }), c.ok), c.want));
});

describe('failureCounts: the start-up grace', () => {
  const cases: { name: string; everReady: boolean; ageMs: number; counts: boolean }[] = [
    { name: 'starting, inside the grace: not counted', everReady: false, ageMs: 5_000, counts: false },
    { name: 'never ready, grace over: counted', everReady: false, ageMs: 60_000, counts: true },
    { name: 'was ready once: counted even inside the grace', everReady: true, ageMs: 1_000, counts: true },
  ];
  for (const c of cases) test(c.name, () => assert.equal(failureCounts({ everReady: c.everReady, now: 100_000 + c.ageMs, createdAt: 100_000, initialDelayMs: 60_000 }), c.counts));
  test('no grace: every failure counts', () => assert.equal(failureCounts({ everReady: false, now: 5, createdAt: 5, initialDelayMs: 0 }), true));
});

describe('interruption', () => {
  const base = {
    abort: undefined, consecutiveFailures: 0, lastGate: undefined, gates, now: 1000, deadline: 2000, pausing: false,
    progressDeadlineMs: 60_000, message: 'step 2/4',
  };
  const lastGate = { at: '', ok: false, readyReplicas: 0, restarts: 0, reason: '0/2 ready' };
  test('nothing to stop for', () => assert.equal(interruption(base), null));
  test('an abort wins over everything and says who', () => assert.deepEqual(
    interruption({ ...base, abort: { by: 'ann', reason: 'bad' }, consecutiveFailures: 9, now: 5000 }), { phase: 'Aborted', reason: 'CanaryAborted', message: 'bad', by: 'ann' }));
  test('an abort without a reason', () => assert.deepEqual(interruption({ ...base, abort: {} }), { phase: 'Aborted', reason: 'CanaryAborted', message: 'aborted', by: 'unknown' }));
  test('failures below the threshold go on', () => assert.equal(interruption({ ...base, consecutiveFailures: 2, lastGate }), null));
  test('failures at the threshold roll back with the last verdict', () => assert.deepEqual(
    interruption({ ...base, consecutiveFailures: 3, lastGate }),
    { phase: 'RolledBack', reason: 'HealthGateFailed', message: 'health gate failed 3 times in a row: 0/2 ready' }));
  test('the deadline rolls back', () => assert.deepEqual(
    interruption({ ...base, now: 2000 }), { phase: 'RolledBack', reason: 'ProgressDeadlineExceeded', message: 'progress deadline of 60 s exceeded (step 2/4)' }));
  test('the deadline does not run out during a pause', () => assert.equal(interruption({ ...base, now: 9000, pausing: true }), null));
});

describe('isTerminal', () => {
  const cases: [string | undefined, boolean][] = [
    ['Promoted', true],
    ['Aborted', true],
    ['RolledBack', true],
    ['Failed', true],
    ['Progressing', false],
    ['Paused', false],
    ['Promoting', false],
    ['Aborting', false],
    ['Idle', false],
    ['', false],
    [undefined, false],
  ];
  for (const [phase, terminal] of cases) test(`${phase ?? 'undefined'}: ${terminal}`, () => assert.equal(isTerminal(phase), terminal));
});

describe('describeStep', () => {
  const cases: { step: PlanStep | undefined; index: number; total: number; text: string }[] = [
    { step: weight(25), index: 0, total: 4, text: 'step 1/4: set canary weight to 25%' },
    { step: pause(90_000), index: 1, total: 4, text: 'step 2/4: pause for 1m30s' },
    { step: pause(1_499), index: 2, total: 4, text: 'step 3/4: pause for 1 s' },
    { step: pause(0), index: 2, total: 4, text: 'step 3/4: pause for 0 ms' },
    { step: pause(400), index: 2, total: 4, text: 'step 3/4: pause for 400 ms' },
    { step: pause(600_000), index: 1, total: 4, text: 'step 2/4: pause for 10m' },
    { step: pause(3 * 86_400_000), index: 1, total: 4, text: 'step 2/4: pause for 72h' },
    { step: pause(3_661_000), index: 1, total: 4, text: 'step 2/4: pause for 1h1m1s' },
    { step: pause(59_600), index: 1, total: 4, text: 'step 2/4: pause for 1m' },
    { step: pause(2_562_047 * 3_600_000), index: 1, total: 4, text: 'step 2/4: pause for 2562047h' },
    { step: pause(null), index: 3, total: 4, text: 'step 4/4: pause until promoted' },
    { step: undefined, index: 4, total: 4, text: 'all 4 steps done' },
  ];
  for (const c of cases) test(c.text, () => assert.equal(describeStep(c.step, c.index, c.total), c.text));
});

describe('withStep and routeAtStep: where a rollout taken up again at a step stands', () => {
  const header = (match: { header: string; exact: string }[]): PlanStep => ({ kind: 'header', match });
  const mirror = (percent: number): PlanStep => ({ kind: 'mirror', percent });
  const steps = [weight(10), header([{ header: 'x', exact: '1' }]), pause(null), mirror(20), weight(50), header([]), mirror(0)];
  const cases: { step: number; want: CanaryRoute }[] = [
    { step: 0, want: { weight: 0 } },
    { step: 1, want: { weight: 10 } },
    { step: 2, want: { weight: 10, headers: [{ header: 'x', exact: '1' }] } },
    { step: 3, want: { weight: 10, headers: [{ header: 'x', exact: '1' }] } },
    { step: 4, want: { weight: 10, headers: [{ header: 'x', exact: '1' }], mirror: 20 } },
    { step: 5, want: { weight: 50, headers: [{ header: 'x', exact: '1' }], mirror: 20 } },
    { step: 6, want: { weight: 50, mirror: 20 } },
    { step: 7, want: { weight: 50 } },
  ];
  for (const c of cases) test(`before step ${c.step + 1}: ${JSON.stringify(c.want)}`, () => assert.deepEqual(routeAtStep(steps, c.step), c.want));
  test('a pause step changes nothing', () => assert.deepEqual(withStep({ weight: 30, mirror: 5 }, pause(1000)), { weight: 30, mirror: 5 }));
  test('an empty header match and a 0% mirror remove what they name', () => {
    assert.deepEqual(withStep({ weight: 30, headers: [{ header: 'x', exact: '1' }] }, header([])), { weight: 30 });
    assert.deepEqual(withStep({ weight: 30, mirror: 5 }, mirror(0)), { weight: 30 });
  });
});

describe('gateStep: one gate check, from what it saw to what to do', () => {
  const seen = (h: Partial<CanaryHealth> = {}, o: { asIntended?: boolean; target?: boolean; drift?: CanaryDrift; specChanged?: boolean } = {}) => ({
    health: health(h), routed: { stable: 80, canary: 20, total: 100, headerRoute: false, mirror: 0 }, asIntended: o.asIntended ?? true, target: o.target ?? true,
    ...(o.drift ? { drift: o.drift } : {}), ...(o.specChanged ? { specChanged: true } : {}),
  });
  const base = { gates, now: 100_000, createdAt: 0, readySince: undefined, lastCountedAt: 0, consecutiveFailures: 0, route: { weight: 20 }, target: { weight: 20 } };
  test('healthy, as set: clean, nothing to do, ready from now', () => {
    const g = gateStep({ ...base, seen: seen() });
    assert.deepEqual([g.clean, g.reroute, g.recreate, g.consecutiveFailures, g.readySince], [true, undefined, undefined, 0, new Date(100_000).toISOString()]);
  });
  test('a passing gate moves traffic up to the target', () => {
    const g = gateStep({ ...base, seen: seen(), route: { weight: 0 }, target: { weight: 30 } });
    assert.deepEqual(g.reroute, { route: { weight: 30 }, repair: false, why: 'gate passed: routing 30% to the canary' });
  });
  test('no ready replica: everything to stable at once, and the failure counted', () => {
    const g = gateStep({ ...base, seen: seen({ readyReplicas: 0 }), readySince: 'earlier' });
    assert.deepEqual(g.reroute, { route: { weight: 0 }, repair: false, why: 'the canary has no ready replica: all traffic moved to stable' });
    assert.deepEqual([g.counted, g.consecutiveFailures, g.clean], [true, 1, false]);
  });
  test('a failure during the start-up grace is recorded, not counted', () => {
    const g = gateStep({ ...base, gates: { ...gates, initialDelayMs: 60_000 }, now: 10_000, seen: seen({ readyReplicas: 1 }) });
    assert.deepEqual([g.record.grace, g.counted, g.consecutiveFailures], [true, false, 0]);
  });
  test('at most one failure counted per interval, however many checks', () => {
    const g = gateStep({ ...base, seen: seen({ restarts: 9 }), lastCountedAt: 95_000, consecutiveFailures: 1, readySince: 'earlier' });
    assert.deepEqual([g.counted, g.consecutiveFailures], [false, 1]);
  });
  test('a hand edit of the routes is a repair, with what they route now', () => {
    const g = gateStep({ ...base, seen: seen({}, { asIntended: false }) });
    assert.deepEqual(g.reroute, { route: { weight: 20 }, repair: true, why: 'the routes do not route what the rollout set (they route 20%): routing 20% again' });
  });
  test('routes the operator wrote last that differ from what it would write now: the spec changed, written again, no repair', () => {
    const g = gateStep({ ...base, seen: seen({}, { asIntended: false, specChanged: true }) });
    assert.deepEqual(g.reroute, { route: { weight: 20 }, repair: false, why: 'the Application\'s spec changed what the routes say: written again, routing 20%' });
    assert.equal(g.clean, false);
  });
  test('a canary re-imaged by hand, however healthy: no traffic, and put back', () => {
    const drift = { what: 'image', message: "the canary Deployment's container app runs evil:1, not the rollout's app:v2" } as const;
    const g = gateStep({ ...base, seen: seen({}, { drift }) });
    assert.deepEqual(g.reroute, { route: { weight: 0 }, repair: false, why: `${drift.message}: all traffic moved to stable` });
    assert.deepEqual([g.recreate, g.clean, g.record.ok], [drift.message, false, true]);
    // Already off the canary: nothing to move, still put back.
    const off = gateStep({ ...base, route: { weight: 0 }, seen: seen({}, { drift }) });
    assert.deepEqual([off.reroute, off.recreate], [undefined, drift.message]);
  });
  test('a canary resized by hand is put back; its ready pods keep their traffic, and one scaled to nothing has none', () => {
    const resized = gateStep({ ...base, seen: seen({ readyReplicas: 3, desiredReplicas: 3 }, { drift: { what: 'replicas', message: "the canary Deployment has 3 replicas, not the rollout's 2" } }) });
    assert.deepEqual([resized.recreate, resized.reroute], ["the canary Deployment has 3 replicas, not the rollout's 2", undefined]);
    const scaled = gateStep({ ...base, seen: seen({ readyReplicas: 0, desiredReplicas: 0 }, { drift: { what: 'replicas', message: "the canary Deployment has 0 replicas, not the rollout's 1" } }), readySince: 'earlier' });
    assert.equal(scaled.recreate, "the canary Deployment has 0 replicas, not the rollout's 1");
    assert.deepEqual(scaled.reroute, { route: { weight: 0 }, repair: false, why: 'the canary has no ready replica: all traffic moved to stable' });
  });
  test('a deleted canary Deployment or routing target is put back', () => {
    assert.equal(gateStep({ ...base, seen: seen({ exists: false, readyReplicas: 0 }) }).recreate, 'the canary Deployment is gone');
    assert.equal(gateStep({ ...base, seen: seen({}, { target: false }) }).recreate, 'what the canary is routed to (its subset, its Service) is gone');
  });
});
