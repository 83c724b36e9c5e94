// The workflow bundle shares the operator's workflow modules between workflows (operator/workflow-bundle.ts): a
// workflow entering a worker's cache evaluates none of them again, and none of them keeps state at module level.
// Checked on the SDK's own reusable context, the one the worker runs workflows in, with workflows created as the
// worker creates them (testkit/workflow-context.ts).
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';
import ts from 'typescript';
import { bundleWorkflowCode } from '@temporalio/worker';
import { bundleWorkflows, bundlerLogger, inlineSourceMap, sharedWorkflowModules, withoutSourcesContent, workflowsIndex } from '../../operator/workflow-bundle.ts';
import { tracingInterceptors, workflowsInOneContext } from '../../testkit/workflow-context.ts';

const root = fileURLToPath(new URL('../../', import.meta.url));
/** A module of this repository (a bundle's module id is its path from the repository's root). */
const ours = (id: string) => id.startsWith('./') && !id.startsWith('./node_modules/') && id.endsWith('.ts');

/**
 * What a module keeps at module level that one workflow could change and another see: `let` and `var`, a Map, Set,
 * WeakMap or WeakSet not typed read-only, a static field that is not readonly.
 */
function moduleState(file: string, source: string): string[] {
  const sf = ts.createSourceFile(file, source, ts.ScriptTarget.Latest, true);
  const found: string[] = [];
  const at = (node: ts.Node) => `${file}:${sf.getLineAndCharacterOfPosition(node.getStart(sf)).line + 1}`;
  for (const statement of sf.statements) {
    if (ts.isVariableStatement(statement)) {
      const list = statement.declarationList;
      if (!(list.flags & ts.NodeFlags.Const)) found.push(`${at(statement)}: ${list.flags & ts.NodeFlags.Let ? 'let' : 'var'} at module level`);
      for (const d of list.declarations) {
        const init = d.initializer;
        const collection = init && ts.isNewExpression(init) && ts.isIdentifier(init.expression) && /^(Weak)?(Map|Set)$/.test(init.expression.text);
        if (collection && !d.type?.getText(sf).startsWith('Readonly')) found.push(`${at(d)}: a ${init.expression.getText(sf)} at module level not typed read-only`);
      }
    }
    if (ts.isClassDeclaration(statement)) {
      for (const m of statement.members) {
        const mods = ts.canHaveModifiers(m) ? ts.getModifiers(m) ?? [] : [];
        const has = (k: ts.SyntaxKind) => mods.some((x) => x.kind === k);
        if (ts.isPropertyDeclaration(m) && has(ts.SyntaxKind.StaticKeyword) && !has(ts.SyntaxKind.ReadonlyKeyword)) found.push(`${at(m)}: a static field that is not readonly`);
      }
    }
  }
  return found;
}

test('a workflow entering the worker evaluates none of the operator\'s modules, the SDK\'s public module or OpenTelemetry\'s API again', async () => {
  const shared = await workflowsInOneContext(sharedWorkflowModules());
  assert.equal(shared.modules.length, 3);
  for (const modules of shared.modules) {
    assert.deepEqual(modules.filter((m) => ours(m) || m.includes('@temporalio/workflow/') || m.includes('@opentelemetry/api/')), []);
  }
  // The same check sees them when nothing is shared: what each workflow cost before.
  const unshared = await workflowsInOneContext([]);
  for (const modules of unshared.modules) {
    assert.ok(modules.includes('./workflows/application.ts'), `evaluated per workflow: ${modules.join(', ')}`);
    assert.ok(modules.some((m) => m.includes('@opentelemetry/api/')));
  }
});

test('no module of the operator\'s that the workflows share keeps state at module level', async () => {
  // Every module of ours in the bundle: the ones a workflow evaluates when nothing is shared.
  const [modules = []] = (await workflowsInOneContext([], { count: 1 })).modules;
  const files = modules.filter(ours).map((id) => id.slice(2));
  assert.ok(files.length >= 20 && files.includes('api/constants.ts') && files.includes('reconcile/plan.ts'), `our modules in the bundle: ${files.join(', ')}`);
  assert.deepEqual(files.flatMap((f) => moduleState(f, readFileSync(root + f, 'utf8'))), []);
  // The check finds each kind of state.
  const kinds = moduleState('x.ts', 'let n = 0;\nexport var v = 1;\nconst cache = new Map<string, number>();\nconst ok: ReadonlySet<string> = new Set();\nclass C { static count = 0; static readonly max = 1; }\n');
  assert.deepEqual(kinds, ['x.ts:1: let at module level', 'x.ts:2: var at module level', 'x.ts:3: a Map at module level not typed read-only', 'x.ts:5: a static field that is not readonly']);
});

test('with tracing on, OpenTelemetry\'s API stays per workflow: its interceptors register each workflow\'s tracer provider there', async () => {
  const traced = await workflowsInOneContext(sharedWorkflowModules({ tracing: true }), { interceptors: tracingInterceptors });
  for (const modules of traced.modules) assert.ok(modules.some((m) => m.includes('@opentelemetry/api/')));
  // Shared, the API's objects are frozen (by the SDK) and a workflow's interceptors cannot set its state up.
  await assert.rejects(workflowsInOneContext(sharedWorkflowModules(), { interceptors: tracingInterceptors }), /not extensible|read only/);
});

test('the bundle leaves its sources\' text out of its source map and keeps what maps a stack to them', async () => {
  const { code: full } = await bundleWorkflowCode({ workflowsPath: workflowsIndex, preloadModules: sharedWorkflowModules(), logger: bundlerLogger });
  const before = inlineSourceMap(full);
  assert.ok(before.sourceMap.sourcesContent?.some((text) => text?.includes('class ApplicationEntity')), 'webpack inlines the sources');
  const lean = withoutSourcesContent(full);
  const after = inlineSourceMap(lean);
  assert.equal(after.sourceMap.sourcesContent, undefined);
  const { sourcesContent: _text, ...kept } = before.sourceMap;
  assert.deepEqual(after.sourceMap, kept, 'mappings, sources and names unchanged');
  assert.equal(lean.slice(0, after.data), full.slice(0, before.data), 'the code unchanged');
  assert.ok(lean.length < full.length * 0.7, `${lean.length} of ${full.length} characters`);
  // What the operator's workers load is the lean one (bundleWorkflows, used by the image's build and at start).
  assert.equal(inlineSourceMap(await bundleWorkflows()).sourceMap.sourcesContent, undefined);
  assert.throws(() => inlineSourceMap('export {};'), /no inline source map/);
});
