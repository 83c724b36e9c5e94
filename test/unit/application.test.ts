import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { applicationSchema, canaryImage, canonicalMountPath, parseApplication, parseDuration } from '../../api/application.ts';
import { clusterApp, withCanary } from '../fixtures/applications.ts';
import { application, specExamples } from '../fixtures/spec-examples.ts';
import type { CreateExample } from '../fixtures/spec-examples.ts';

// Transition rows need the old object: only the API server can judge them.
const createExamples = specExamples.filter((e): e is CreateExample => !e.transition);

describe('spec examples agree with the zod model', () => {
  test('the table is large enough to cover the rules', () => {
    assert.ok(specExamples.length >= 25);
    assert.ok(createExamples.some((e) => e.valid) && createExamples.some((e) => !e.valid));
  });

  for (const example of createExamples) {
    test(`${example.name} is ${example.valid ? 'valid' : 'invalid'}`, () => {
      const result = parseApplication(example.app);
      if (example.valid) {
        assert.ok(result.ok, result.ok ? '' : result.message);
        return;
      }
      assert.ok(!result.ok, 'expected a rejection');
      assert.equal(result.reason, 'InvalidSpec');
      if (example.messageIncludes !== undefined) assert.ok(result.message.includes(example.messageIncludes), result.message);
      const issues = applicationSchema.safeParse(example.app).error?.issues ?? [];
      assert.equal(issues.length, 1, `breaks more than one rule: ${result.message}`);
    });
  }
});

describe('defaults', () => {
  test('a minimal spec gets every default of the CRD', () => {
    assert.deepEqual(clusterApp().spec, {
      image: 'nginx:1.25',
      replicas: 1,
      service: { type: 'ClusterIP', ports: [{ name: 'http', port: 80, enableIstioProxy: true }] },
      healthCheck: {
        readinessProbe: { httpGet: { path: '/health', port: 80, scheme: 'HTTP' }, initialDelaySeconds: 5, periodSeconds: 10 },
      },
    });
  });

  test('an enabled mesh gets the traffic policy and canary defaults', () => {
    assert.deepEqual(clusterApp(withCanary()).spec.serviceMesh, {
      enabled: true,
      trafficPolicy: { connectionTimeout: '10s', loadBalancer: 'ROUND_ROBIN' },
      canary: {
        enabled: true,
        canaryVersion: 'v2',
        weight: 0,
        replicas: 1,
        strategy: 'canary',
        healthGates: { minReadyReplicas: 1, maxRestarts: 3, interval: '10s', failureThreshold: 3, initialDelay: '60s' },
        progressDeadline: '30m',
        drainSeconds: 5,
      },
    });
  });

  test('storage, configMaps and autoscaling get theirs', () => {
    const spec = clusterApp({
      storage: { size: '1Gi' },
      configMaps: [{ name: 'cfg', mountPath: '/etc/cfg' }],
      autoscaling: { enabled: true, maxReplicas: 3, targetCPU: 50 },
    }).spec;
    assert.deepEqual(spec.storage, { size: '1Gi', accessMode: 'ReadWriteOnce', mountPath: '/data' });
    assert.deepEqual(spec.configMaps, [{ name: 'cfg', mountPath: '/etc/cfg', readOnly: true }]);
    assert.deepEqual(spec.autoscaling, { enabled: true, minReplicas: 1, maxReplicas: 3, targetCPU: 50 });
  });

  test('a given healthCheck replaces the default readiness probe', () => {
    assert.deepEqual(clusterApp({ healthCheck: { livenessProbe: { tcpSocket: { port: 80 } } } }).spec.healthCheck, {
      livenessProbe: { tcpSocket: { port: 80 } },
    });
  });
});

