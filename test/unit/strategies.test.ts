// The strategies as plans (reconcile/strategies/), the routers without a proxy as arithmetic and selectors
// (activities/routers/selector.ts), and the registry's names agreeing with the workflow functions.
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { parseApplication, type Application } from '../../api/application.ts';
import { canaryPodsFor, podShare, selected } from '../../activities/routers/selector.ts';
import { rolloutPlan } from '../../reconcile/canary-plan.ts';
import { renderChildren } from '../../render/index.ts';
import { children } from '../../render/children.ts';
import { rolloutWorkflowTypes } from '../../workflows/contract.ts';
import { describeStep } from '../../reconcile/plan.ts';
import { rolloutWorkflows } from '../../workflows/strategies.ts';
import { UID } from '../fixtures/applications.ts';
import type { JsonObject } from '../fixtures/spec-examples.ts';

function app(spec: JsonObject): Application {
  const parsed = parseApplication({ apiVersion: 'myapp.example.com/v1', kind: 'Application', metadata: { name: 'shop', namespace: 'prod', uid: UID, generation: 1 }, spec });
  if (!parsed.ok) throw new Error(`fixture is invalid: ${parsed.message}`);
  return parsed.app;
}

const blueGreen = (bg: JsonObject = {}, extra: JsonObject = {}) =>
  app({ image: 'shop:1', replicas: 3, serviceMesh: { canary: { enabled: true, canaryVersion: 'v2', image: 'shop:2', strategy: 'blueGreen', blueGreen: bg, ...extra } } });
const metrics = { analysis: { interval: '10s', metrics: [{ name: 'ok', query: 'vector(1)', thresholdRange: { min: 1 } }] } };

describe('blue-green as a plan', () => {
  test('without a router: the Service switches; manual promotion; the old version kept 30 s', () => {
    const plan = rolloutPlan(blueGreen())!;
    assert.equal(plan.strategy, 'blueGreen');
    assert.equal(plan.router, 'service');
    assert.deepEqual(plan.steps, [
      { kind: 'pause', ms: null, approval: 'switch all traffic to v2' },
      { kind: 'weight', weight: 100, label: 'switch all traffic to v2' },
      { kind: 'wait', ms: 30_000, label: 'keep the old version for a switch-back' },
    ]);
    assert.equal(plan.gates.minReadyReplicas, 3, 'the whole preview (spec.replicas by default) is ready before the switch');
  });

  test('auto-promotion, analyses before and after the switch, no delay', () => {
    const plan = rolloutPlan(blueGreen({ autoPromotionSeconds: 0, scaleDownDelaySeconds: 0, previewReplicas: 2, prePromotionAnalysis: { duration: '1m' }, postPromotionAnalysis: { duration: '2m' } }, metrics))!;
    assert.deepEqual(plan.steps.map((s) => [s.kind, 'ms' in s ? s.ms : 'weight' in s ? s.weight : null]), [
      ['analysis', 60_000], ['pause', 0], ['weight', 100], ['analysis', 120_000],
    ]);
    assert.equal(plan.gates.minReadyReplicas, 2);
    assert.ok(plan.analysis);
  });

  test('through a router the switch is the route (the mesh carries it)', () => {
    const plan = rolloutPlan(app({ image: 'shop:1', serviceMesh: { enabled: true, canary: { enabled: true, canaryVersion: 'v2', strategy: 'blueGreen' } } }))!;
    assert.equal(plan.router, 'istio');
  });

  test('steps read as what they do', () => {
    const steps = rolloutPlan(blueGreen({ autoPromotionSeconds: 90 }))!.steps;
    assert.deepEqual(steps.map((s, i) => describeStep(s, i, steps.length)), [
      'step 1/3: switch all traffic to v2 in 1m30s (or at a promote)',
      'step 2/3: switch all traffic to v2',
      'step 3/3: keep the old version for a switch-back for 30 s',
    ]);
  });

  test('a canary plan says nothing of a strategy, and needs a router', () => {
    assert.equal(rolloutPlan(app({ image: 'shop:1', traffic: { router: 'replicas' }, serviceMesh: { canary: { enabled: true, canaryVersion: 'v2' } } }))!.strategy, undefined);
    assert.equal(rolloutPlan(app({ image: 'shop:1', traffic: { router: 'replicas' }, serviceMesh: { canary: { enabled: true, canaryVersion: 'v2' } } }))!.router, 'replicas');
  });
});

