import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { renderHorizontalPodAutoscaler } from '../../render/hpa.ts';
import { renderPersistentVolumeClaim } from '../../render/pvc.ts';
import { renderService } from '../../render/service.ts';
import { UID, clusterApp } from '../fixtures/applications.ts';
import type { JsonObject } from '../fixtures/spec-examples.ts';

const metadata = {
  name: 'shop',
  namespace: 'prod',
  labels: { 'app.kubernetes.io/name': 'shop', 'app.kubernetes.io/managed-by': 'application-operator' },
  ownerReferences: [{ apiVersion: 'myapp.example.com/v1', kind: 'Application', name: 'shop', uid: UID, controller: true, blockOwnerDeletion: true }],
};

describe('renderService', () => {
  test('selects every version of the app and targets the same port numbers', () => {
    const app = clusterApp({ service: { type: 'LoadBalancer', ports: [{ name: 'http', port: 8080 }, { name: 'metrics', port: 9102, enableIstioProxy: false }] } });
    assert.deepEqual(renderService(app), {
      apiVersion: 'v1',
      kind: 'Service',
      metadata,
      spec: {
        type: 'LoadBalancer',
        selector: { 'app.kubernetes.io/name': 'shop' },
        ports: [
          { name: 'http', port: 8080, targetPort: 8080, protocol: 'TCP' },
          { name: 'metrics', port: 9102, targetPort: 9102, protocol: 'TCP' },
        ],
      },
    });
  });
});

describe('renderPersistentVolumeClaim', () => {
  const cases: { name: string; storage: JsonObject | undefined; spec: object | null }[] = [
    { name: 'no storage', storage: undefined, spec: null },
    { name: 'defaults', storage: { size: '1Gi' }, spec: { accessModes: ['ReadWriteOnce'], resources: { requests: { storage: '1Gi' } } } },
    {
      name: 'class and access mode',
      storage: { size: '20Gi', storageClass: 'fast', accessMode: 'ReadWriteMany' },
      spec: { accessModes: ['ReadWriteMany'], resources: { requests: { storage: '20Gi' } }, storageClassName: 'fast' },
    },
    {
      name: 'explicitly no class',
      storage: { size: '1Gi', storageClass: '' },
      spec: { accessModes: ['ReadWriteOnce'], resources: { requests: { storage: '1Gi' } }, storageClassName: '' },
    },
  ];
  for (const { name, storage, spec } of cases) {
    test(name, () => {
      const pvc = renderPersistentVolumeClaim(clusterApp(storage ? { storage } : {}));
      assert.deepEqual(pvc, spec === null ? null : { apiVersion: 'v1', kind: 'PersistentVolumeClaim', metadata, spec });
    });
  }
});

describe('renderHorizontalPodAutoscaler', () => {
  const cpu = { type: 'Resource', resource: { name: 'cpu', target: { type: 'Utilization', averageUtilization: 70 } } };
  const memory = { type: 'Resource', resource: { name: 'memory', target: { type: 'Utilization', averageUtilization: 80 } } };
  const cases: { name: string; autoscaling: JsonObject | undefined; metrics: object[] | null }[] = [
    { name: 'no autoscaling', autoscaling: undefined, metrics: null },
    { name: 'disabled', autoscaling: { enabled: false, maxReplicas: 5, targetCPU: 70 }, metrics: null },
    { name: 'cpu', autoscaling: { enabled: true, minReplicas: 2, maxReplicas: 10, targetCPU: 70 }, metrics: [cpu] },
    { name: 'memory', autoscaling: { enabled: true, minReplicas: 2, maxReplicas: 10, targetMemory: 80 }, metrics: [memory] },
    { name: 'both', autoscaling: { enabled: true, minReplicas: 2, maxReplicas: 10, targetCPU: 70, targetMemory: 80 }, metrics: [cpu, memory] },
  ];
  for (const { name, autoscaling, metrics } of cases) {
    test(name, () => {
      const hpa = renderHorizontalPodAutoscaler(clusterApp(autoscaling ? { autoscaling } : {}));
      assert.deepEqual(
        hpa,
        metrics === null
          ? null
          : {
              apiVersion: 'autoscaling/v2',
              kind: 'HorizontalPodAutoscaler',
              metadata,
              spec: { scaleTargetRef: { apiVersion: 'apps/v1', kind: 'Deployment', name: 'shop' }, minReplicas: 2, maxReplicas: 10, metrics },
            },
      );
    });
  }
});
