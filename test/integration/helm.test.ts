// The Helm chart against the real API server: it lints; at default values and with every value set, each object it
// renders passes the API server's validation (server-side dry run, ServiceMonitor and PrometheusRule included, against
// CRDs of our own for them); the environment it gives the operator parses into the configuration it stands for; and a real
// `helm install` on the stack grants exactly deploy/clusterrole.yaml's rules (the set the RBAC proof runs), runs a
// Deployment that becomes available on kwok, and `helm uninstall` removes what it installed.
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdtemp, readFile, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { Command } from 'commander';
import { parse, parseAllDocuments } from 'yaml';
import { chartDir, deployDir, helmBinary } from '../../deploy/generate.ts';
import { operatorConfig, withOperatorOptions, type OperatorConfig } from '../../operator/config.ts';
import { kube, testNamespace, waitForObject, type Json } from '../../testkit/apps.ts';
import { testEnv } from '../../testkit/env.ts';
import { tracingConfig } from '../../operator/tracing.ts';
import { FINALIZER, GROUP, PLURAL, RELEASE_PLURAL } from '../../api/constants.ts';

/** Every value of values.yaml set to something other than its default (checked below against values.yaml's keys). */
const allValues = {
  image: { repository: 'registry.example/platform/application-operator', tag: '1.2.3', pullPolicy: 'Always' },
  imagePullSecrets: [{ name: 'regcred' }],
  replicas: 3,
  resources: { requests: { cpu: '200m', memory: '300Mi' }, limits: { cpu: '2', memory: '2Gi' } },
  temporal: {
    address: 'ops.a1b2c.tmprl.cloud:7233', namespace: 'ops.a1b2c', taskQueue: 'apps',
    uiUrl: 'https://cloud.temporal.io/namespaces/ops.a1b2c',
    tls: { secretName: 'temporal-mtls', certKey: 'client.pem', keyKey: 'client.key', caKey: 'ca.pem', serverName: 'frontend.example' },
    apiKey: { secretName: 'temporal-api-key', key: 'token' },
  },
  payloadEncryption: { secretName: 'payload-keys', key: 'keys.txt' },
  watchNamespaces: ['team-a', 'team-b'],
  finalizerPolicy: { enabled: true, apiVersion: 'admissionregistration.k8s.io/v1beta1', namespaceSelector: { matchLabels: { 'example.com/operated': 'yes' } } },
  leaderElection: { enabled: true },
  fleet: { enabled: true, probeSeconds: 45 },
  logLevel: 'debug',
  prometheusAddress: 'http://prometheus.monitoring.svc:9090',
  checkAllowedHosts: ['smoke.qa.svc', '*.checks.svc:8080', '10.0.0.0/8'],
  notifications: { url: 'https://hooks.example.com/rollouts', format: 'teams' },
  tracing: { otlpEndpoint: 'http://otel-collector.monitoring.svc:4318', serviceName: 'operator-eu' },
  metrics: {
    port: 9555, service: { enabled: true }, serviceMonitor: { enabled: true, interval: '15s', scrapeTimeout: '5s', labels: { release: 'kube-prometheus-stack' } },
    prometheusRule: { enabled: true, labels: { release: 'kube-prometheus-stack' } }, grafanaDashboard: { enabled: true, labels: { grafana_dashboard: '1', team: 'platform' } },
  },
  extraArgs: ['--max-concurrent-activities=20'],
  extraEnv: [{ name: 'RESYNC_SECONDS', value: '600' }],
  nodeSelector: { 'kubernetes.io/os': 'linux' },
  tolerations: [{ key: 'dedicated', operator: 'Equal', value: 'operators', effect: 'NoSchedule' }],
  affinity: { nodeAffinity: { requiredDuringSchedulingIgnoredDuringExecution: { nodeSelectorTerms: [{ matchExpressions: [{ key: 'kubernetes.io/arch', operator: 'In', values: ['amd64'] }] }] } } },
  podAnnotations: { 'example.com/team': 'platform' },
};

