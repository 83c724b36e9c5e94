// The workflow bundle shares the operator's workflow modules between workflows (operator/workflow-bundle.ts): a
// workflow entering a worker's cache evaluates none of them again. Checked on the SDK's own reusable context, the one
// the worker runs workflows in, with workflows created as the worker creates them (no server needed: creating a
// workflow runs no workflow code but its modules).
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { bundleWorkflowCode } from '@temporalio/worker';
import { ReusableVMWorkflowCreator } from '@temporalio/worker/lib/workflow/reusable-vm.js';
import type { WorkflowCreateOptions } from '@temporalio/workflow/lib/interfaces.js';
import { sharedWorkflowModules } from '../../operator/workflow-bundle.ts';
import { applicationWorkflowType } from '../../workflows/contract.ts';

const workflowsPath = fileURLToPath(new URL('../../workflows/index.ts', import.meta.url));
const quiet = () => undefined;
const logger = { log: quiet, trace: quiet, debug: quiet, info: quiet, warn: quiet, error: quiet };

/** What the operator bundles in when tracing is on: Temporal's OpenTelemetry interceptors (its plugin's) and ours. */
const tracingInterceptors = [
  '@temporalio/interceptors-opentelemetry/lib/workflow-interceptors',
  fileURLToPath(new URL('../../workflows/kit/trace-log.ts', import.meta.url)),
];

/** The modules that `count` Application workflows created in one reusable context each evaluated for itself. */
async function modulesPerWorkflow(preloadModules: string[], opts: { interceptors?: string[] } = {}, count = 3): Promise<string[][]> {
  const { code } = await bundleWorkflowCode({ workflowsPath, preloadModules, workflowInterceptorModules: opts.interceptors ?? [], logger });
  const at = code.lastIndexOf('//# sourceMappingURL=data:');
  const sourceMap = JSON.parse(Buffer.from(code.slice(code.indexOf('base64,', at) + 'base64,'.length), 'base64').toString()) as unknown;
  const creator = await ReusableVMWorkflowCreator.create({ code, sourceMap, filename: '/workflow-bundle.js' } as never, 5000, new Set(), undefined);
  const evaluated: string[][] = [];
  try {
    for (let i = 0; i < count; i++) {
      const info = {
        workflowType: applicationWorkflowType, workflowId: `app-${i}`, runId: `run-${i}`, firstExecutionRunId: `run-${i}`, namespace: 'default',
        taskQueue: 'q', attempt: 1, searchAttributes: {}, typedSearchAttributes: [], memo: {}, unsafe: { isReplaying: false },
        startTime: new Date(0), runStartTime: new Date(0), historyLength: 1, historySize: 0, continueAsNewSuggested: false, priority: {},
      };
      const options = { info, randomnessSeed: [i], now: 0, showStackTraceSources: false } as unknown as WorkflowCreateOptions;
      const workflow = await creator.createWorkflow(options);
      const { context } = creator as unknown as { context: { __TEMPORAL_ACTIVATOR__?: { moduleCache: Map<string, unknown> } } };
      const activator = context.__TEMPORAL_ACTIVATOR__;
      evaluated.push([...(activator?.moduleCache.keys() ?? [])]);
      await workflow.dispose();
    }
  } finally {
    await creator.destroy();
  }
  return evaluated;
}

const ours = (id: string) => /^\.\/(workflows|api|reconcile|routing|lib)\//.test(id) && !id.endsWith('/workflows/index.ts');

test('a workflow entering the worker evaluates none of the operator\'s modules, the SDK\'s public module or OpenTelemetry\'s API again', async () => {
  const shared = await modulesPerWorkflow(sharedWorkflowModules());
  assert.equal(shared.length, 3);
  for (const modules of shared) {
    assert.deepEqual(modules.filter((m) => ours(m) || m.includes('@temporalio/workflow/') || m.includes('@opentelemetry/api/')), []);
  }
  // The same check sees them when nothing is shared: what each workflow cost before.
  const unshared = await modulesPerWorkflow([]);
  for (const modules of unshared) {
    assert.ok(modules.some((m) => m === './workflows/application.ts'), `evaluated per workflow: ${modules.join(', ')}`);
    assert.ok(modules.some((m) => m.includes('@opentelemetry/api/')));
  }
});

test('with tracing on, OpenTelemetry\'s API stays per workflow: its interceptors register each workflow\'s tracer provider there', async () => {
  const traced = await modulesPerWorkflow(sharedWorkflowModules(true), { interceptors: tracingInterceptors });
  for (const modules of traced) assert.ok(modules.some((m) => m.includes('@opentelemetry/api/')));
  // Shared, the API's objects are frozen (by the SDK) and a workflow's interceptors cannot set its state up.
  await assert.rejects(modulesPerWorkflow(sharedWorkflowModules(false), { interceptors: tracingInterceptors }), /not extensible|read only/);
});
