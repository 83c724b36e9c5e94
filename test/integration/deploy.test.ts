// deploy/: the kustomization builds, every object passes the real API server's validation (server-side dry run), and
// the operator's pod is admitted where the restricted Pod Security Standard is enforced.
import assert from 'node:assert/strict';
import { fileURLToPath } from 'node:url';
import { after, before, describe, it } from 'node:test';
import { parseAllDocuments } from 'yaml';
import { kube, testNamespace, type Json } from '../../testkit/apps.ts';

const deployDir = fileURLToPath(new URL('../../deploy/', import.meta.url));
const NS = 'application-operator-system';

describe('deploy/', () => {
  let objects: Json[];
  let ns: { name: string; cleanup: () => Promise<void> };

  before(async () => {
    objects = parseAllDocuments(await kube(['kustomize', deployDir])).map((d) => d.toJSON() as Json);
    ns = await testNamespace('deploy');
  });
  after(async () => ns?.cleanup());

  const one = (kind: string) => {
    const found = objects.filter((o) => o.kind === kind);
    assert.equal(found.length, 1, `one ${kind}`);
    return found[0]!;
  };

  it('builds the CRD, the namespace, RBAC and the operator, everything namespaced in its namespace', () => {
    assert.deepEqual(objects.map((o) => o.kind).sort(), [
      'ClusterRole', 'ClusterRoleBinding', 'CustomResourceDefinition', 'CustomResourceDefinition', 'Deployment', 'Namespace', 'Role', 'Role', 'RoleBinding', 'RoleBinding', 'ServiceAccount',
    ]);
    for (const o of objects.filter((x) => ['ServiceAccount', 'Role', 'RoleBinding', 'Deployment'].includes(x.kind))) assert.equal(o.metadata.namespace, NS, o.kind);
    const subjects = [...one('ClusterRoleBinding').subjects, ...objects.filter((o) => o.kind === 'RoleBinding').flatMap((o) => o.subjects)];
    for (const s of subjects) assert.deepEqual(s, { kind: 'ServiceAccount', name: 'application-operator', namespace: NS });
  });

  it('runs 2 non-root replicas with a read-only root, no capabilities, probes on the metrics port and resource limits', () => {
    const d = one('Deployment');
    assert.equal(d.spec.replicas, 2);
    const pod = d.spec.template.spec;
    assert.equal(pod.serviceAccountName, 'application-operator');
    assert.deepEqual(pod.securityContext, { runAsNonRoot: true, runAsUser: 65532, runAsGroup: 65532, seccompProfile: { type: 'RuntimeDefault' } });
    const [c] = pod.containers;
    assert.equal(c.image, 'application-operator:latest');
    assert.deepEqual(c.securityContext, { allowPrivilegeEscalation: false, readOnlyRootFilesystem: true, privileged: false, capabilities: { drop: ['ALL'] } });
    assert.deepEqual([c.livenessProbe.httpGet, c.readinessProbe.httpGet], [{ path: '/healthz', port: 'metrics' }, { path: '/readyz', port: 'metrics' }]);
    assert.equal(c.ports.find((p: Json) => p.name === 'metrics').containerPort, 9464);
    for (const k of ['cpu', 'memory']) assert.ok(c.resources.requests[k] && c.resources.limits[k], `requests and limits for ${k}`);
    const env = Object.fromEntries(c.env.map((e: Json) => [e.name, e.value ?? e.valueFrom.fieldRef.fieldPath]));
    assert.equal(env['METRICS_ADDR'], '0.0.0.0:9464', 'probes reach the metrics port from outside the pod');
    assert.equal(env['LEADER_ELECT'], 'true');
    assert.equal(env['POD_NAME'], 'metadata.name');
    assert.equal(env['LEASE_NAMESPACE'], 'metadata.namespace');
    assert.ok(env['TEMPORAL_ADDRESS']);
  });

  it('every object passes the API server\'s validation (server-side dry run)', async () => {
    // Namespaced objects go to the test namespace (theirs does not exist here); nothing is persisted.
    const items = objects.map((o) => (o.metadata.namespace ? { ...o, metadata: { ...o.metadata, namespace: ns.name } } : o));
    const out = await kube(['apply', '--server-side', '--force-conflicts', '--dry-run=server', '--field-manager=deploy-test', '-f', '-', '-o', 'name'], JSON.stringify({ apiVersion: 'v1', kind: 'List', items }));
    assert.equal(out.trim().split('\n').length, objects.length, out);
  });

  it('the operator pod is admitted under the restricted Pod Security Standard, and a weaker one is not', async () => {
    await kube(['label', 'namespace', ns.name, 'pod-security.kubernetes.io/enforce=restricted', 'pod-security.kubernetes.io/enforce-version=latest']);
    const template = one('Deployment').spec.template;
    const pod = (spec: Json) => JSON.stringify({ apiVersion: 'v1', kind: 'Pod', metadata: { name: 'operator', namespace: ns.name, labels: template.metadata.labels }, spec });
    await kube(['create', '--dry-run=server', '-f', '-'], pod(template.spec));
    // Control: the same pod allowed to keep its capabilities is refused, so the check above can fail.
    const weaker = structuredClone(template.spec);
    delete weaker.containers[0].securityContext.capabilities;
    await assert.rejects(kube(['create', '--dry-run=server', '-f', '-'], pod(weaker)), /violates PodSecurity "restricted:latest".*capabilities/s);
  });
});
