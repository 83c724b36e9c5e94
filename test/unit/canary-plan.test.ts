import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { parseApplication, type Application } from '../../api/application.ts';
import { metricsSource, rolloutKey, rolloutPlan, rolloutSpecState } from '../../reconcile/canary-plan.ts';
import { changedSpecParts } from '../../reconcile/plan.ts';
import { fingerprint } from '../../lib/json.ts';
import type { PlanStep, RolloutPlan } from '../../reconcile/plan.ts';
import { UID, clusterApp, withCanary } from '../fixtures/applications.ts';
import type { JsonObject } from '../fixtures/spec-examples.ts';

/** An Application as read from the cluster, with `spec` as given (image included). */
function app(spec: JsonObject): Application {
  const parsed = parseApplication({
    apiVersion: 'myapp.example.com/v1',
    kind: 'Application',
    metadata: { name: 'shop', namespace: 'prod', uid: UID, generation: 1 },
    spec,
  });
  if (!parsed.ok) throw new Error(`fixture is invalid: ${parsed.message}`);
  return parsed.app;
}

const canaryApp = (canary: JsonObject = {}, image = 'nginx:1.25') => app({ image, ...withCanary(canary) });

const defaultGates = { minReadyReplicas: 1, maxRestarts: 3, intervalMs: 10_000, failureThreshold: 3, initialDelayMs: 60_000 };