describe('children of a blue-green rollout', () => {
  test('the preview Service selects the new version only; the Service is the rollout\'s while it runs', () => {
    const a = blueGreen();
    const preview = renderChildren(a).apply.find((c) => c.object.metadata.name === 'shop-preview');
    assert.deepEqual((preview?.object as unknown as { spec: { selector: unknown } }).spec.selector, { 'app.kubernetes.io/name': 'shop', version: 'v2' });
    const service = children.find((c) => c.of.kind === 'Service' && c.name(a) === 'shop')!;
    assert.equal(service.rolloutOwned(a), true);
    const meshed = app({ image: 'shop:1', serviceMesh: { enabled: true, canary: { enabled: true, canaryVersion: 'v2' } } });
    assert.equal(service.rolloutOwned(meshed), false, 'through a mesh the Service selects every version and is the reconciler\'s');
  });

  test('between rollouts the reconciler\'s Service pins the stable pods when a selector routes (a canary\'s pods may outlive its rollout)', () => {
    const selectorOf = (a: Application) => (renderChildren(a).apply.find((c) => c.object.kind === 'Service' && c.object.metadata.name === 'shop')?.object as unknown as { spec: { selector: unknown } }).spec.selector;
    const pinned = { 'app.kubernetes.io/name': 'shop', version: 'stable' };
    assert.deepEqual(selectorOf(blueGreen()), pinned);
    assert.deepEqual(selectorOf(app({ image: 'shop:1', replicas: 4, traffic: { router: 'replicas' }, serviceMesh: { canary: { enabled: false, canaryVersion: 'v2' } } })), pinned);
    assert.deepEqual(selectorOf(app({ image: 'shop:1', serviceMesh: { enabled: true, canary: { enabled: true, canaryVersion: 'v2' } } })), { 'app.kubernetes.io/name': 'shop' }, 'through a mesh: every version');
  });

  test('no preview Service once the rollout of this version and image is over (an abort keeps the spec, not the preview\'s pods)', () => {
    const names = (a: Application) => ({
      apply: renderChildren(a).apply.map((c) => c.object.metadata.name).filter((n) => n === 'shop-preview'),
      absent: renderChildren(a).absent.map((c) => c.ref.name).filter((n) => n === 'shop-preview'),
    });
    const withStatus = (canary: JsonObject) => ({ ...blueGreen(), status: { canary } }) as Application;
    for (const phase of ['Aborted', 'RolledBack', 'Failed']) {
      assert.deepEqual(names(withStatus({ phase, version: 'v2', image: 'shop:2' })), { apply: [], absent: ['shop-preview'] }, `${phase}: pruned`);
    }
    assert.deepEqual(names(withStatus({ phase: 'Paused', version: 'v2', image: 'shop:2' })).apply, ['shop-preview'], 'while it runs');
    assert.deepEqual(names(withStatus({ phase: 'Aborted', version: 'v2', image: 'shop:1' })).apply, ['shop-preview'], 'an earlier rollout\'s end says nothing of this one');
    assert.deepEqual(names(withStatus({ phase: 'Aborted', version: 'v1', image: 'shop:2' })).apply, ['shop-preview']);
  });

  test('the preview Deployment is a full copy unless previewReplicas says otherwise', () => {
    const replicasOf = (a: Application) => (renderChildren(a, { canary: { weight: 0 } }).apply.find((c) => c.object.metadata.name === 'shop-canary')?.object as unknown as { spec: { replicas: number } }).spec.replicas;
    assert.equal(replicasOf(blueGreen()), 3);
    assert.equal(replicasOf(blueGreen({ previewReplicas: 1 })), 1);
  });
});

describe('a canary by replicas', () => {
  test('canary pods for a weight beside N stable pods', () => {
    assert.equal(canaryPodsFor(0, 4), 0);
    assert.equal(canaryPodsFor(20, 4), 1);
    assert.equal(canaryPodsFor(50, 4), 4);
    assert.equal(canaryPodsFor(75, 4), 12);
    assert.equal(canaryPodsFor(1, 4), 1, 'at least one pod: a share asked for is never nothing');
    assert.equal(canaryPodsFor(99, 4), 100, 'at most 100 pods');
    assert.equal(canaryPodsFor(100, 4), 4);
  });
  test('the share the pods give', () => {
    assert.equal(podShare(1, 4), 20);
    assert.equal(podShare(1, 2), 33);
    assert.equal(podShare(0, 0), 0);
  });
  test('what a selector takes', () => {
    const a = blueGreen();
    assert.equal(selected({ 'app.kubernetes.io/name': 'shop' }, a), 'both');
    assert.equal(selected({ 'app.kubernetes.io/name': 'shop', version: 'stable' }, a), 'stable');
    assert.equal(selected({ 'app.kubernetes.io/name': 'shop', version: 'v2' }, a), 'canary');
    assert.equal(selected({ 'app.kubernetes.io/name': 'shop', version: 'v3' }, a), 'other');
    assert.equal(selected({ app: 'shop' }, a), 'other');
    assert.equal(selected(undefined, a), 'other');
  });
});

describe('the strategy registry', () => {
  test('each strategy\'s workflow function carries the type name the clients and the sweep use', () => {
    for (const [strategy, fn] of Object.entries(rolloutWorkflows)) assert.equal(fn.name, rolloutWorkflowTypes[strategy as keyof typeof rolloutWorkflowTypes]);
  });
});
