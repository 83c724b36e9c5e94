import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import type { V1ObjectMeta } from '@kubernetes/client-node';
import { children, childKinds, finalizeOrder, requiredVerbs } from '../../render/children.ts';
import { renderChildren } from '../../render/index.ts';
import type { DestinationRule, VirtualService } from '../../render/istio.ts';
import { UID, clusterApp, withCanary } from '../fixtures/applications.ts';

/** A spec routed through the Gateway API (the mesh off, or on beside it), with a canary. */
const gateway = (mesh = false) => ({
  traffic: { router: 'gatewayAPI', gatewayAPI: { parentRefs: [{ name: 'edge', namespace: 'gateways' }], hostnames: ['shop.example.com'] } },
  serviceMesh: { enabled: mesh, canary: { enabled: true, canaryVersion: 'v7' } },
});

const full = {
  storage: { size: '1Gi' },
  autoscaling: { enabled: true, maxReplicas: 5, targetCPU: 60 },
};

function kinds(children: ReturnType<typeof renderChildren>) {
  return {
    apply: children.apply.map((c) => `${c.object.kind}/${c.object.metadata.name}`),
    absent: children.absent.map((a) => `${a.ref.kind}/${a.ref.name}`),
  };
}

describe('renderChildren', () => {
  const cases = [
    {
      name: 'minimal: a Deployment and a Service',
      spec: {},
      canaryWeight: null,
      apply: ['Deployment/shop', 'Service/shop'],
      absent: ['Deployment/shop-canary', 'Service/shop-preview', 'Service/shop-stable', 'Service/shop-canary', 'HorizontalPodAutoscaler/shop', 'DestinationRule/shop', 'VirtualService/shop', 'TraefikService/shop-mirror', 'HTTPRoute/shop'],
    },
    {
      name: 'everything, steady state',
      spec: { ...full, serviceMesh: { enabled: true } },
      canaryWeight: null,
      apply: ['PersistentVolumeClaim/shop', 'Deployment/shop', 'Service/shop', 'HorizontalPodAutoscaler/shop', 'DestinationRule/shop', 'VirtualService/shop'],
      absent: ['Deployment/shop-canary', 'Service/shop-preview', 'Service/shop-stable', 'Service/shop-canary', 'TraefikService/shop-mirror', 'HTTPRoute/shop'],
    },
    {
      name: 'everything, rollout in flight',
      spec: { ...full, ...withCanary() },
      canaryWeight: 25,
      apply: ['PersistentVolumeClaim/shop', 'Deployment/shop', 'Deployment/shop-canary', 'Service/shop', 'HorizontalPodAutoscaler/shop', 'DestinationRule/shop', 'VirtualService/shop'],
      absent: ['Service/shop-preview', 'Service/shop-stable', 'Service/shop-canary', 'TraefikService/shop-mirror', 'HTTPRoute/shop'],
    },
    {
      name: 'canary enabled in the spec but no rollout in flight',
      spec: withCanary(),
      canaryWeight: null,
      apply: ['Deployment/shop', 'Service/shop', 'DestinationRule/shop', 'VirtualService/shop'],
      absent: ['Deployment/shop-canary', 'Service/shop-preview', 'Service/shop-stable', 'Service/shop-canary', 'HorizontalPodAutoscaler/shop', 'TraefikService/shop-mirror', 'HTTPRoute/shop'],
    },
    {
      name: 'Gateway API router, steady state: a Service of stable pods and the route to it, no mesh objects',
      spec: gateway(),
      canaryWeight: null,
      apply: ['Deployment/shop', 'Service/shop', 'Service/shop-stable', 'HTTPRoute/shop'],
      absent: ['Deployment/shop-canary', 'Service/shop-preview', 'Service/shop-canary', 'HorizontalPodAutoscaler/shop', 'DestinationRule/shop', 'VirtualService/shop', 'TraefikService/shop-mirror'],
    },
    {
      name: 'Gateway API router, rollout in flight: the canary\'s Service too',
      spec: gateway(),
      canaryWeight: 30,
      apply: ['Deployment/shop', 'Deployment/shop-canary', 'Service/shop', 'Service/shop-stable', 'Service/shop-canary', 'HTTPRoute/shop'],
      absent: ['Service/shop-preview', 'HorizontalPodAutoscaler/shop', 'DestinationRule/shop', 'VirtualService/shop', 'TraefikService/shop-mirror'],
    },
    {
      name: 'Gateway API router with the mesh on: the mesh\'s objects carry no canary, the route does',
      spec: gateway(true),
      canaryWeight: 30,
      apply: ['Deployment/shop', 'Deployment/shop-canary', 'Service/shop', 'Service/shop-stable', 'Service/shop-canary', 'DestinationRule/shop', 'VirtualService/shop', 'HTTPRoute/shop'],
      absent: ['Service/shop-preview', 'HorizontalPodAutoscaler/shop', 'TraefikService/shop-mirror'],
    },
  ];
  for (const { name, spec, canaryWeight, apply, absent } of cases) {
    test(name, () => assert.deepEqual(kinds(renderChildren(clusterApp(spec), { canary: canaryWeight === null ? null : { weight: canaryWeight } })), { apply, absent }));
  }

  test('defaults to the steady state', () => {
    const app = clusterApp(withCanary());
    assert.deepEqual(renderChildren(app), renderChildren(app, { canary: null }));
  });

  test('a rollout wires the canary subset and the weighted route together', () => {
    const { apply } = renderChildren(clusterApp(withCanary({ canaryVersion: 'v7' })), { canary: { weight: 40 } });
    const dr = apply.find((c) => c.object.kind === 'DestinationRule')?.object as unknown as DestinationRule;
    const vs = apply.find((c) => c.object.kind === 'VirtualService')?.object as unknown as VirtualService;
    assert.deepEqual(dr.spec.subsets.map((s) => s.labels['version']), ['stable', 'v7']);
    assert.deepEqual(vs.spec.http[0]?.route.map((r) => [r.destination.subset, r.weight]), [['stable', 60], ['canary', 40]]);
  });

  test('never lists the PVC as absent', () => {
    const { absent } = renderChildren(clusterApp());
    assert.ok(absent.every((a) => a.ref.kind !== 'PersistentVolumeClaim'));
  });

  test('every child is labelled and owned by the Application', () => {
    for (const { object } of renderChildren(clusterApp({ ...full, ...withCanary() }), { canary: { weight: 10 } }).apply) {
      const meta = object.metadata as V1ObjectMeta;
      assert.deepEqual(meta.labels, { 'app.kubernetes.io/name': 'shop', 'app.kubernetes.io/managed-by': 'application-operator' });
      assert.equal(meta.namespace, 'prod');
      assert.deepEqual(meta.ownerReferences?.map((o) => [o.kind, o.uid, o.controller]), [['Application', UID, true]]);
    }
  });

  test('absent refs carry the API version and namespace to delete them by', () => {
    assert.deepEqual(renderChildren(clusterApp()).absent.map((a) => a.ref), [
      { apiVersion: 'apps/v1', kind: 'Deployment', namespace: 'prod', name: 'shop-canary' },
      { apiVersion: 'v1', kind: 'Service', namespace: 'prod', name: 'shop-preview' },
      { apiVersion: 'v1', kind: 'Service', namespace: 'prod', name: 'shop-stable' },
      { apiVersion: 'v1', kind: 'Service', namespace: 'prod', name: 'shop-canary' },
      { apiVersion: 'autoscaling/v2', kind: 'HorizontalPodAutoscaler', namespace: 'prod', name: 'shop' },
      { apiVersion: 'networking.istio.io/v1', kind: 'DestinationRule', namespace: 'prod', name: 'shop' },
      { apiVersion: 'networking.istio.io/v1', kind: 'VirtualService', namespace: 'prod', name: 'shop' },
      { apiVersion: 'traefik.io/v1alpha1', kind: 'TraefikService', namespace: 'prod', name: 'shop-mirror' },
      { apiVersion: 'gateway.networking.k8s.io/v1', kind: 'HTTPRoute', namespace: 'prod', name: 'shop' },
    ]);
  });

  test('refuses a rollout without a router', () => {
    assert.throws(() => renderChildren(clusterApp(), { canary: { weight: 10 } }), /cannot route a canary: it has no router/);
  });

  test('on Traefik a mirror is a TraefikService the route sends stable\'s share through', () => {
    const traefik = { ...gateway(), traffic: { router: 'gatewayAPI', gatewayAPI: { parentRefs: [{ name: 'edge' }], implementation: 'traefik' } } };
    const withMirror = renderChildren(clusterApp(traefik), { canary: { weight: 10, mirror: 20 } });
    assert.ok(kinds(withMirror).apply.includes('TraefikService/shop-mirror'));
    assert.ok(kinds(renderChildren(clusterApp(traefik), { canary: { weight: 10 } })).absent.includes('TraefikService/shop-mirror'));
  });

  test('the children a rollout owns follow the router', () => {
    const owned = (spec: Parameters<typeof clusterApp>[0]) => children.filter((c) => c.rolloutOwned(clusterApp(spec))).map((c) => `${c.of.kind}/${c.name({ metadata: { name: 'shop' } })}`);
    assert.deepEqual(owned(withCanary()), ['Deployment/shop-canary', 'DestinationRule/shop', 'VirtualService/shop']);
    assert.deepEqual(owned(gateway(true)), ['Deployment/shop-canary', 'Service/shop-canary', 'TraefikService/shop-mirror', 'HTTPRoute/shop']);
  });
});

