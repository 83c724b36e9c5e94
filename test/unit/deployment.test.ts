import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { renderCanaryDeployment, renderDeployment } from '../../render/deployment.ts';
import { UID, clusterApp, withCanary } from '../fixtures/applications.ts';
import { application } from '../fixtures/spec-examples.ts';
import type { JsonObject } from '../fixtures/spec-examples.ts';
import { parseApplication } from '../../api/application.ts';

const owner = { apiVersion: 'myapp.example.com/v1', kind: 'Application', name: 'shop', uid: UID, controller: true, blockOwnerDeletion: true };
const labels = { 'app.kubernetes.io/name': 'shop', 'app.kubernetes.io/managed-by': 'application-operator' };

function podSpec(spec: JsonObject = {}) {
  const template = renderDeployment(clusterApp(spec)).spec?.template;
  assert.ok(template?.spec && template.metadata);
  const container = template.spec.containers[0];
  assert.ok(container);
  return { template, container, volumes: template.spec.volumes };
}

describe('renderDeployment', () => {
  test('renders the seed defaults as a complete stable Deployment', () => {
    assert.deepEqual(renderDeployment(clusterApp()), {
      apiVersion: 'apps/v1',
      kind: 'Deployment',
      metadata: { name: 'shop', namespace: 'prod', labels, ownerReferences: [owner] },
      spec: {
        replicas: 1,
        selector: { matchLabels: { 'app.kubernetes.io/name': 'shop', version: 'stable' } },
        template: {
          metadata: { labels: { ...labels, version: 'stable' }, annotations: { 'sidecar.istio.io/inject': 'false' } },
          spec: {
            containers: [
              {
                name: 'app',
                image: 'nginx:1.25',
                ports: [{ name: 'http', containerPort: 80, protocol: 'TCP' }],
                readinessProbe: { httpGet: { path: '/health', port: 80, scheme: 'HTTP' }, initialDelaySeconds: 5, periodSeconds: 10 },
              },
            ],
          },
        },
      },
    });
  });

  const replicaCases: { name: string; spec: JsonObject; replicas: number | undefined }[] = [
    { name: 'sets replicas without autoscaling', spec: { replicas: 4 }, replicas: 4 },
    { name: 'sets replicas with autoscaling disabled', spec: { replicas: 4, autoscaling: { enabled: false } }, replicas: 4 },
    { name: 'leaves replicas to the HPA with autoscaling', spec: { replicas: 4, autoscaling: { enabled: true, maxReplicas: 8, targetCPU: 60 } }, replicas: undefined },
  ];
  for (const { name, spec, replicas } of replicaCases) {
    test(name, () => {
      const deploymentSpec = renderDeployment(clusterApp(spec)).spec;
      assert.ok(deploymentSpec);
      assert.equal('replicas' in deploymentSpec, replicas !== undefined);
      assert.equal(deploymentSpec.replicas, replicas);
    });
  }

  const annotationCases: { name: string; spec: JsonObject; annotations: Record<string, string> }[] = [
    { name: 'mesh off', spec: {}, annotations: { 'sidecar.istio.io/inject': 'false' } },
    { name: 'mesh on', spec: { serviceMesh: { enabled: true } }, annotations: { 'sidecar.istio.io/inject': 'true' } },
    {
      name: 'mesh on, two ports bypass the proxy',
      spec: {
        serviceMesh: { enabled: true },
        service: { ports: [{ name: 'http', port: 80 }, { name: 'metrics', port: 9102, enableIstioProxy: false }, { name: 'admin', port: 8081, enableIstioProxy: false }] },
      },
      annotations: { 'sidecar.istio.io/inject': 'true', 'traffic.sidecar.istio.io/excludeInboundPorts': '9102,8081' },
    },
  ];
  for (const { name, spec, annotations } of annotationCases) {
    test(`pod annotations: ${name}`, () => assert.deepEqual(podSpec(spec).template.metadata?.annotations, annotations));
  }

  test('exposes every service port on the container', () => {
    const { container } = podSpec({ service: { type: 'NodePort', ports: [{ name: 'http', port: 8080 }, { name: 'grpc', port: 9090 }] } });
    assert.deepEqual(container.ports, [
      { name: 'http', containerPort: 8080, protocol: 'TCP' },
      { name: 'grpc', containerPort: 9090, protocol: 'TCP' },
    ]);
  });

  test('mounts each ConfigMap once as a volume and the PVC at storage.mountPath', () => {
    const { container, volumes } = podSpec({
      configMaps: [
        { name: 'cfg', mountPath: '/etc/cfg' },
        { name: 'cfg', mountPath: '/etc/cfg-copy', readOnly: false },
        { name: 'flags', mountPath: '/etc/flags' },
      ],
      storage: { size: '1Gi', mountPath: '/var/lib/shop' },
    });
    assert.deepEqual(volumes, [
      { name: 'cm-cfg', configMap: { name: 'cfg' } },
      { name: 'cm-flags', configMap: { name: 'flags' } },
      { name: 'data', persistentVolumeClaim: { claimName: 'shop' } },
    ]);
    assert.deepEqual(container.volumeMounts, [
      { name: 'cm-cfg', mountPath: '/etc/cfg', readOnly: true },
      { name: 'cm-cfg', mountPath: '/etc/cfg-copy', readOnly: false },
      { name: 'cm-flags', mountPath: '/etc/flags', readOnly: true },
      { name: 'data', mountPath: '/var/lib/shop' },
    ]);
  });

  test('passes env and resources through, quantities as strings', () => {
    const { container } = podSpec({
      env: [
        { name: 'MODE', value: 'prod' },
        { name: 'MEM', valueFrom: { resourceFieldRef: { resource: 'limits.memory', divisor: 1 } } },
        { name: 'PASSWORD', valueFrom: { secretKeyRef: { name: 'db', key: 'password' } } },
      ],
      resources: { requests: { cpu: '250m', memory: 268435456 }, limits: { cpu: 1 } },
    });
    assert.deepEqual(container.env, [
      { name: 'MODE', value: 'prod' },
      { name: 'MEM', valueFrom: { resourceFieldRef: { resource: 'limits.memory', divisor: '1' } } },
      { name: 'PASSWORD', valueFrom: { secretKeyRef: { name: 'db', key: 'password' } } },
    ]);
    assert.deepEqual(container.resources, { requests: { cpu: '250m', memory: '268435456' }, limits: { cpu: '1' } });
  });

  test('copies all three probes', () => {
    const healthCheck = {
      livenessProbe: { exec: { command: ['/bin/check'] }, periodSeconds: 20 },
      readinessProbe: { httpGet: { path: '/ready', port: 'http', scheme: 'HTTPS' } },
      startupProbe: { grpc: { port: 9090 }, failureThreshold: 30 },
    };
    const { container } = podSpec({ healthCheck });
    assert.deepEqual(
      { livenessProbe: container.livenessProbe, readinessProbe: container.readinessProbe, startupProbe: container.startupProbe },
      healthCheck,
    );
  });

  test('is deterministic and carries no timestamp', () => {
    const app = clusterApp({ storage: { size: '1Gi' }, ...withCanary() });
    const first = JSON.stringify([renderDeployment(app), renderCanaryDeployment(app)]);
    assert.equal(JSON.stringify([renderDeployment(app), renderCanaryDeployment(app)]), first);
    assert.doesNotMatch(first, /\d{4}-\d{2}-\d{2}T\d{2}:/);
  });

  test('does not share objects with the Application', () => {
    const app = clusterApp({ env: [{ name: 'A', value: '1' }] });
    const env = renderDeployment(app).spec?.template.spec?.containers[0]?.env;
    assert.ok(env?.[0]);
    env[0].value = 'changed';
    assert.equal(app.spec.env?.[0]?.value, '1');
  });

  test('refuses an Application that was not read from the cluster', () => {
    const parsed = parseApplication(application('shop', { image: 'nginx' }));
    assert.ok(parsed.ok);
    assert.throws(() => renderDeployment(parsed.app), /no metadata.uid/);
    assert.throws(() => renderDeployment({ ...parsed.app, metadata: { name: 'shop', uid: UID } }), /no metadata.namespace/);
  });
});

