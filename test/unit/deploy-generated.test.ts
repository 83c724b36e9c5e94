// One source for both ways of installing: deploy/*.yaml (kubectl apply -k deploy/) must be exactly the Helm chart
// rendered at its default values, the kustomization must list what the chart renders, the chart's CRDs must be
// the repository's crds/*.yaml, and deploy/monitoring's objects must carry its rule file and dashboard unchanged. A hand edit of a generated file, a template nobody wired into the kustomization, or a
// CRD missing on either side fails here; `npm run deploy:generate` brings deploy/ back in line.
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { readdir, readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { describe, test } from 'node:test';
import { promisify } from 'node:util';
import { parse, parseAllDocuments } from 'yaml';
import { chartDir, deployDir, generatedFilesOnDisk, helmBinary, kustomizeRelease, renderDeployFiles } from '../../deploy/generate.ts';
import { artifactPaths } from '../../stack/versions.ts';
import { FINALIZER } from '../../api/constants.ts';

const exec = promisify(execFile);
const crdsDir = join(deployDir, '..', 'crds');
const resourcesOf = async (kustomization: string) => (parse(await readFile(kustomization, 'utf8')) as { resources: string[] }).resources;
const docsOf = (text: string) => parseAllDocuments(text).map((d) => d.toJS() as unknown).filter((d) => d !== null);

describe('deploy/ is the Helm chart at its default values', () => {
  test('every generated file is what the chart renders now', async () => {
    const rendered = await renderDeployFiles();
    assert.ok(rendered.size >= 7, `the chart rendered only ${[...rendered.keys()].join(', ')}`);
    assert.deepEqual(await generatedFilesOnDisk(), [...rendered.keys()].sort(), 'deploy/ has generated files the chart no longer renders, or lacks some: run `npm run deploy:generate`');
    const stale: string[] = [];
    for (const [name, content] of rendered) {
      if ((await readFile(join(deployDir, name), 'utf8')) !== content) stale.push(name);
    }
    assert.deepEqual(stale, [], `deploy/ differs from the chart in ${stale.join(', ')}: edit the chart, then run \`npm run deploy:generate\``);
  });

  test('the kustomization lists the CRDs, the namespace and every generated manifest but the metrics Service', async () => {
    const generated = await generatedFilesOnDisk();
    // The metrics Service is opt-in for kustomize users (deploy/README.md); Helm installs it by default. The monitoring
    // objects need the Prometheus Operator and Grafana, so they have a kustomization of their own (tested below).
    const expected = ['../crds', 'namespace.yaml', ...generated.filter((f) => f !== 'metrics-service.yaml' && !f.startsWith('monitoring/') && !f.startsWith('admission/'))];
    assert.deepEqual([...await resourcesOf(join(deployDir, 'kustomization.yaml'))].sort(), expected.sort());
  });

  test('deploy/admission/ is the chart\'s finalizer policy in its GA version, bound to every namespace, with a kustomization of its own', async () => {
    // Its own: a cluster without admissionregistration.k8s.io/v1 MutatingAdmissionPolicy (before 1.36) refuses it.
    const generated = (await generatedFilesOnDisk()).filter((f) => f.startsWith('admission/')).map((f) => f.slice('admission/'.length));
    assert.deepEqual([...await resourcesOf(join(deployDir, 'admission', 'kustomization.yaml'))].sort(), generated.sort());
    const { stdout } = await exec(artifactPaths().kubectl, ['kustomize', join(deployDir, 'admission')], { maxBuffer: 16 << 20 });
    const objects = docsOf(stdout) as { apiVersion: string; kind: string; spec: { policyName?: string; matchResources?: unknown; mutations?: { applyConfiguration: { expression: string } }[] } }[];
    assert.deepEqual(objects.map((o) => [o.apiVersion, o.kind]).sort(), [['admissionregistration.k8s.io/v1', 'MutatingAdmissionPolicy'], ['admissionregistration.k8s.io/v1', 'MutatingAdmissionPolicyBinding']]);
    assert.equal(objects.find((o) => o.kind === 'MutatingAdmissionPolicyBinding')?.spec.matchResources, undefined);
    assert.ok(objects.find((o) => o.kind === 'MutatingAdmissionPolicy')?.spec.mutations?.[0]?.applyConfiguration.expression.includes(`"${FINALIZER}"`));
  });

  test('deploy/monitoring/ installs the rule file\'s alerts as a PrometheusRule and the dashboard in a ConfigMap, unchanged', async () => {
    const { stdout } = await exec(artifactPaths().kubectl, ['kustomize', join(deployDir, 'monitoring')], { maxBuffer: 16 << 20 });
    const objects = docsOf(stdout) as { kind: string; metadata: { name: string; namespace: string }; spec?: unknown; data?: Record<string, string> }[];
    assert.deepEqual(objects.map((o) => [o.kind, o.metadata.name, o.metadata.namespace]).sort(), [
      ['ConfigMap', 'application-operator-dashboard', kustomizeRelease.namespace], ['PrometheusRule', 'application-operator', kustomizeRelease.namespace],
    ]);
    const rules: unknown = parse(await readFile(join(deployDir, 'monitoring', 'prometheus-rules.yaml'), 'utf8'));
    assert.deepEqual(objects.find((o) => o.kind === 'PrometheusRule')?.spec, rules, 'the PrometheusRule is not the rule file: run `npm run deploy:generate`');
    const dashboard: unknown = JSON.parse(await readFile(join(deployDir, 'monitoring', 'grafana-dashboard.json'), 'utf8'));
    assert.deepEqual(JSON.parse(objects.find((o) => o.kind === 'ConfigMap')?.data?.['application-operator.json'] ?? 'null'), dashboard);
  });

  test('the chart installs exactly the repository\'s crds/*.yaml, and so does the kustomization', async () => {
    const files = (await readdir(crdsDir)).filter((f) => f.endsWith('.yaml')).sort();
    assert.ok(files.length > 0, 'crds/ holds no CRD');
    const fromRepo = (await Promise.all(files.map(async (f) => docsOf(await readFile(join(crdsDir, f), 'utf8'))))).flat();
    const { stdout } = await exec(await helmBinary(), ['show', 'crds', chartDir], { maxBuffer: 64 << 20 });
    assert.deepEqual(docsOf(stdout), fromRepo, 'the chart\'s crds/ is not the repository\'s crds/ (it is a symbolic link to it)');
    assert.deepEqual([...await resourcesOf(join(crdsDir, 'Kustomization'))].sort(), files, 'crds/Kustomization must list every crds/*.yaml');
  });
});