describe('parseApplication', () => {
  test('lists every problem with its field path', () => {
    const result = parseApplication(application('shop', { image: '', replicas: 0, env: [{ name: 'A', value: '1' }, { name: 'A' }] }));
    assert.deepEqual(result, {
      ok: false,
      reason: 'InvalidSpec',
      message:
        'spec.image: image must not be empty; spec.replicas: should be greater than or equal to 1; spec.env[1]: Duplicate value: {"name":"A"}',
    });
  });

  test('rejects another kind', () => {
    const result = parseApplication({ ...application('shop', { image: 'nginx' }), kind: 'Deployment' });
    assert.ok(!result.ok && result.message.startsWith('kind: '), JSON.stringify(result));
  });

  test('keeps the metadata the operator uses and drops the rest', () => {
    const deletedAt = new Date('2026-01-02T03:04:05Z');
    const result = parseApplication({
      ...application('shop', { image: 'nginx' }),
      metadata: { name: 'shop', namespace: 'prod', uid: 'u1', generation: 4, deletionTimestamp: deletedAt, managedFields: [{ manager: 'kubectl' }] },
    });
    assert.ok(result.ok);
    assert.deepEqual(result.app.metadata, { name: 'shop', namespace: 'prod', uid: 'u1', generation: 4, deletionTimestamp: '2026-01-02T03:04:05.000Z' });
  });
});

describe('parseDuration', () => {
  const cases: [string, number][] = [
    ['500ms', 500],
    ['30s', 30_000],
    ['5m', 300_000],
    ['1h30m', 5_400_000],
    ['1m30s250ms', 90_250],
    ['30s1m', 90_000],
    ['0s', 0],
  ];
  for (const [input, ms] of cases) {
    test(`${input} is ${ms}ms`, () => assert.equal(parseDuration(input), ms));
  }
  for (const input of ['', '10', '1.5s', '1d', ' 1s', '-1s', '1S', 's', '9999999999h']) {
    test(`${JSON.stringify(input)} is rejected`, () => assert.throws(() => parseDuration(input), RangeError));
  }
});

describe('canaryImage', () => {
  const cases: { image: string; canary: Record<string, string>; expected: string }[] = [
    { image: 'nginx:1.25', canary: { canaryVersion: '1.26' }, expected: 'nginx:1.26' },
    { image: 'nginx', canary: { canaryVersion: 'v2' }, expected: 'nginx:v2' },
    { image: 'registry.local:5000/team/app:1.0', canary: { canaryVersion: '1.1' }, expected: 'registry.local:5000/team/app:1.1' },
    { image: 'registry.local:5000/team/app', canary: { canaryVersion: '1.1' }, expected: 'registry.local:5000/team/app:1.1' },
    { image: `app:1.0@sha256:${'ab'.repeat(32)}`, canary: { canaryVersion: '2.0' }, expected: 'app:2.0' },
    { image: 'nginx:1.25', canary: { canaryVersion: 'v2', image: 'ghcr.io/acme/nginx:canary' }, expected: 'ghcr.io/acme/nginx:canary' },
  ];
  for (const { image, canary, expected } of cases) {
    test(`${image} with ${JSON.stringify(canary)} runs ${expected}`, () => {
      assert.equal(canaryImage(clusterApp({ image, ...withCanary(canary) }).spec), expected);
    });
  }

  test('throws when there is no canary version', () => {
    assert.throws(() => canaryImage(clusterApp().spec), /neither an image nor a canaryVersion/);
  });
});

describe('canonical mount paths', () => {
  test('canonicalMountPath drops empty and . segments and resolves ..', () => {
    for (const [path, canonical] of [['/etc//x', '/etc/x'], ['/etc/./x', '/etc/x'], ['/etc/x/.', '/etc/x'], ['/etc/y/../x', '/etc/x'], ['//x', '/x'], ['/.', '/'], ['/..', '/'], ['/a/b/../../c', '/c'], ['/etc/...', '/etc/...']]) {
      assert.equal(canonicalMountPath(path ?? ''), canonical, path);
    }
  });
  test('the rejection names the canonical form', () => {
    const result = parseApplication(application('m', { image: 'nginx:1.25', configMaps: [{ name: 'cfg', mountPath: '/etc/y/../x' }] }));
    assert.ok(!result.ok);
    assert.match(result.message, /mountPath must be canonical: \/etc\/y\/\.\.\/x has a \.\. segment \(write \/etc\/x\)/);
  });
});
