// Workflows created the way a worker creates them, in Temporal's reusable V8 context, without a server: what each
// one evaluates for itself and what it costs (heap, CPU). Creating a workflow runs no workflow code but its modules'.
// For test/unit/workflow-bundle.test.ts and bench/workflow-modules.ts; docs/architecture.md ("Workflow code:
// modules shared by every workflow").
import { bundleWorkflowCode } from '@temporalio/worker';
import { ReusableVMWorkflowCreator } from '@temporalio/worker/lib/workflow/reusable-vm.js';
import type { WorkflowCreateOptions } from '@temporalio/workflow/lib/interfaces.js';
import { fileURLToPath } from 'node:url';
import { runInNewContext } from 'node:vm';
import { setFlagsFromString } from 'node:v8';
import { applicationWorkflowType } from '../workflows/contract.ts';

const workflowsPath = fileURLToPath(new URL('../workflows/index.ts', import.meta.url));
const quiet = () => undefined;
const logger = { log: quiet, trace: quiet, debug: quiet, info: quiet, warn: quiet, error: quiet };

/** What the operator bundles in when tracing is on: Temporal's OpenTelemetry interceptors (its plugin's) and ours. */
export const tracingInterceptors = [
  '@temporalio/interceptors-opentelemetry/lib/workflow-interceptors',
  fileURLToPath(new URL('../workflows/kit/trace-log.ts', import.meta.url)),
];

export interface WorkflowsInOneContext {
  /** The module ids each workflow evaluated for itself (its own module cache), in creation order. */
  modules: string[][];
  /** Heap kept per workflow while all are alive, after full collections (only with `measure`). */
  heapBytesPerWorkflow: number;
  /** CPU time per workflow created (wall clock on one thread; only with `measure`). */
  msPerWorkflow: number;
}

/** A full collection, without starting node with --expose-gc. */
function collect(): void {
  setFlagsFromString('--expose-gc');
  const gc = runInNewContext('gc') as () => void;
  gc();
  gc();
}

/**
 * Bundles the operator's workflows with `preloadModules` (and `interceptors`), then creates `count` Application
 * workflows in one reusable context, keeping them all alive as a worker's cache does.
 */
export async function workflowsInOneContext(
  preloadModules: string[], opts: { interceptors?: string[]; count?: number; measure?: boolean } = {},
): Promise<WorkflowsInOneContext> {
  const count = opts.count ?? 3;
  const { code } = await bundleWorkflowCode({ workflowsPath, preloadModules, workflowInterceptorModules: opts.interceptors ?? [], logger });
  const at = code.lastIndexOf('//# sourceMappingURL=data:');
  const sourceMap = JSON.parse(Buffer.from(code.slice(code.indexOf('base64,', at) + 'base64,'.length), 'base64').toString()) as unknown;
  const creator = await ReusableVMWorkflowCreator.create({ code, sourceMap, filename: '/workflow-bundle.js' } as never, 5000, new Set(), undefined);
  const { context } = creator as unknown as { context: { __TEMPORAL_ACTIVATOR__?: { moduleCache: Map<string, unknown> } } };
  const modules: string[][] = [];
  const alive: { dispose(): Promise<void> }[] = [];
  try {
    if (opts.measure) collect();
    const before = process.memoryUsage().heapUsed;
    const started = performance.now();
    for (let i = 0; i < count; i++) {
      const info = {
        workflowType: applicationWorkflowType, workflowId: `app-${i}`, runId: `run-${i}`, firstExecutionRunId: `run-${i}`, namespace: 'default',
        taskQueue: 'q', attempt: 1, searchAttributes: {}, typedSearchAttributes: [], memo: {}, unsafe: { isReplaying: false },
        startTime: new Date(0), runStartTime: new Date(0), historyLength: 1, historySize: 0, continueAsNewSuggested: false, priority: {},
      };
      const options = { info, randomnessSeed: [i], now: 0, showStackTraceSources: false } as unknown as WorkflowCreateOptions;
      alive.push(await creator.createWorkflow(options));
      modules.push([...(context.__TEMPORAL_ACTIVATOR__?.moduleCache.keys() ?? [])]);
    }
    const elapsed = performance.now() - started;
    if (opts.measure) collect();
    const heap = process.memoryUsage().heapUsed - before;
    return { modules, heapBytesPerWorkflow: opts.measure ? heap / count : NaN, msPerWorkflow: opts.measure ? elapsed / count : NaN };
  } finally {
    for (const w of alive) await w.dispose();
    await creator.destroy();
  }
}
