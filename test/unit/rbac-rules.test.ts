// The table of children is the source of what the operator does with each kind; the ClusterRole in deploy/ must
// grant those verbs, so a kind added to the table without its RBAC rule fails here before it fails in a cluster.
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { describe, test } from 'node:test';
import { parse } from 'yaml';
import { childKinds, requiredVerbs } from '../../render/children.ts';

interface Rule {
  apiGroups: string[];
  resources: string[];
  verbs: string[];
}

const rules = (parse(readFileSync(new URL('../../deploy/clusterrole.yaml', import.meta.url), 'utf8')) as { rules: Rule[] }).rules;

describe('deploy/clusterrole.yaml covers every registered child kind', () => {
  for (const k of childKinds) {
    test(`${k.kind}: ${requiredVerbs(k).join(', ')}`, () => {
      const group = k.apiVersion.includes('/') ? k.apiVersion.slice(0, k.apiVersion.indexOf('/')) : '';
      const granted = new Set(rules.filter((r) => r.apiGroups.includes(group) && r.resources.includes(k.plural)).flatMap((r) => r.verbs));
      assert.deepEqual(requiredVerbs(k).filter((v) => !granted.has(v)), [], `missing verbs on ${group || 'core'}/${k.plural}`);
    });
  }
});
