import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { renderChildren } from '../../render/index.ts';
import { UID, clusterApp, withCanary } from '../fixtures/applications.ts';

const full = {
  storage: { size: '1Gi' },
  autoscaling: { enabled: true, maxReplicas: 5, targetCPU: 60 },
};

function kinds(children: ReturnType<typeof renderChildren>) {
  return {
    apply: children.apply.map((c) => `${c.kind}/${c.object.metadata?.name ?? ''}`),
    absent: children.absent.map((r) => `${r.kind}/${r.name}`),
  };
}

describe('renderChildren', () => {
  const cases = [
    {
      name: 'minimal: a Deployment and a Service',
      spec: {},
      canaryWeight: null,
      apply: ['Deployment/shop', 'Service/shop'],
      absent: ['Deployment/shop-canary', 'HorizontalPodAutoscaler/shop', 'DestinationRule/shop', 'VirtualService/shop'],
    },
    {
      name: 'everything, steady state',
      spec: { ...full, serviceMesh: { enabled: true } },
      canaryWeight: null,
      apply: ['PersistentVolumeClaim/shop', 'Deployment/shop', 'Service/shop', 'HorizontalPodAutoscaler/shop', 'DestinationRule/shop', 'VirtualService/shop'],
      absent: ['Deployment/shop-canary'],
    },
    {
      name: 'everything, rollout in flight',
      spec: { ...full, ...withCanary() },
      canaryWeight: 25,
      apply: ['PersistentVolumeClaim/shop', 'Deployment/shop', 'Deployment/shop-canary', 'Service/shop', 'HorizontalPodAutoscaler/shop', 'DestinationRule/shop', 'VirtualService/shop'],
      absent: [],
    },
    {
      name: 'canary enabled in the spec but no rollout in flight',
      spec: withCanary(),
      canaryWeight: null,
      apply: ['Deployment/shop', 'Service/shop', 'DestinationRule/shop', 'VirtualService/shop'],
      absent: ['Deployment/shop-canary', 'HorizontalPodAutoscaler/shop'],
    },
  ];
  for (const { name, spec, canaryWeight, apply, absent } of cases) {
    test(name, () => assert.deepEqual(kinds(renderChildren(clusterApp(spec), { canaryWeight })), { apply, absent }));
  }

  test('defaults to the steady state', () => {
    const app = clusterApp(withCanary());
    assert.deepEqual(renderChildren(app), renderChildren(app, { canaryWeight: null }));
  });

  test('a rollout wires the canary subset and the weighted route together', () => {
    const { apply } = renderChildren(clusterApp(withCanary({ canaryVersion: 'v7' })), { canaryWeight: 40 });
    const dr = apply.find((c) => c.kind === 'DestinationRule');
    const vs = apply.find((c) => c.kind === 'VirtualService');
    assert.ok(dr?.kind === 'DestinationRule' && vs?.kind === 'VirtualService');
    assert.deepEqual(dr.object.spec.subsets.map((s) => s.labels.version), ['stable', 'v7']);
    assert.deepEqual(vs.object.spec.http[0]?.route.map((r) => [r.destination.subset, r.weight]), [['stable', 60], ['canary', 40]]);
  });

  test('never lists the PVC as absent', () => {
    const { absent } = renderChildren(clusterApp());
    assert.ok(absent.every((r) => r.kind !== 'PersistentVolumeClaim'));
  });

  test('every child is labelled and owned by the Application', () => {
    for (const { object } of renderChildren(clusterApp({ ...full, ...withCanary() }), { canaryWeight: 10 }).apply) {
      assert.deepEqual(object.metadata?.labels, { 'app.kubernetes.io/name': 'shop', 'app.kubernetes.io/managed-by': 'application-operator' });
      assert.equal(object.metadata?.namespace, 'prod');
      assert.deepEqual(object.metadata?.ownerReferences?.map((o) => [o.kind, o.uid, o.controller]), [['Application', UID, true]]);
    }
  });

  test('absent refs carry the API version and namespace to delete them by', () => {
    assert.deepEqual(renderChildren(clusterApp()).absent, [
      { apiVersion: 'apps/v1', kind: 'Deployment', namespace: 'prod', name: 'shop-canary' },
      { apiVersion: 'autoscaling/v2', kind: 'HorizontalPodAutoscaler', namespace: 'prod', name: 'shop' },
      { apiVersion: 'networking.istio.io/v1', kind: 'DestinationRule', namespace: 'prod', name: 'shop' },
      { apiVersion: 'networking.istio.io/v1', kind: 'VirtualService', namespace: 'prod', name: 'shop' },
    ]);
  });

  test('refuses a rollout without the mesh', () => {
    assert.throws(() => renderChildren(clusterApp(), { canaryWeight: 10 }), /without serviceMesh.enabled/);
  });
});
