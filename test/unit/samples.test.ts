import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { test } from 'node:test';
import { parse } from 'yaml';
import { parseApplication } from '../../api/application.ts';
import { application, canaryAppSpec, demoAppSpec } from '../fixtures/spec-examples.ts';

const samples = [
  { file: 'demo-app.yaml', expected: application('demo-app', demoAppSpec) },
  { file: 'canary-app.yaml', expected: application('canary-app', canaryAppSpec) },
];

for (const { file, expected } of samples) {
  test(`samples/${file} is the example the tables check, and valid`, () => {
    const sample: unknown = parse(readFileSync(new URL(`../../samples/${file}`, import.meta.url), 'utf8'));
    assert.deepEqual(sample, expected);
    const parsed = parseApplication(sample);
    assert.ok(parsed.ok, parsed.ok ? '' : parsed.message);
  });
}