/**
 * A Prometheus Operator CRD of our own (the stack has no Prometheus Operator), with `spec` holding only the fields of
 * monitoring.coreos.com/v1 that the chart renders, and no others, so that a misspelled field fails the dry run as it
 * would for real.
 */
const monitoringCrd = (kind: string, spec: Json) => ({
  apiVersion: 'apiextensions.k8s.io/v1', kind: 'CustomResourceDefinition',
  metadata: { name: `${kind.toLowerCase()}s.monitoring.coreos.com` },
  spec: {
    group: 'monitoring.coreos.com', scope: 'Namespaced',
    names: { kind, listKind: `${kind}List`, plural: `${kind.toLowerCase()}s`, singular: kind.toLowerCase() },
    versions: [{ name: 'v1', served: true, storage: true, schema: { openAPIV3Schema: { type: 'object', properties: { spec } } } }],
  },
});

const serviceMonitorCrd = monitoringCrd('ServiceMonitor', {
  type: 'object', required: ['selector'],
  properties: {
    selector: { type: 'object', properties: { matchLabels: { type: 'object', additionalProperties: { type: 'string' } } } },
    namespaceSelector: { type: 'object', properties: { matchNames: { type: 'array', items: { type: 'string' } } } },
    endpoints: {
      type: 'array',
      items: {
        type: 'object',
        properties: {
          port: { type: 'string' },
          path: { type: 'string' },
          interval: { type: 'string', pattern: '^([0-9]+(ms|s|m|h|d|w|y))+$' },
          scrapeTimeout: { type: 'string', pattern: '^([0-9]+(ms|s|m|h|d|w|y))+$' },
          honorLabels: { type: 'boolean' },
        },
      },
    },
  },
});

const prometheusRuleCrd = monitoringCrd('PrometheusRule', {
  type: 'object',
  properties: {
    groups: {
      type: 'array',
      items: {
        type: 'object', required: ['name'],
        properties: {
          name: { type: 'string', minLength: 1 },
          interval: { type: 'string' },
          rules: {
            type: 'array',
            items: {
              type: 'object', required: ['expr'],
              properties: {
                alert: { type: 'string' },
                record: { type: 'string' },
                expr: { 'x-kubernetes-int-or-string': true },
                for: { type: 'string', pattern: '^(0|(([0-9]+)y)?(([0-9]+)w)?(([0-9]+)d)?(([0-9]+)h)?(([0-9]+)m)?(([0-9]+)s)?(([0-9]+)ms)?)$' },
                labels: { type: 'object', additionalProperties: { type: 'string' } },
                annotations: { type: 'object', additionalProperties: { type: 'string' } },
              },
            },
          },
        },
      },
    },
  },
});

const ourCrds = [serviceMonitorCrd, prometheusRuleCrd];

/** An object read with kubectl (our JSON client knows only the kinds the operator uses), or null. */
const kubeGet = async (kind: string, name: string, namespace?: string): Promise<Json | null> => {
  const out = await kube(['get', kind, name, '--ignore-not-found', '-o', 'json', ...(namespace ? ['-n', namespace] : [])]);
  return out.trim() ? JSON.parse(out) as Json : null;
};
const crdExists = async (name: string) => (await kubeGet('crd', name)) !== null;
const releaseOf = (prefix: string) => `${prefix}-${randomBytes(3).toString('hex')}`;
const envOf = (deployment: Json): Record<string, Json> => Object.fromEntries(deployment.spec.template.spec.containers[0].env.map((e: Json) => [e.name, e]));

