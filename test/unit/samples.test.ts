import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { test } from 'node:test';
import { parse, parseAllDocuments } from 'yaml';
import { parseApplication } from '../../api/application.ts';
import { parseRelease } from '../../api/release.ts';
import { releaseExamples } from '../fixtures/release-examples.ts';
import { analysisAppSpec, application, canaryAppSpec, demoAppSpec, gatewayAppSpec } from '../fixtures/spec-examples.ts';

const read = (file: string) => readFileSync(new URL(`../../samples/${file}`, import.meta.url), 'utf8');

// Each sample is an example the CRD tests also send to the real API server (spec-examples.ts, release-examples.ts).
const samples = [
  { file: 'demo-app.yaml', expected: application('demo-app', demoAppSpec) },
  { file: 'canary-app.yaml', expected: application('canary-app', canaryAppSpec) },
  { file: 'analysis-app.yaml', expected: application('checkout', analysisAppSpec) },
  { file: 'gateway-app.yaml', expected: application('shop', gatewayAppSpec) },
];

for (const { file, expected } of samples) {
  test(`samples/${file} is the example the tables check, and valid`, () => {
    const sample: unknown = parse(read(file));
    assert.deepEqual(sample, expected);
    const parsed = parseApplication(sample);
    assert.ok(parsed.ok, parsed.ok ? '' : parsed.message);
  });
}

test('samples/release.yaml: its Release is the example the tables check, and every Application it names is in the file and valid', () => {
  const docs = parseAllDocuments(read('release.yaml')).map((d) => d.toJS() as { kind: string; metadata: { name: string } });
  const release = docs.find((d) => d.kind === 'Release');
  assert.deepEqual(release, releaseExamples.find((e) => e.name === 'sample')?.release);
  const parsed = parseRelease(release);
  assert.ok(parsed.ok, parsed.ok ? '' : parsed.message);
  const apps = docs.filter((d) => d.kind === 'Application');
  for (const app of apps) {
    const p = parseApplication(app);
    assert.ok(p.ok, p.ok ? '' : p.message);
  }
  const named = parsed.release.spec.waves.flatMap((w) => w.applications.map((a) => a.name));
  assert.deepEqual(apps.map((a) => a.metadata.name).sort(), [...named].sort());
});

test('samples/fleet-release.yaml names the Application of samples/fleet-app.yaml in three clusters, and both are valid', () => {
  const release = parse(read('fleet-release.yaml')) as unknown;
  const parsed = parseRelease(release);
  assert.ok(parsed.ok, parsed.ok ? '' : parsed.message);
  const app = parse(read('fleet-app.yaml')) as { metadata: { name: string; namespace: string } };
  assert.ok(parseApplication(app).ok);
  assert.deepEqual(parsed.release.spec.waves.flatMap((w) => w.applications.map((a) => `${a.cluster ?? 'hub'}/${a.name}`)), ['hub/api', 'b/api', 'c/api']);
  assert.equal(parsed.release.metadata.namespace, app.metadata.namespace);
});
