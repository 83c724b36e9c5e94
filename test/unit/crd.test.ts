import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { describe, test } from 'node:test';
import { parse } from 'yaml';
import { parseApplication } from '../../api/application.ts';
import { CRD_NAME, GROUP, KIND, PLURAL, Phase, RolloutPhase, SHORT_NAME, SINGULAR, VERSION, terminalRolloutPhases } from '../../api/constants.ts';
import { specExamples } from '../fixtures/spec-examples.ts';
import type { CreateExample, JsonObject } from '../fixtures/spec-examples.ts';

interface Schema {
  type?: string;
  properties?: Record<string, Schema>;
  additionalProperties?: Schema;
  items?: Schema;
  default?: unknown;
  description?: string;
  enum?: string[];
  'x-kubernetes-validations'?: Validation[];
}

interface Validation { rule: string; message: string; messageExpression?: string }

/** Whether a rejection with `fragment` in it can come from `v`: its message, or what its messageExpression builds (one of its string literals starts the fragment). */
function maySay(v: Validation, fragment: string): boolean {
  const literals = [...(v.messageExpression ?? '').matchAll(/"([^"]{10,})"/g)].map((m) => m[1] ?? '');
  return v.message.includes(fragment) || literals.some((l) => fragment.startsWith(l));
}

const crd = parse(readFileSync(new URL('../../crds/application.yaml', import.meta.url), 'utf8')) as {
  metadata: { name: string };
  spec: {
    group: string;
    scope: string;
    names: { kind: string; plural: string; singular: string; shortNames: string[] };
    versions: {
      name: string;
      subresources: { status: object; scale: { specReplicasPath: string; statusReplicasPath: string; labelSelectorPath: string } };
      additionalPrinterColumns: { name: string; jsonPath: string }[];
      schema: { openAPIV3Schema: Schema };
    }[];
  };
};
const version = crd.spec.versions[0];
assert.ok(version, 'the CRD has a version');
const root = version.schema.openAPIV3Schema;
const specSchema = root.properties?.spec;
assert.ok(specSchema, 'the CRD has a spec schema');

function walk(schema: Schema, path: string, visit: (schema: Schema, path: string) => void): void {
  visit(schema, path);
  for (const [name, child] of Object.entries(schema.properties ?? {})) walk(child, `${path}.${name}`, visit);
  if (schema.items) walk(schema.items, `${path}[]`, visit);
  if (schema.additionalProperties) walk(schema.additionalProperties, `${path}{}`, visit);
}

// The API server's structural defaulting (apiextensions-apiserver schema/defaulting), which also
// defaults inside the defaults it has just set.
function applyDefaults(value: unknown, schema: Schema | undefined): unknown {
  if (schema === undefined) return value;
  if (Array.isArray(value)) return value.map((item) => applyDefaults(item, schema.items));
  if (value === null || typeof value !== 'object') return value;
  const out: Record<string, unknown> = { ...(value as Record<string, unknown>) };
  for (const [name, prop] of Object.entries(schema.properties ?? {})) {
    if (out[name] === undefined && prop.default !== undefined) out[name] = structuredClone(prop.default);
  }
  for (const [name, child] of Object.entries(out)) {
    out[name] = applyDefaults(child, schema.properties?.[name] ?? schema.additionalProperties);
  }
  return out;
}

describe('CRD', () => {
  test('names the API as the constants do', () => {
    assert.equal(crd.metadata.name, CRD_NAME);
    assert.equal(crd.spec.group, GROUP);
    assert.equal(crd.spec.scope, 'Namespaced');
    assert.deepEqual(crd.spec.names, { kind: KIND, listKind: `${KIND}List`, plural: PLURAL, singular: SINGULAR, shortNames: [SHORT_NAME] });
    assert.equal(version.name, VERSION);
  });

  test('status phases are the constants\' phases', () => {
    const status = root.properties?.status?.properties;
    assert.deepEqual(status?.phase?.enum, Object.values(Phase));
    assert.deepEqual(status?.canary?.properties?.phase?.enum, Object.values(RolloutPhase));
  });

  test('serves status and scale subresources for kubectl scale', () => {
    assert.deepEqual(version.subresources.status, {});
    assert.deepEqual(version.subresources.scale, { specReplicasPath: '.spec.replicas', statusReplicasPath: '.status.replicas', labelSelectorPath: '.status.selector' });
  });

  test('prints phase, replicas from status (the HPA may own the count), canary weight and age', () => {
    const columns = Object.fromEntries(version.additionalPrinterColumns.map((c) => [c.name, c.jsonPath]));
    assert.equal(columns.Phase, '.status.phase');
    assert.equal(columns.Desired, '.status.desiredReplicas');
    assert.equal(columns.Message, '.status.message');
    assert.equal(columns.Available, '.status.availableReplicas');
    assert.equal(columns.Canary, '.status.canary.weight');
    assert.equal(columns.Image, '.spec.image');
    assert.equal(columns.Age, '.metadata.creationTimestamp');
  });

  test('describes every spec field for kubectl explain', () => {
    const undocumented: string[] = [];
    walk(specSchema, 'spec', (schema, path) => {
      // Map values and scalar list items are explained by their map or list.
      const explainedByParent = path.endsWith('{}') || (path.endsWith('[]') && schema.type !== 'object');
      if (!schema.description && !explainedByParent) undocumented.push(path);
    });
    assert.deepEqual(undocumented, []);
  });

  const validations: Validation[] = [];
  walk(root, '', (schema) => validations.push(...(schema['x-kubernetes-validations'] ?? [])));

  test('the rule that keeps the router while a rollout runs lets it change after every phase that ends one, and only those', () => {
    const rule = validations.find((v) => v.message.startsWith('traffic.router cannot change while a rollout runs'))?.rule ?? assert.fail('no such rule');
    const listed = [...(/phase in \[([^\]]*)\]/.exec(rule)?.[1] ?? '').matchAll(/'([A-Za-z]+)'/g)].map((m) => m[1]).sort();
    assert.deepEqual(listed, [...terminalRolloutPhases].sort());
  });

  test('every CEL rule is broken by at least one example', () => {
    const expected = specExamples.flatMap((e) => (e.valid || e.messageIncludes === undefined ? [] : [e.messageIncludes]));
    const untested = validations.filter((v) => !expected.some((fragment) => maySay(v, fragment))).map((v) => v.message);
    assert.deepEqual(untested, []);
  });

  test("every expected message is a CEL message or the API server's own wording", () => {
    const serverWording = ['Required value', 'Duplicate value', 'Unsupported value', 'should be greater than or equal to', 'should be less than or equal to', 'must have at most', 'should have at least', 'should be at least'];
    for (const example of specExamples) {
      const fragment = example.messageIncludes;
      if (fragment === undefined) continue;
      assert.ok(validations.some((v) => maySay(v, fragment)) || serverWording.some((w) => fragment.startsWith(w)), `${example.name}: ${fragment}`);
    }
  });

  const validCreates = specExamples.filter((e): e is CreateExample => !e.transition && e.valid);
  for (const example of validCreates) {
    test(`defaults ${example.name} exactly as the zod model does`, () => {
      const parsed = parseApplication(example.app);
      assert.ok(parsed.ok);
      assert.deepEqual(applyDefaults((example.app as { spec: JsonObject }).spec, specSchema), parsed.app.spec);
    });
  }
});
