// What the workflow bundle evaluates: every cached workflow runs the module code it imports in a context of its own,
// so a heavy module reached from workflows/index.ts costs memory once per cached workflow (zod's schemas cost 1.7 MB
// each: 100 cached workflows went from 47 to 210 MB of heap). The graph is walked over value imports (`import type`
// is erased by the bundler; a mixed or braces-only import is counted, as it may not be).
import assert from 'node:assert/strict';
import { existsSync, readFileSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import { test } from 'node:test';

const root = join(import.meta.dirname, '../..');
const entry = join(root, 'workflows/index.ts');
/** Packages no workflow may reach: heavy at evaluation, or not deterministic. */
const denied = ['zod', '@kubernetes/client-node', 'yaml', 'pino', 'prom-client', '@temporalio/worker', '@temporalio/client', '@temporalio/activity'];

const importPattern = /^\s*(import|export)\s+(type\s+)?([^'";]*?\s+from\s+)?['"]([^'"]+)['"]/gm;

/** The modules (files, and packages by name) `file` imports by value. */
function valueImports(file: string): string[] {
  const text = readFileSync(file, 'utf8');
  const out: string[] = [];
  for (const m of text.matchAll(importPattern)) {
    if (m[2]) continue;
    out.push(m[4]!);
  }
  return out;
}

function walk(): { files: Set<string>; packages: Map<string, string> } {
  const files = new Set<string>();
  const packages = new Map<string, string>();
  const queue = [entry];
  while (queue.length) {
    const file = queue.pop()!;
    if (files.has(file)) continue;
    files.add(file);
    for (const spec of valueImports(file)) {
      if (spec.startsWith('.')) {
        const target = resolve(dirname(file), spec);
        assert.ok(existsSync(target), `${relative(root, file)} imports ${spec}, which does not exist`);
        queue.push(target);
      } else if (!spec.startsWith('node:')) {
        const name = spec.startsWith('@') ? spec.split('/').slice(0, 2).join('/') : spec.split('/')[0]!;
        if (!packages.has(name)) packages.set(name, relative(root, file));
      }
    }
  }
  return { files, packages };
}

test('the workflow code reaches none of the packages a workflow must not evaluate', () => {
  const { files, packages } = walk();
  assert.ok(files.size > 10, `walked ${files.size} files from workflows/index.ts`);
  assert.ok(packages.has('@temporalio/workflow'), 'the walk sees the workflow SDK');
  const reached = denied.filter((p) => packages.has(p)).map((p) => `${p} (from ${packages.get(p)})`);
  assert.deepEqual(reached, []);
});

test('the schema module (api/application.ts, built with zod) is reached by type only', () => {
  const { files } = walk();
  assert.ok(!files.has(join(root, 'api/application.ts')), [...files].map((f) => relative(root, f)).join(', '));
});
