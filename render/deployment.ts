// The stable and canary Deployments. Both run the same pod spec; they differ in name, image,
// replica count and the version label, which is part of each selector from the first apply
// because selectors are immutable and the two Deployments must never select each other's pods.

import type { V1Container, V1Deployment, V1EnvVar, V1PodTemplateSpec, V1Probe, V1ResourceRequirements, V1Volume, V1VolumeMount } from '@kubernetes/client-node';
import { canaryImage } from '../api/application.ts';
import type { Application, ApplicationSpec, EnvVar, Probe } from '../api/application.ts';
import {
  ANNOTATION_EXCLUDE_INBOUND_PORTS,
  ANNOTATION_SIDECAR_INJECT,
  CONFIGMAP_VOLUME_PREFIX,
  CONTAINER_NAME,
  DATA_VOLUME_NAME,
  LABEL_NAME,
  LABEL_VERSION,
  STABLE_VERSION,
  canaryName,
  childName,
} from '../api/constants.ts';
import { childLabels, childMetadata, compact } from './meta.ts';

type Quantities = Record<string, string | number>;

function quantities(q: Quantities | undefined): Record<string, string> | undefined {
  return q && Object.fromEntries(Object.entries(q).map(([name, value]) => [name, String(value)]));
}

function resources(spec: ApplicationSpec): V1ResourceRequirements | undefined {
  const r = spec.resources;
  if (!r) return undefined;
  return compact({ limits: quantities(r.limits), requests: quantities(r.requests), claims: r.claims && structuredClone(r.claims) });
}

function envVar(e: EnvVar): V1EnvVar {
  const divisor = e.valueFrom?.resourceFieldRef?.divisor;
  const copy: V1EnvVar = structuredClone(e) as V1EnvVar;
  if (divisor !== undefined && copy.valueFrom?.resourceFieldRef) copy.valueFrom.resourceFieldRef.divisor = String(divisor);
  return copy;
}

function probe(p: Probe | undefined): V1Probe | undefined {
  return p && structuredClone(p);
}

function volumes(app: Application): V1Volume[] {
  const { configMaps, storage } = app.spec;
  // One volume per ConfigMap even when it is mounted at several paths.
  const names = [...new Set((configMaps ?? []).map((c) => c.name))];
  const result: V1Volume[] = names.map((name) => ({ name: `${CONFIGMAP_VOLUME_PREFIX}${name}`, configMap: { name } }));
  if (storage) result.push({ name: DATA_VOLUME_NAME, persistentVolumeClaim: { claimName: childName(app) } });
  return result;
}

function volumeMounts(spec: ApplicationSpec): V1VolumeMount[] {
  const mounts: V1VolumeMount[] = (spec.configMaps ?? []).map((c) => ({
    name: `${CONFIGMAP_VOLUME_PREFIX}${c.name}`,
    mountPath: c.mountPath,
    readOnly: c.readOnly,
  }));
  if (spec.storage) mounts.push({ name: DATA_VOLUME_NAME, mountPath: spec.storage.mountPath });
  return mounts;
}

function podAnnotations(spec: ApplicationSpec): Record<string, string> {
  const annotations: Record<string, string> = { [ANNOTATION_SIDECAR_INJECT]: spec.serviceMesh?.enabled ? 'true' : 'false' };
  const bypass = spec.service.ports.filter((p) => !p.enableIstioProxy).map((p) => p.port);
  if (bypass.length > 0) annotations[ANNOTATION_EXCLUDE_INBOUND_PORTS] = bypass.join(',');
  return annotations;
}

function container(spec: ApplicationSpec, image: string): V1Container {
  const mounts = volumeMounts(spec);
  return compact({
    name: CONTAINER_NAME,
    image,
    ports: spec.service.ports.map((p) => compact({ name: p.name, containerPort: p.port, protocol: 'TCP' })),
    env: spec.env?.map(envVar),
    resources: resources(spec),
    livenessProbe: probe(spec.healthCheck.livenessProbe),
    readinessProbe: probe(spec.healthCheck.readinessProbe),
    startupProbe: probe(spec.healthCheck.startupProbe),
    volumeMounts: mounts.length > 0 ? mounts : undefined,
  });
}

function podTemplate(app: Application, version: string, image: string): V1PodTemplateSpec {
  const podVolumes = volumes(app);
  return {
    metadata: { labels: { ...childLabels(app), [LABEL_VERSION]: version }, annotations: podAnnotations(app.spec) },
    spec: compact({ containers: [container(app.spec, image)], volumes: podVolumes.length > 0 ? podVolumes : undefined }),
  };
}

function selector(app: Application, version: string): { matchLabels: Record<string, string> } {
  return { matchLabels: { [LABEL_NAME]: app.metadata.name, [LABEL_VERSION]: version } };
}

/** The stable Deployment `<app>`; without spec.replicas while autoscaling is on, so the HPA alone owns that field. */
export function renderDeployment(app: Application): V1Deployment {
  return {
    apiVersion: 'apps/v1',
    kind: 'Deployment',
    metadata: childMetadata(app, childName(app)),
    spec: {
      ...(app.spec.autoscaling?.enabled ? {} : { replicas: app.spec.replicas }),
      selector: selector(app, STABLE_VERSION),
      template: podTemplate(app, STABLE_VERSION, app.spec.image),
    },
  };
}

/** The canary Deployment `<app>-canary`: canary image and replicas, pods labelled version=<canaryVersion>; throws when the spec has no canary. */
export function renderCanaryDeployment(app: Application, opts: { replicas?: number } = {}): V1Deployment {
  const canary = app.spec.serviceMesh?.canary;
  if (canary?.canaryVersion === undefined) throw new Error(`Application ${app.metadata.name} has no canary version to deploy`);
  return {
    apiVersion: 'apps/v1',
    kind: 'Deployment',
    metadata: childMetadata(app, canaryName(app)),
    spec: {
      replicas: opts.replicas ?? canaryReplicas(app),
      selector: selector(app, canary.canaryVersion),
      template: podTemplate(app, canary.canaryVersion, canaryImage(app.spec)),
    },
  };
}

/** The pods the new version starts with: a canary's `replicas`, or a blue-green preview's (a full copy by default). */
export function canaryReplicas(app: Application): number {
  const canary = app.spec.serviceMesh?.canary;
  if (canary?.strategy === 'blueGreen') return canary.blueGreen?.previewReplicas ?? app.spec.replicas;
  return canary?.replicas ?? 1;
}
