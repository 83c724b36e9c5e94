import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import type { CanaryHealth, HealthGates, PlanStep } from '../../workflows/messages.ts';
import { describeStep, gateVerdict, isTerminal, safeWeight, weightAfter } from '../../workflows/rollout-logic.ts';

const gates: HealthGates = { minReadyReplicas: 2, maxRestarts: 3, intervalMs: 10_000, failureThreshold: 3 };

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
  ];
  for (const c of cases) test(c.name, () => assert.deepEqual(gateVerdict(c.health, gates), { ok: c.ok, reason: c.reason }));
});

describe('safeWeight', () => {
  const cases: { name: string; target: number; ready: number; weight: number }[] = [
    { name: 'no ready replica: no traffic', target: 30, ready: 0, weight: 0 },
    { name: 'one ready replica: the target', target: 30, ready: 1, weight: 30 },
    { name: 'target zero stays zero', target: 0, ready: 2, weight: 0 },
    { name: 'full weight', target: 100, ready: 2, weight: 100 },
  ];
  for (const c of cases) test(c.name, () => assert.equal(safeWeight(c.target, health({ readyReplicas: c.ready })), c.weight));
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
    { step: pause(90_000), index: 1, total: 4, text: 'step 2/4: pause for 90 s' },
    { step: pause(1_499), index: 2, total: 4, text: 'step 3/4: pause for 1 s' },
    { step: pause(0), index: 2, total: 4, text: 'step 3/4: pause for 0 ms' },
    { step: pause(400), index: 2, total: 4, text: 'step 3/4: pause for 400 ms' },
    { step: pause(null), index: 3, total: 4, text: 'step 4/4: pause until promoted or resumed' },
    { step: undefined, index: 4, total: 4, text: 'all 4 steps done' },
  ];
  for (const c of cases) test(c.text, () => assert.equal(describeStep(c.step, c.index, c.total), c.text));
});

describe('weightAfter', () => {
  const steps = [pause(1000), weight(10), pause(60_000), weight(50), pause(null), weight(0)];
  const cases: { done: number; weight: number }[] = [
    { done: 0, weight: 0 },
    { done: 1, weight: 0 },
    { done: 2, weight: 10 },
    { done: 3, weight: 10 },
    { done: 4, weight: 50 },
    { done: 5, weight: 50 },
    { done: 6, weight: 0 },
    { done: 9, weight: 0 },
  ];
  for (const c of cases) test(`after ${c.done} steps: ${c.weight}%`, () => assert.equal(weightAfter(steps, c.done), c.weight));
  test('no steps', () => assert.equal(weightAfter([], 3), 0));
});
