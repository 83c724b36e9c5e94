// The Release CRD on the real API server and the zod model give every example the same verdict, and the wave's steps
// and analysis are exactly an Application's canary steps and analysis.
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { after, before, describe, it } from 'node:test';
import { parse } from 'yaml';
import { parseRelease } from '../../api/release.ts';
import { KubeError } from '../../kube/client.ts';
import { collectionPath } from '../../kube/resources.ts';
import { kubeApi, kube, testNamespace, type Json } from '../../testkit/apps.ts';
import { releaseExamples } from '../fixtures/release-examples.ts';

const schemaOf = (file: string) => (parse(readFileSync(new URL(`../../crds/${file}`, import.meta.url), 'utf8')) as Json).spec.versions[0].schema.openAPIV3Schema;
const withoutDescriptions = (v: unknown): unknown => (Array.isArray(v) ? v.map(withoutDescriptions)
  : v && typeof v === 'object' ? Object.fromEntries(Object.entries(v).filter(([k]) => k !== 'description').map(([k, x]) => [k, withoutDescriptions(x)])) : v);

describe('Release CRD', () => {
  let ns: { name: string; cleanup: () => Promise<void> };
  before(async () => {
    ns = await testNamespace('relcrd');
  });
  after(async () => ns?.cleanup());

  it("a wave's steps and the release's analysis are an Application's canary steps (but check) and analysis, rule for rule", () => {
    const canary = schemaOf('application.yaml').properties.spec.properties.serviceMesh.properties.canary.properties;
    const spec = schemaOf('release.yaml').properties.spec.properties;
    // A Release has no checks, so its steps are the Application's without the check kind.
    const { check, ...kinds } = canary.steps.items.properties;
    assert.ok(check, "the Application's steps have the check kind");
    const [oneKind] = canary.steps.items['x-kubernetes-validations'];
    const releaseSteps = {
      ...canary.steps,
      items: {
        ...canary.steps.items,
        properties: kinds,
        'x-kubernetes-validations': [{ rule: oneKind.rule.replace(', has(self.check)', ''), message: oneKind.message.replace(', setMirrorRoute or check', ' or setMirrorRoute') }],
      },
    };
    assert.deepEqual(withoutDescriptions(spec.waves.items.properties.steps), withoutDescriptions(releaseSteps));
    assert.deepEqual(withoutDescriptions(spec.steps), withoutDescriptions(releaseSteps));
    assert.deepEqual(withoutDescriptions(spec.analysis), withoutDescriptions(canary.analysis));
  });

  for (const example of releaseExamples) {
    it(`${example.name}: the API server and the zod model say ${example.valid ? 'valid' : 'invalid'}`, async () => {
      const api = await kubeApi();
      const obj = { ...example.release, metadata: { name: example.name, namespace: ns.name } };
      let server: { ok: boolean; message: string };
      try {
        await api.request('POST', collectionPath({ apiVersion: 'myapp.example.com/v1', kind: 'Release', namespace: ns.name }), { body: obj, query: { dryRun: 'All', fieldValidation: 'Strict' } });
        server = { ok: true, message: '' };
      } catch (err) {
        if (!(err instanceof KubeError && err.permanent)) throw err;
        server = { ok: false, message: err.message };
      }
      const zod = parseRelease(obj);
      const both = `API server: ${server.ok ? 'accepted' : server.message}\nzod model:  ${zod.ok ? 'accepted' : zod.message}`;
      assert.equal(server.ok, example.valid, both);
      assert.equal(zod.ok, example.valid, both);
      if (!example.valid) {
        assert.ok(server.message.includes(example.messageIncludes!), `API server message lacks "${example.messageIncludes}"\n${both}`);
        assert.ok(!zod.ok && zod.message.includes(example.messageIncludes!), `zod message lacks "${example.messageIncludes}"\n${both}`);
      }
    });
  }

  it('kubectl knows it by its short name and prints phase and wave', async () => {
    await kube(['-n', ns.name, 'apply', '--server-side', '-f', '-'], JSON.stringify({ ...releaseExamples[0]!.release, metadata: { name: 'shown', namespace: ns.name } }));
    const header = (await kube(['-n', ns.name, 'get', 'rel', 'shown'])).split('\n')[0]!;
    assert.match(header, /NAME\s+PHASE\s+WAVE\s+HELD-BY\s+AGE/);
  });
});
