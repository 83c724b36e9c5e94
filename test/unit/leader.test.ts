import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { decideLease, microTime, nextLeaseSpec, observe, type LeaseDecision, type LeaseSpec, type Observation } from '../../operator/leader.ts';

const T0 = Date.parse('2026-01-01T00:00:00.000Z');
const seen = (atMs: number, resourceVersion = '7'): Observation => ({ resourceVersion, observedAt: T0 + atMs });

describe('decideLease', () => {
  const cases: { name: string; spec: LeaseSpec; observed: Observation; nowMs: number; want: LeaseDecision }[] = [
    { name: 'my own lease is renewed', spec: { holderIdentity: 'me', leaseDurationSeconds: 15 }, observed: seen(0), nowMs: 60_000, want: { action: 'renew' } },
    { name: 'a released lease (empty holder) is taken at once', spec: { holderIdentity: '', leaseDurationSeconds: 1 }, observed: seen(0), nowMs: 0, want: { action: 'acquire', why: 'released', previousHolder: '' } },
    { name: 'a lease without holder is taken at once', spec: {}, observed: seen(0), nowMs: 0, want: { action: 'acquire', why: 'released', previousHolder: '' } },
    { name: "another's lease seen 5 s ago waits", spec: { holderIdentity: 'other', leaseDurationSeconds: 15 }, observed: seen(0), nowMs: 5_000, want: { action: 'wait', holder: 'other', expiresInMs: 10_000 } },
    { name: "another's lease expires exactly at observedAt + duration", spec: { holderIdentity: 'other', leaseDurationSeconds: 15 }, observed: seen(0), nowMs: 15_000, want: { action: 'acquire', why: 'expired', previousHolder: 'other' } },
    { name: "another's lease 1 ms before expiry still waits", spec: { holderIdentity: 'other', leaseDurationSeconds: 15 }, observed: seen(0), nowMs: 14_999, want: { action: 'wait', holder: 'other', expiresInMs: 1 } },
    { name: 'the default duration applies when the lease has none', spec: { holderIdentity: 'other' }, observed: seen(0), nowMs: 4_000, want: { action: 'acquire', why: 'expired', previousHolder: 'other' } },
    // The holder's renewTime is ignored: a holder whose clock runs ahead could otherwise never be taken over, or one behind be taken over while alive.
    { name: 'a renewTime far in the past does not expire a lease seen changing just now', spec: { holderIdentity: 'other', leaseDurationSeconds: 15, renewTime: '2000-01-01T00:00:00.000000Z' }, observed: seen(1_000), nowMs: 2_000, want: { action: 'wait', holder: 'other', expiresInMs: 14_000 } },
  ];
  for (const c of cases) {
    test(c.name, () => assert.deepEqual(decideLease(c.spec, c.observed, 'me', T0 + c.nowMs, 4), c.want));
  }
});

describe('observe', () => {
  test('keeps the first sighting while the resourceVersion is unchanged', () => {
    const first = observe(undefined, '10', T0);
    assert.deepEqual(observe(first, '10', T0 + 9_000), { resourceVersion: '10', observedAt: T0 });
  });
  test('restarts the clock when the lease changed (the holder renewed)', () => {
    assert.deepEqual(observe(seen(0, '10'), '11', T0 + 9_000), { resourceVersion: '11', observedAt: T0 + 9_000 });
  });
  test('a holder that renews is never seen expired; one that stops is, a lease duration after its last renewal was seen', () => {
    let o: Observation | undefined;
    let rv = 1;
    // The holder renews every 2 s for 20 s: the candidate, looking every second, always waits.
    for (let t = 0; t <= 20_000; t += 1_000) {
      if (t % 2_000 === 0) rv++;
      o = observe(o, String(rv), T0 + t);
      assert.equal(decideLease({ holderIdentity: 'other', leaseDurationSeconds: 5 }, o, 'me', T0 + t, 15).action, 'wait', `at ${t} ms`);
    }
    // Then it dies: the last change was seen at 20 s, so the lease is taken at 25 s and not before.
    for (let t = 21_000; t <= 25_000; t += 1_000) {
      o = observe(o, String(rv), T0 + t);
      assert.equal(decideLease({ holderIdentity: 'other', leaseDurationSeconds: 5 }, o, 'me', T0 + t, 15).action, t < 25_000 ? 'wait' : 'acquire', `at ${t} ms`);
    }
  });
});

describe('nextLeaseSpec', () => {
  const now = T0 + 1_234;
  test('a fresh lease is acquired without a transition', () => {
    assert.deepEqual(nextLeaseSpec(null, { action: 'acquire', why: 'released', previousHolder: '' }, 'me', 15, now), {
      holderIdentity: 'me', leaseDurationSeconds: 15, acquireTime: '2026-01-01T00:00:01.234000Z', renewTime: '2026-01-01T00:00:01.234000Z', leaseTransitions: 0,
    });
  });
  test('renewing keeps acquireTime and transitions, moves renewTime', () => {
    const current: LeaseSpec = { holderIdentity: 'me', leaseDurationSeconds: 15, acquireTime: '2025-12-31T23:00:00.000000Z', renewTime: '2025-12-31T23:59:59.000000Z', leaseTransitions: 3 };
    assert.deepEqual(nextLeaseSpec(current, { action: 'renew' }, 'me', 15, now), { ...current, renewTime: '2026-01-01T00:00:01.234000Z' });
  });
  test("taking over another's expired lease counts a transition", () => {
    const current: LeaseSpec = { holderIdentity: 'other', leaseDurationSeconds: 15, acquireTime: '2025-12-31T23:00:00.000000Z', leaseTransitions: 3 };
    const next = nextLeaseSpec(current, { action: 'acquire', why: 'expired', previousHolder: 'other' }, 'me', 15, now);
    assert.equal(next.holderIdentity, 'me');
    assert.equal(next.leaseTransitions, 4);
    assert.equal(next.acquireTime, '2026-01-01T00:00:01.234000Z');
  });
  test('taking over a released lease counts a transition too', () => {
    const current: LeaseSpec = { holderIdentity: null, leaseDurationSeconds: 1, leaseTransitions: 3 };
    assert.equal(nextLeaseSpec(current, { action: 'acquire', why: 'released', previousHolder: '' }, 'me', 15, now).leaseTransitions, 4);
  });
});

test('microTime writes six fractional digits, as metav1.MicroTime requires', () => {
  assert.equal(microTime(Date.parse('2026-03-04T05:06:07.089Z')), '2026-03-04T05:06:07.089000Z');
  assert.match(microTime(Date.now()), /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z$/);
});