describe('rolloutPlan', () => {
  test('seed form: set the weight, then wait for promote', () => {
    const { specDigest: digest, ...plan } = rolloutPlan(canaryApp({ weight: 20 }))!;
    assert.match(digest ?? '', /^steps=[0-9a-f]{8},analysis=[0-9a-f]{8},checks=[0-9a-f]{8},healthGates=[0-9a-f]{8},progressDeadline=[0-9a-f]{8}$/);
    assert.deepEqual(plan, {
      key: 'v2|nginx:v2',
      version: 'v2',
      image: 'nginx:v2',
      stableImage: 'nginx:1.25',
      router: 'istio',
      steps: [{ kind: 'weight', weight: 20 }, { kind: 'pause', ms: null }],
      gates: defaultGates,
      progressDeadlineMs: 30 * 60_000,
      canaryDrainMs: 5000,
    } satisfies RolloutPlan);
  });

  test('the new version\'s pods drain 5 s by default after the switch back, whatever the router; drainSeconds sets it, 0 not at all', () => {
    assert.equal(rolloutPlan(canaryApp())?.canaryDrainMs, 5000);
    assert.equal(rolloutPlan(canaryApp({ drainSeconds: 30 }))?.canaryDrainMs, 30_000);
    assert.equal(rolloutPlan(canaryApp({ drainSeconds: 0 }))?.canaryDrainMs, 0);
    assert.equal(rolloutPlan(canaryApp())?.drainMs, undefined, 'drainMs is what plans from before it had');
  });

  test('drainSeconds is part of the spec a running rollout keeps to, named only when it is not the default', () => {
    const digest = (canary: JsonObject) => rolloutPlan(canaryApp(canary))!.specDigest!;
    assert.doesNotMatch(digest({}), /drainSeconds/, 'digests of rollouts planned before it still match');
    assert.deepEqual(changedSpecParts(digest({}), digest({ drainSeconds: 30 })), ['drainSeconds']);
    assert.deepEqual(changedSpecParts(digest({ drainSeconds: 5 }), digest({})), []);
  });

  test('seed form without a weight sends no traffic', () => {
    assert.deepEqual(rolloutPlan(canaryApp())?.steps, [{ kind: 'weight', weight: 0 }, { kind: 'pause', ms: null }]);
  });

  test('an empty steps list is the seed form', () => {
    const plan = rolloutPlan(canaryApp({ weight: 10, steps: [] }));
    assert.deepEqual(plan?.steps, [{ kind: 'weight', weight: 10 }, { kind: 'pause', ms: null }]);
  });

  test('steps form: durations in ms, an open pause is null, the last step promotes', () => {
    const plan = rolloutPlan(
      canaryApp({
        weight: 50,
        steps: [
          { setWeight: 10 },
          { pause: { duration: '1m30s' } },
          { setWeight: 0 },
          { pause: {} },
          { setWeight: 100 },
          { pause: { duration: '500ms' } },
          { pause: { duration: '2h' } },
        ],
      }),
    );
    const steps: PlanStep[] = [
      { kind: 'weight', weight: 10 },
      { kind: 'pause', ms: 90_000 },
      { kind: 'weight', weight: 0 },
      { kind: 'pause', ms: null },
      { kind: 'weight', weight: 100 },
      { kind: 'pause', ms: 500 },
      { kind: 'pause', ms: 7_200_000 },
    ];
    assert.deepEqual(plan?.steps, steps);
  });

  test('health gates and the progress deadline in ms', () => {
    const plan = rolloutPlan(
      canaryApp({ replicas: 3, healthGates: { minReadyReplicas: 2, maxRestarts: 0, interval: '1m', failureThreshold: 5, initialDelay: '2m30s' }, progressDeadline: '1h' }),
    );
    assert.deepEqual(plan?.gates, { minReadyReplicas: 2, maxRestarts: 0, intervalMs: 60_000, failureThreshold: 5, initialDelayMs: 150_000 });
    assert.equal(plan?.progressDeadlineMs, 3_600_000);
  });

  const images: { name: string; image: string; canary: JsonObject; expected: string }[] = [
    { name: 'tag replaced by the canary version', image: 'nginx:1.25', canary: {}, expected: 'nginx:v2' },
    { name: 'untagged image gets the version', image: 'nginx', canary: {}, expected: 'nginx:v2' },
    { name: 'registry port is not a tag', image: 'registry.local:5000/team/shop', canary: {}, expected: 'registry.local:5000/team/shop:v2' },
    { name: 'tag after a registry port', image: 'registry.local:5000/team/shop:1.0', canary: {}, expected: 'registry.local:5000/team/shop:v2' },
    { name: 'digest dropped', image: `nginx:1.25@sha256:${'0123456789abcdef'.repeat(4)}`, canary: {}, expected: 'nginx:v2' },
    { name: 'explicit canary image wins', image: 'nginx:1.25', canary: { image: 'ghcr.io/acme/shop:canary-7' }, expected: 'ghcr.io/acme/shop:canary-7' },
  ];
  for (const c of images) {
    test(`canary image: ${c.name}`, () => {
      const plan = rolloutPlan(canaryApp(c.canary, c.image));
      assert.equal(plan?.image, c.expected);
      assert.equal(plan?.stableImage, c.image);
      assert.equal(plan?.key, `v2|${c.expected}`);
    });
  }

  const off: { name: string; app: () => Application }[] = [
    { name: 'no service mesh', app: () => app({ image: 'nginx:1.25' }) },
    { name: 'mesh without a canary', app: () => app({ image: 'nginx:1.25', serviceMesh: { enabled: true } }) },
    { name: 'canary disabled', app: () => canaryApp({ enabled: false, steps: [{ setWeight: 10 }] }) },
    {
      // The CRD rejects a canary without the mesh; the plan must not rely on that.
      name: 'mesh turned off under an enabled canary',
      app: () => {
        const a = canaryApp({ weight: 20 });
        assert.ok(a.spec.serviceMesh);
        a.spec.serviceMesh.enabled = false;
        return a;
      },
    },
  ];
  for (const c of off) test(`no rollout: ${c.name}`, () => assert.equal(rolloutPlan(c.app()), undefined));
});

describe('rolloutKey', () => {
  test('joins version and image', () => assert.equal(rolloutKey('v2', 'nginx:v2'), 'v2|nginx:v2'));
  test('a new image under the same version is a new rollout', () => assert.notEqual(rolloutKey('v2', 'shop:a'), rolloutKey('v2', 'shop:b')));
  test('a new version of the same image is a new rollout', () => assert.notEqual(rolloutKey('v2', 'shop:a'), rolloutKey('v3', 'shop:a')));
});

