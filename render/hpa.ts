import type { V2HorizontalPodAutoscaler, V2MetricSpec } from '@kubernetes/client-node';
import type { Application } from '../api/application.ts';
import { childName } from '../api/constants.ts';
import { childMetadata } from './meta.ts';

function utilization(resource: 'cpu' | 'memory', percent: number): V2MetricSpec {
  return { type: 'Resource', resource: { name: resource, target: { type: 'Utilization', averageUtilization: percent } } };
}

/** The autoscaling/v2 HorizontalPodAutoscaler `<app>` for the stable Deployment, or null when autoscaling is off. */
export function renderHorizontalPodAutoscaler(app: Application): V2HorizontalPodAutoscaler | null {
  const autoscaling = app.spec.autoscaling;
  if (!autoscaling?.enabled) return null;
  const { minReplicas, maxReplicas, targetCPU, targetMemory } = autoscaling;
  if (maxReplicas === undefined) throw new Error(`Application ${app.metadata.name} enables autoscaling without maxReplicas`);
  const metrics: V2MetricSpec[] = [];
  if (targetCPU !== undefined) metrics.push(utilization('cpu', targetCPU));
  if (targetMemory !== undefined) metrics.push(utilization('memory', targetMemory));
  return {
    apiVersion: 'autoscaling/v2',
    kind: 'HorizontalPodAutoscaler',
    metadata: childMetadata(app, childName(app)),
    spec: {
      scaleTargetRef: { apiVersion: 'apps/v1', kind: 'Deployment', name: childName(app) },
      minReplicas,
      maxReplicas,
      metrics,
    },
  };
}