describe('renderCanaryDeployment', () => {
  const app = clusterApp({ replicas: 5, autoscaling: { enabled: true, maxReplicas: 9, targetCPU: 50 }, ...withCanary({ replicas: 2 }) });
  const stable = renderDeployment(app);
  const canary = renderCanaryDeployment(app);

  test('is named <app>-canary and runs canary replicas even under autoscaling', () => {
    assert.equal(canary.metadata?.name, 'shop-canary');
    assert.deepEqual(canary.metadata?.ownerReferences, [owner]);
    assert.equal(canary.spec?.replicas, 2);
  });

  test('selects version=<canaryVersion>, never the stable pods', () => {
    assert.deepEqual(canary.spec?.selector.matchLabels, { 'app.kubernetes.io/name': 'shop', version: 'v2' });
    assert.notEqual(canary.spec?.selector.matchLabels?.version, stable.spec?.selector.matchLabels?.version);
    assert.equal(canary.spec?.template.metadata?.labels?.version, 'v2');
  });

  test('differs from the stable pod template only in version label and image', () => {
    const canaryTemplate = structuredClone(canary.spec?.template);
    assert.ok(canaryTemplate?.metadata?.labels && canaryTemplate.spec?.containers[0]);
    assert.equal(canaryTemplate.spec.containers[0].image, 'nginx:v2');
    canaryTemplate.metadata.labels.version = 'stable';
    canaryTemplate.spec.containers[0].image = 'nginx:1.25';
    assert.deepEqual(canaryTemplate, stable.spec?.template);
  });

  test('runs canary.image when given', () => {
    const withImage = clusterApp(withCanary({ image: 'ghcr.io/acme/shop:rc1' }));
    assert.equal(renderCanaryDeployment(withImage).spec?.template.spec?.containers[0]?.image, 'ghcr.io/acme/shop:rc1');
  });

  test('throws without a canary', () => {
    assert.throws(() => renderCanaryDeployment(clusterApp()), /no canary version/);
  });
});