describe('the analysis reads the metrics of what routes the canary', () => {
  const analysis: JsonObject = { metrics: [{ name: 'ok', template: 'request-success-rate', thresholdRange: { min: 99 } }, { name: 'p99', template: 'request-duration', thresholdRange: { max: 500 } }] };
  const gatewayApp = (implementation: string) => clusterApp({
    service: { ports: [{ name: 'web', port: 8080 }] },
    traffic: { router: 'gatewayAPI', gatewayAPI: { parentRefs: [{ name: 'edge' }], implementation } },
    serviceMesh: { canary: implementation === 'traefik' ? { enabled: true, canaryVersion: 'v2', analysis } : { enabled: true, canaryVersion: 'v2' } },
  });
  test('Istio: its sidecars\' telemetry', () => {
    assert.deepEqual(metricsSource(clusterApp({ serviceMesh: { enabled: true } })), { kind: 'istio' });
  });
  test('the Gateway API on Traefik: Traefik\'s counters of the canary\'s Service, by its port, as the HTTPRoute sends to it ("http" whatever the port\'s name) and as the mirroring TraefikService copies to it', () => {
    const app = gatewayApp('traefik');
    assert.deepEqual(metricsSource(app), { kind: 'traefik', canaryServices: ['prod-shop-canary-http-8080@kubernetesgateway', 'prod-shop-canary-8080@kubernetescrd'] });
    const [ok, p99] = rolloutPlan(app)!.analysis!.metrics;
    const canary = 'service=~"prod-shop-canary-http-8080@kubernetesgateway|prod-shop-canary-8080@kubernetescrd"';
    assert.equal(ok?.query, `100 * (sum(rate(traefik_service_requests_total{${canary}, code!~"5.."}[30s])) or vector(0)) / (sum(rate(traefik_service_requests_total{${canary}}[30s])) > 0)`);
    assert.ok(p99?.query.startsWith(`(1000 * histogram_quantile(0.99, sum by (le) (rate(traefik_service_request_duration_seconds_bucket{${canary}}[30s])))`), p99?.query);
  });
  test('another Gateway API implementation: no built-in templates (the spec must write queries)', () => {
    assert.deepEqual(metricsSource(gatewayApp('generic')), { kind: 'none' });
  });
  test('a canary routed through the Gateway API without the mesh has a plan', () => {
    assert.equal(rolloutPlan(gatewayApp('generic'))?.version, 'v2');
  });
});

describe('what a running rollout keeps to: the canary spec it started with', () => {
  const running = (spec: JsonObject, status: JsonObject): Application => ({ ...canaryApp(spec), status: status });
  const startedWith = rolloutPlan(canaryApp({ steps: [{ setWeight: 10 }, { pause: {} }] }))!;
  const inFlight = { canary: { phase: 'Paused', version: 'v2', image: 'nginx:v2', specDigest: startedWith.specDigest ?? '' } };

  test('fingerprint: the same for the same JSON whatever the order of keys, another for another value', () => {
    assert.equal(fingerprint({ a: 1, b: [1, 2] }), fingerprint({ b: [1, 2], a: 1 }));
    assert.notEqual(fingerprint({ a: 1 }), fingerprint({ a: 2 }));
    assert.match(fingerprint(undefined), /^[0-9a-f]{8}$/);
  });

  test('an unchanged spec: the rollout runs with it', () => {
    const app = running({ steps: [{ setWeight: 10 }, { pause: {} }] }, inFlight);
    assert.deepEqual(rolloutSpecState(app, rolloutPlan(app)), { running: true, version: 'v2' });
  });

  test('steps and the analysis changed: both named, in spec order', () => {
    const app = running({ steps: [{ setWeight: 30 }, { pause: {} }], analysis: { interval: '1m', metrics: [{ name: 'ok', query: 'vector(1)', thresholdRange: { min: 0 } }] } }, inFlight);
    assert.deepEqual(rolloutSpecState(app, rolloutPlan(app)), { running: true, version: 'v2', deferred: ['steps', 'analysis'] });
  });

  test('no rollout of this canary in flight (over, another version, none): nothing to say', () => {
    const app = (status: JsonObject) => running({ steps: [{ setWeight: 30 }] }, status);
    const statuses: JsonObject[] = [{}, { canary: { ...inFlight.canary, phase: 'Promoted' } }, { canary: { ...inFlight.canary, version: 'v1' } }];
    for (const status of statuses) {
      assert.deepEqual(rolloutSpecState(app(status), rolloutPlan(app(status))), { running: false });
    }
  });

  test('a rollout from before the digest (none in status) is taken as running with today\'s spec', () => {
    const app = running({ steps: [{ setWeight: 30 }] }, { canary: { phase: 'Paused', version: 'v2', image: 'nginx:v2' } });
    assert.deepEqual(rolloutSpecState(app, rolloutPlan(app)), { running: true, version: 'v2' });
  });

  test('changedSpecParts: a part present on one side only counts as changed', () => {
    assert.deepEqual(changedSpecParts('steps=1,analysis=2', 'steps=1,analysis=3,checks=4'), ['analysis', 'checks']);
  });
});