describe('the table of children', () => {
  test('finalize order deletes every child once, routes first and storage last', () => {
    assert.equal(new Set(finalizeOrder).size, children.length);
    assert.ok(children.every((c) => finalizeOrder.includes(c)));
    assert.equal(finalizeOrder[0]?.of.kind, 'HTTPRoute');
    assert.equal(finalizeOrder[1]?.of.kind, 'TraefikService');
    assert.equal(finalizeOrder.at(-1)?.of.kind, 'PersistentVolumeClaim');
  });

  test('each kind appears once, with a distinct plural', () => {
    assert.equal(new Set(childKinds.map((k) => `${k.apiVersion}/${k.kind}`)).size, childKinds.length);
    assert.equal(new Set(childKinds.map((k) => k.plural)).size, childKinds.length);
  });

  test('the verbs a kind needs follow from what the operator does with it', () => {
    assert.deepEqual(requiredVerbs({ apiVersion: 'v1', kind: 'Service', plural: 'services', watched: true, read: true }),
      ['create', 'delete', 'get', 'list', 'patch', 'watch']);
    assert.deepEqual(requiredVerbs({ apiVersion: 'v1', kind: 'PersistentVolumeClaim', plural: 'persistentvolumeclaims', watched: true, read: false }),
      ['create', 'delete', 'list', 'patch', 'watch']);
  });
});