describe('the Helm chart', () => {
  let helm: string;
  let kubeconfig: string;
  let workDir: string;
  let ns: { name: string; cleanup: () => Promise<void> };
  /** The CRDs of ourCrds this test created (and removes). */
  const createdCrds: string[] = [];

  /** Runs the cached helm against the stack, with its own config and cache folders (nothing of the user's is read or written). */
  const runHelm = (args: string[]) => new Promise<string>((res, rej) => {
    execFile(helm, [...args, `--kubeconfig=${kubeconfig}`], {
      maxBuffer: 64 << 20,
      env: { ...process.env, HELM_CONFIG_HOME: join(workDir, 'config'), HELM_CACHE_HOME: join(workDir, 'cache'), HELM_DATA_HOME: join(workDir, 'data') },
    }, (err, stdout, stderr) => (err ? rej(new Error(`helm ${args.join(' ')}: ${stderr || err.message}`)) : res(stdout)));
  });
  const valuesFile = async (name: string, values: Json) => {
    const file = join(workDir, `${name}.yaml`);
    await writeFile(file, JSON.stringify(values));
    return file;
  };
  const render = async (namespace: string, extra: string[] = []): Promise<Json[]> =>
    parseAllDocuments(await runHelm(['template', releaseOf('tpl'), chartDir, '--namespace', namespace, ...extra])).map((d) => d.toJS() as Json).filter(Boolean);
  const one = (objects: Json[], kind: string) => {
    const found = objects.filter((o) => o.kind === kind);
    assert.equal(found.length, 1, `one ${kind} in ${objects.map((o) => o.kind).join(', ')}`);
    return found[0]!;
  };
  const dryRun = (objects: Json[]) => kube(['apply', '--server-side', '--force-conflicts', '--dry-run=server', '--field-manager=helm-test', '-f', '-', '-o', 'name'],
    JSON.stringify({ apiVersion: 'v1', kind: 'List', items: objects }));

  before(async () => {
    kubeconfig = (await testEnv()).kubeconfigPath;
    helm = await helmBinary();
    workDir = await mkdtemp(join(tmpdir(), 'helm-test-'));
    ns = await testNamespace('helm');
    for (const crd of ourCrds) {
      if (await crdExists(crd.metadata.name)) continue;
      createdCrds.push(crd.metadata.name);
      await kube(['apply', '--server-side', '--field-manager=helm-test', '-f', '-'], JSON.stringify(crd));
      await kube(['wait', '--for=condition=Established', `crd/${crd.metadata.name}`, '--timeout=60s']);
    }
  });
  after(async () => {
    for (const name of createdCrds) await kube(['delete', 'crd', name, '--wait=false']).catch(() => '');
    await ns?.cleanup();
  });

  it('lints, at default values and with every value set', async () => {
    await runHelm(['lint', '--strict', chartDir]);
    // In the GA version: --strict fails on v1beta1's deprecation (the dry run below needs v1beta1, which 1.35 serves).
    await runHelm(['lint', '--strict', chartDir, '-f', await valuesFile('all', allValues), '--set', 'finalizerPolicy.apiVersion=admissionregistration.k8s.io/v1']);
  });

  it('covers every value of values.yaml: the all-values case sets it, and values.schema.json describes it', async () => {
    const leaves = (v: unknown, at: string): string[] =>
      v && typeof v === 'object' && !Array.isArray(v) && Object.keys(v).length > 0
        ? Object.entries(v).flatMap(([k, x]) => leaves(x, at ? `${at}.${k}` : k))
        : [at];
    const defaults = parse(await readFile(join(chartDir, 'values.yaml'), 'utf8')) as Json;
    const set = leaves(allValues, '');
    // An empty map in values.yaml (nodeSelector: {}) is covered by any entry under it.
    const covered = (k: string) => set.some((x) => x === k || x.startsWith(`${k}.`));
    assert.deepEqual(leaves(defaults, '').filter((k) => !covered(k)), [], 'values.yaml has values the all-values case leaves at their default');
    // values.schema.json describes every value, so that it can refuse the ones that are not.
    const schema = JSON.parse(await readFile(join(chartDir, 'values.schema.json'), 'utf8')) as Json;
    const described = (path: string) => {
      let node: Json | undefined = schema;
      for (const key of path.split('.')) {
        if (node?.$ref) node = schema.definitions[String(node.$ref).split('/').at(-1)!];
        // A free-form object (resources, affinity) describes whatever is below it.
        if (node?.type === 'object' && !node.properties) return true;
        node = node?.properties?.[key];
      }
      return node !== undefined;
    };
    assert.deepEqual(leaves(defaults, '').filter((k) => !described(k)), [], 'values.schema.json lacks values of values.yaml');
  });

  it('refuses a value it does not know or cannot use, and says which', async () => {
    await assert.rejects(render(ns.name, ['--set', 'replica=3']), /additional properties 'replica' not allowed/);
    await assert.rejects(render(ns.name, ['--set', 'temporal.adress=x:7233']), /additional properties 'adress' not allowed/);
    await assert.rejects(render(ns.name, ['--set', 'logLevel=verbose']), /\/logLevel/);
    await assert.rejects(render(ns.name, ['--set', 'temporal.address=temporal-frontend']), /\/temporal\/address/);
  });

  it('renders, at default values, the CRDs, RBAC, the Deployment and the metrics Service, which all pass the API server\'s validation', async () => {
    const objects = await render(ns.name, ['--include-crds']);
    assert.deepEqual(objects.map((o) => o.kind).sort(), [
      'ClusterRole', 'ClusterRoleBinding', 'CustomResourceDefinition', 'CustomResourceDefinition', 'Deployment', 'Role', 'Role', 'RoleBinding', 'RoleBinding', 'Service', 'ServiceAccount',
    ]);
    const names = (await dryRun(objects)).trim().split('\n');
    assert.equal(names.length, objects.length, names.join('\n'));
  });

  it('renders every optional value where the operator reads it, and every object passes the API server\'s validation', async () => {
    const objects = await render(ns.name, ['-f', await valuesFile('all', allValues)]);
    assert.deepEqual(objects.map((o) => o.kind).sort(), [
      'ClusterRole', 'ClusterRoleBinding', 'ConfigMap', 'Deployment', 'MutatingAdmissionPolicy', 'MutatingAdmissionPolicyBinding', 'PrometheusRule', 'Role', 'Role', 'RoleBinding', 'RoleBinding', 'Service', 'ServiceAccount', 'ServiceMonitor',
    ]);
    const d = one(objects, 'Deployment');
    const pod = d.spec.template.spec;
    const [c] = pod.containers;
    assert.equal(d.spec.replicas, 3);
    assert.equal(c.image, 'registry.example/platform/application-operator:1.2.3');
    assert.equal(c.imagePullPolicy, 'Always');
    assert.deepEqual(pod.imagePullSecrets, [{ name: 'regcred' }]);
    assert.deepEqual(c.resources, allValues.resources);
    assert.deepEqual(c.args, allValues.extraArgs);
    assert.deepEqual([pod.nodeSelector, pod.tolerations, pod.affinity], [allValues.nodeSelector, allValues.tolerations, allValues.affinity]);
    assert.equal(d.spec.template.metadata.annotations['example.com/team'], 'platform');
    assert.equal(d.spec.template.metadata.annotations['prometheus.io/port'], '9555');
    assert.equal(c.ports[0].containerPort, 9555);
    const env = envOf(d);
    assert.deepEqual(env['TEMPORAL_API_KEY']?.valueFrom, { secretKeyRef: { name: 'temporal-api-key', key: 'token' } });
    assert.deepEqual(env['RESYNC_SECONDS'], { name: 'RESYNC_SECONDS', value: '600' });
    // Tracing: the OTEL_* variables the operator's SDK reads, which turn it on.
    assert.deepEqual(tracingConfig({ OTEL_EXPORTER_OTLP_ENDPOINT: env['OTEL_EXPORTER_OTLP_ENDPOINT']?.value, OTEL_SERVICE_NAME: env['OTEL_SERVICE_NAME']?.value }), { serviceName: 'operator-eu' });
    assert.equal(env['OTEL_EXPORTER_OTLP_ENDPOINT']?.value, 'http://otel-collector.monitoring.svc:4318');
    const mounts = Object.fromEntries(c.volumeMounts.map((m: Json) => [m.name, m]));
    const volumes = Object.fromEntries(pod.volumes.map((v: Json) => [v.name, v]));
    assert.deepEqual([mounts['temporal-tls']?.readOnly, volumes['temporal-tls']?.secret], [true, { secretName: 'temporal-mtls' }]);
    assert.deepEqual([mounts['payload-keys']?.readOnly, volumes['payload-keys']?.secret], [true, { secretName: 'payload-keys' }]);
    const tlsDir = mounts['temporal-tls'].mountPath;
    const keysDir = mounts['payload-keys'].mountPath;

    const service = one(objects, 'Service');
    assert.equal(service.spec.ports[0].port, 9555);
    const monitor = one(objects, 'ServiceMonitor');
    assert.equal(monitor.metadata.labels.release, 'kube-prometheus-stack');
    assert.deepEqual(monitor.spec.endpoints, [{ port: 'metrics', path: '/metrics', interval: '15s', scrapeTimeout: '5s', honorLabels: true }]);
    assert.deepEqual(Object.entries(monitor.spec.selector.matchLabels).filter(([k, v]) => service.metadata.labels[k] !== v), [], 'the ServiceMonitor selects the metrics Service');

    // The environment parses into the configuration the values stand for, the way the operator reads it.
    assert.deepEqual(pick(configFromEnv(env)), {
      temporalAddress: 'ops.a1b2c.tmprl.cloud:7233', temporalNamespace: 'ops.a1b2c', taskQueue: 'apps', temporalUiUrl: allValues.temporal.uiUrl,
      temporalTlsCert: `${tlsDir}/client.pem`, temporalTlsKey: `${tlsDir}/client.key`, temporalTlsCa: `${tlsDir}/ca.pem`, temporalTlsServerName: 'frontend.example',
      temporalApiKey: '<from the Secret>', payloadEncryptionKeyFile: `${keysDir}/keys.txt`, namespaces: ['team-a', 'team-b'],
      prometheusAddress: 'http://prometheus.monitoring.svc:9090', metricsAddr: '0.0.0.0:9555', logLevel: 'debug',
      checkAllowedHosts: [{ host: 'smoke.qa.svc', wildcard: false }, { host: 'checks.svc', wildcard: true, port: 8080 }, { host: '10.0.0.0', wildcard: false, prefix: 8 }],
      notifyDefault: { name: 'operator-default', url: 'https://hooks.example.com/rollouts', format: 'teams' },
      leaderElect: true, leaseName: `${d.metadata.name}-leader`, leaseNamespace: '<from the pod>', resyncSeconds: 600, clusterProbeSeconds: 45,
    });
    const rule = one(objects, 'PrometheusRule');
    assert.equal(rule.metadata.labels.release, 'kube-prometheus-stack');
    assert.deepEqual(rule.spec, parse(await readFile(join(deployDir, 'monitoring', 'prometheus-rules.yaml'), 'utf8')), 'the PrometheusRule carries the rule file');
    const dashboard = one(objects, 'ConfigMap');
    assert.deepEqual([dashboard.metadata.labels.grafana_dashboard, dashboard.metadata.labels.team], ['1', 'platform']);
    assert.deepEqual(JSON.parse(dashboard.data['application-operator.json']), JSON.parse(await readFile(join(deployDir, 'monitoring', 'grafana-dashboard.json'), 'utf8')));
    const role = objects.find((o) => o.kind === 'Role' && o.metadata.name.endsWith('-leader-election'))!;
    assert.deepEqual(role.rules.flatMap((r: Json) => r.resourceNames ?? []), [`${d.metadata.name}-leader`], 'the Role grants the Lease the operator is told to use');
    // Fleet Releases read and label the Secrets that register member clusters, in the operator's namespace only.
    const fleet = objects.find((o) => o.kind === 'Role' && o.metadata.name.endsWith('-member-clusters'))!;
    assert.deepEqual(fleet.rules, [{ apiGroups: [''], resources: ['secrets'], verbs: ['get', 'list', 'patch'] }]);
    assert.equal(fleet.metadata.namespace, ns.name);

    // The finalizer policy: the operator's finalizer, on creates of the API's kinds, where the selector says.
    const policy = one(objects, 'MutatingAdmissionPolicy');
    assert.equal(policy.apiVersion, allValues.finalizerPolicy.apiVersion);
    assert.deepEqual(policy.spec.matchConstraints.resourceRules, [{ apiGroups: [GROUP], apiVersions: ['*'], operations: ['CREATE'], resources: [PLURAL, RELEASE_PLURAL] }]);
    assert.match(policy.spec.mutations[0].applyConfiguration.expression, new RegExp(`finalizers: \\["${FINALIZER}"\\]`));
    const policyBinding = one(objects, 'MutatingAdmissionPolicyBinding');
    assert.deepEqual([policyBinding.spec.policyName, policyBinding.spec.matchResources.namespaceSelector], [policy.metadata.name, allValues.finalizerPolicy.namespaceSelector]);

    const names = (await dryRun(objects)).trim().split('\n');
    assert.equal(names.length, objects.length, names.join('\n'));
  });

  it('binds the finalizer policy to the watched namespaces, and renders none without a version the cluster serves', async () => {
    const ga = ['--api-versions', 'admissionregistration.k8s.io/v1/MutatingAdmissionPolicy'];
    const watched = await render(ns.name, [...ga, '--set', 'watchNamespaces={team-a,team-b}']);
    assert.equal(one(watched, 'MutatingAdmissionPolicy').apiVersion, 'admissionregistration.k8s.io/v1');
    assert.deepEqual(one(watched, 'MutatingAdmissionPolicyBinding').spec.matchResources, {
      namespaceSelector: { matchExpressions: [{ key: 'kubernetes.io/metadata.name', operator: 'In', values: ['team-a', 'team-b'] }] },
    });
    assert.equal(one(await render(ns.name, ga), 'MutatingAdmissionPolicyBinding').spec.matchResources, undefined, 'all namespaces when all are watched');
    assert.equal((await render(ns.name, [...ga, '--set', 'finalizerPolicy.enabled=false'])).filter((o) => String(o.kind).startsWith('MutatingAdmission')).length, 0);
    assert.equal((await render(ns.name)).filter((o) => String(o.kind).startsWith('MutatingAdmission')).length, 0, 'helm template knows no cluster: no version served');
  });

  it('control: the ServiceMonitor and PrometheusRule CRDs reject a field they do not know, so the dry run above can fail', async () => {
    const objects = await render(ns.name, ['-f', await valuesFile('all', allValues)]);
    const monitor = structuredClone(one(objects, 'ServiceMonitor'));
    monitor.spec.endpoints[0].scrapeIntervall = '15s';
    await assert.rejects(dryRun([monitor]), /unknown field "scrapeIntervall"/);
    const rule = structuredClone(one(objects, 'PrometheusRule'));
    rule.spec.groups[0].rules[0].fr = '5m';
    await assert.rejects(dryRun([rule]), /unknown field "[^"]*\bfr"/);
  });

  it('without leader election renders no Role and tells the operator so', async () => {
    const objects = await render(ns.name, ['--set', 'leaderElection.enabled=false', '--set', 'fleet.enabled=false']);
    assert.equal(objects.filter((o) => o.kind === 'Role' || o.kind === 'RoleBinding').length, 0);
    const cfg = configFromEnv(envOf(one(objects, 'Deployment')));
    assert.equal(cfg.leaderElect, false);
    assert.equal(cfg.clusterProbeSeconds, 0, 'without fleet, the operator probes no member clusters (it may not read their Secrets)');
  });

  // A user who named the namespaces in extraArgs got a finalizer policy bound to every namespace: Applications where
  // no operator watched kept a finalizer that held their deletion.
  it('refuses watched namespaces given past watchNamespaces (extraArgs, extraEnv), which the finalizer policy would not follow', async () => {
    await assert.rejects(render(ns.name, ['--set-json', 'extraArgs=["--namespaces=team-a"]']), /extraArgs: set watchNamespaces instead of --namespaces/);
    await assert.rejects(render(ns.name, ['--set-json', 'extraArgs=["--namespaces","team-a"]']), /extraArgs: set watchNamespaces instead of --namespaces/);
    await assert.rejects(render(ns.name, ['--set-json', 'extraEnv=[{"name":"WATCH_NAMESPACES","value":"team-a"}]']), /extraEnv: set watchNamespaces instead of WATCH_NAMESPACES/);
    const fine = await render(ns.name, ['--set-json', 'extraArgs=["--namespaces-are-not-this=1"]', '--set-json', 'extraEnv=[{"name":"RESYNC_SECONDS","value":"600"}]']);
    assert.deepEqual(one(fine, 'Deployment').spec.template.spec.containers[0].args, ['--namespaces-are-not-this=1']);
  });

  it('refuses a ServiceMonitor without the Service it selects', async () => {
    await assert.rejects(render(ns.name, ['--set', 'metrics.serviceMonitor.enabled=true', '--set', 'metrics.service.enabled=false']), /metrics\.serviceMonitor\.enabled needs metrics\.service\.enabled/);
  });

  it('installs into the stack: deploy/clusterrole.yaml\'s rules exactly, an available Deployment on kwok; uninstall removes it', async () => {
    const release = releaseOf('helm');
    const installNs = await testNamespace('helm-install');
    const fullname = `${release}-application-operator`;
    try {
      // Any image but the stack's misbehaving test images becomes Ready on kwok's fake nodes.
      // The finalizer policy bound to the install's own namespace only: bound to all, it would put finalizers on the
      // Applications of every other test, and this Deployment (no operator on kwok) would never release them.
      await runHelm(['install', release, chartDir, '--namespace', installNs.name,
        '--set', 'image.repository=registry.example/application-operator', '--set', 'image.tag=helm-test', '--set', 'replicas=2',
        '--set-json', `finalizerPolicy.namespaceSelector={"matchLabels":{"kubernetes.io/metadata.name":"${installNs.name}"}}`]);
      // helm asks the cluster which version it serves the policy in: this Kubernetes (1.35) serves v1beta1.
      const policy = await kubeGet('mutatingadmissionpolicies.v1beta1.admissionregistration.k8s.io', `${fullname}-finalizer`);
      assert.equal(policy?.apiVersion, 'admissionregistration.k8s.io/v1beta1', 'the finalizer policy installed in the version the cluster serves');
      const clusterRole = await kubeGet('clusterrole', fullname);
      assert.ok(clusterRole, `ClusterRole ${fullname} installed`);
      const expected = (parse(await readFile(join(deployDir, 'clusterrole.yaml'), 'utf8')) as Json).rules;
      assert.deepEqual(clusterRole.rules, expected, 'the installed ClusterRole grants exactly deploy/clusterrole.yaml\'s rules');
      const binding = await kubeGet('clusterrolebinding', fullname);
      assert.deepEqual([binding?.roleRef.name, binding?.subjects], [fullname, [{ kind: 'ServiceAccount', name: fullname, namespace: installNs.name }]]);

      const d = await waitForObject(`Deployment ${fullname} available`, () => kubeGet('deployment', fullname, installNs.name),
        (o) => o?.status?.availableReplicas === 2 && o.status.updatedReplicas === 2 && o.status.observedGeneration === o.metadata.generation, 120_000);
      assert.equal(d?.spec.template.spec.containers[0].image, 'registry.example/application-operator:helm-test');
      assert.equal(d?.spec.template.spec.serviceAccountName, fullname);

      await runHelm(['uninstall', release, '--namespace', installNs.name, '--wait', '--timeout=120s']);
      for (const [kind, name, namespace] of [
        ['clusterrole', fullname], ['clusterrolebinding', fullname], ['deployment', fullname, installNs.name],
        ['serviceaccount', fullname, installNs.name], ['service', `${fullname}-metrics`, installNs.name], ['role', `${fullname}-leader-election`, installNs.name],
        ['mutatingadmissionpolicies.v1beta1.admissionregistration.k8s.io', `${fullname}-finalizer`], ['mutatingadmissionpolicybindings.v1beta1.admissionregistration.k8s.io', `${fullname}-finalizer`],
      ] as const) {
        await waitForObject(`${kind} ${name} deleted`, () => kubeGet(kind, name, namespace), (o) => o === null || Boolean(o.metadata.deletionTimestamp), 60_000);
      }
      assert.ok(await crdExists('applications.myapp.example.com'), 'uninstall leaves the CRD (and so every Application) alone');
    } finally {
      await runHelm(['uninstall', release, '--namespace', installNs.name, '--ignore-not-found']).catch(() => '');
      for (const kind of ['clusterrolebinding', 'clusterrole']) await kube(['delete', kind, fullname, '--ignore-not-found', '--wait=false']).catch(() => '');
      for (const kind of ['mutatingadmissionpolicybindings', 'mutatingadmissionpolicies']) await kube(['delete', `${kind}.v1beta1.admissionregistration.k8s.io`, `${fullname}-finalizer`, '--ignore-not-found', '--wait=false']).catch(() => '');
      await installNs.cleanup();
    }
  });
});

