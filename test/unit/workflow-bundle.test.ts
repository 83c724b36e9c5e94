// The workflow bundle shares the operator's workflow modules between workflows (operator/workflow-bundle.ts): a
// workflow entering a worker's cache evaluates none of them again. Checked on the SDK's own reusable context, the one
// the worker runs workflows in, with workflows created as the worker creates them (testkit/workflow-context.ts).
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { sharedWorkflowModules } from '../../operator/workflow-bundle.ts';
import { tracingInterceptors, workflowsInOneContext } from '../../testkit/workflow-context.ts';

const ours = (id: string) => /^\.\/(workflows|api|reconcile|routing|lib)\//.test(id) && id !== './workflows/index.ts';

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

test('with tracing on, OpenTelemetry\'s API stays per workflow: its interceptors register each workflow\'s tracer provider there', async () => {
  const traced = await workflowsInOneContext(sharedWorkflowModules(true), { interceptors: tracingInterceptors });
  for (const modules of traced.modules) assert.ok(modules.some((m) => m.includes('@opentelemetry/api/')));
  // Shared, the API's objects are frozen (by the SDK) and a workflow's interceptors cannot set its state up.
  await assert.rejects(workflowsInOneContext(sharedWorkflowModules(false), { interceptors: tracingInterceptors }), /not extensible|read only/);
});
