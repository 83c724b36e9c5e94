// What a workflow costs the worker when it enters its cache, with the bundle's modules shared (as the operator
// bundles them) and without: `node bench/workflow-modules.ts [--count 500]`. No server: the workflows are created in
// Temporal's reusable context as a worker creates them (testkit/workflow-context.ts). docs/benchmark.md ("Workflow
// modules evaluated once").
import { parseArgs } from 'node:util';
import { sharedWorkflowModules } from '../operator/workflow-bundle.ts';
import { tracingInterceptors, workflowsInOneContext } from '../testkit/workflow-context.ts';

const { values } = parseArgs({ options: { count: { type: 'string', default: '500' } } });
const count = Number(values.count);
if (!Number.isInteger(count) || count < 1) throw new Error(`--count must be a positive integer, not ${values.count}`);

console.log(`${count} Application workflows created in one reusable context, all kept alive (as cached)`);
console.log('bundle                         modules per workflow  heap per workflow KB  CPU per workflow ms');
const rows = [
  { label: 'nothing shared', preload: [] as string[], interceptors: [] as string[] },
  { label: 'shared (the operator\'s bundle)', preload: sharedWorkflowModules(), interceptors: [] },
  { label: 'tracing on (its bundle)', preload: sharedWorkflowModules({ tracing: true }), interceptors: tracingInterceptors },
];
// A first round unmeasured, so that no row is measured on code V8 has not compiled yet.
for (const { preload, interceptors } of rows) await workflowsInOneContext(preload, { interceptors, count: 20 });
for (const { label, preload, interceptors } of rows) {
  const r = await workflowsInOneContext(preload, { interceptors, count, measure: true });
  console.log(`${label.padEnd(31)}${String(r.modules[0]?.length ?? 0).padStart(20)}${(r.heapBytesPerWorkflow / 1024).toFixed(1).padStart(22)}${r.cpuMsPerWorkflow.toFixed(2).padStart(21)}`);
}