/** The operator's configuration from a container's environment, as `application-operator run` parses it; values from Secrets and the pod stand in as placeholders. */
function configFromEnv(env: Record<string, Json>): OperatorConfig {
  const cmd = withOperatorOptions(new Command()).exitOverride().configureOutput({ writeErr: () => {} });
  const envVars = cmd.options.flatMap((o) => (o.envVar ? [o.envVar] : []));
  const values = Object.fromEntries(Object.entries(env).map(([name, e]) => [name, e.value ?? (e.valueFrom?.secretKeyRef ? '<from the Secret>' : '<from the pod>')]));
  // OTEL_* are read by the OpenTelemetry SDK (operator/tracing.ts), not by a flag; the test checks them apart.
  const unknown = Object.keys(values).filter((k) => !envVars.includes(k) && !['POD_NAME', 'POD_NAMESPACE'].includes(k) && !k.startsWith('OTEL_'));
  assert.deepEqual(unknown, [], 'the chart sets environment variables the operator does not read');
  const saved = { ...process.env };
  try {
    for (const k of [...envVars, 'POD_NAMESPACE', 'PAYLOAD_ENCRYPTION_KEY']) Reflect.deleteProperty(process.env, k);
    Object.assign(process.env, values);
    return operatorConfig(cmd.parse([], { from: 'user' }).opts());
  } finally {
    for (const k of Object.keys(process.env)) if (!(k in saved)) Reflect.deleteProperty(process.env, k);
    Object.assign(process.env, saved);
  }
}

/** The settings the chart's values decide. */
function pick(cfg: OperatorConfig): Partial<OperatorConfig> {
  const keys = ['temporalAddress', 'temporalNamespace', 'taskQueue', 'temporalUiUrl', 'temporalTlsCert', 'temporalTlsKey', 'temporalTlsCa', 'temporalTlsServerName',
    'temporalApiKey', 'payloadEncryptionKeyFile', 'namespaces', 'prometheusAddress', 'checkAllowedHosts', 'notifyDefault', 'metricsAddr', 'logLevel', 'leaderElect', 'leaseName', 'leaseNamespace', 'resyncSeconds',
    'clusterProbeSeconds'] as const;
  return Object.fromEntries(keys.map((k) => [k, cfg[k]]));
}
