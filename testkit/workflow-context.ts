// Workflows created the way a worker creates them, in Temporal's reusable V8 context, without a server: what each
// one evaluates for itself and what it costs (heap, CPU). Creating a workflow runs no workflow code but its modules'.
// For test/unit/workflow-bundle.test.ts and bench/workflow-modules.ts; docs/architecture.md ("Workflow code:
// modules shared by every workflow"). The SDK's context installs process-wide hooks (an unhandled-rejection handler,
// a stack-trace formatter, a promise hook) that it never removes: use it in a process of its own (a test file, the
// bench script), not inside an operator.
import { ReusableVMWorkflowCreator } from '@temporalio/worker/lib/workflow/reusable-vm.js';
import type { WorkflowBundleWithSourceMapAndFilename } from '@temporalio/worker/lib/workflow/workflow-worker-thread/input.js';
import type { WorkflowCreateOptions } from '@temporalio/workflow/lib/interfaces.js';
import { fileURLToPath } from 'node:url';
import { runInNewContext } from 'node:vm';
import { setFlagsFromString } from 'node:v8';
import { bundleWorkflows, inlineSourceMap } from '../operator/workflow-bundle.ts';
import { applicationWorkflowType } from '../workflows/contract.ts';

/** What the operator bundles in when tracing is on: Temporal's OpenTelemetry interceptors (its plugin's) and ours. */
export const tracingInterceptors = [
  '@temporalio/interceptors-opentelemetry/lib/workflow-interceptors',
  fileURLToPath(new URL('../workflows/kit/trace-log.ts', import.meta.url)),
];

/** The SDK's creator, with a look at the module cache of the workflow created last (its activator's). */
class InspectedCreator extends ReusableVMWorkflowCreator {
  lastModules(): string[] {
    const activator = (this.context as { __TEMPORAL_ACTIVATOR__?: { moduleCache: Map<string, unknown> } }).__TEMPORAL_ACTIVATOR__;
    return [...(activator?.moduleCache.keys() ?? [])];
  }
}

export interface WorkflowsInOneContext {
  /** The module ids each workflow evaluated for itself (its own module cache), in creation order. */
  modules: string[][];
  /** Heap kept per workflow while all are alive, after full collections (NaN unless `measure`). */
  heapBytesPerWorkflow: number;
  /** The process's CPU time (user and system) per workflow created (NaN unless `measure`). */
  cpuMsPerWorkflow: number;
}

/** A full collection, without starting node with --expose-gc. */
function collect(): void {
  setFlagsFromString('--expose-gc');
  const gc = runInNewContext('gc') as () => void;
  gc();
  gc();
}

/** The bundle as a worker loads it: the code, and the source map the bundler inlined, taken out. */
async function bundle(preloadModules: string[], interceptors: string[]): Promise<WorkflowBundleWithSourceMapAndFilename> {
  const code = await bundleWorkflows({ preloadModules, interceptors });
  const { sourceMap } = inlineSourceMap(code);
  return { code, sourceMap: sourceMap as WorkflowBundleWithSourceMapAndFilename['sourceMap'], filename: '/workflow-bundle.js' };
}

/** What the worker gives a new Application workflow (only what creating it reads; the rest of WorkflowInfo unset). */
function createOptions(i: number): WorkflowCreateOptions {
  const info = {
    workflowType: applicationWorkflowType, workflowId: `app-${i}`, runId: `run-${i}`, firstExecutionRunId: `run-${i}`, namespace: 'default',
    taskQueue: 'q', attempt: 1, searchAttributes: {}, typedSearchAttributes: [], memo: {}, unsafe: { isReplaying: false },
    startTime: new Date(0), runStartTime: new Date(0), historyLength: 1, historySize: 0, continueAsNewSuggested: false, priority: {},
  };
  return { info, randomnessSeed: [i], now: 0, showStackTraceSources: false } as unknown as WorkflowCreateOptions;
}

/**
 * Bundles the operator's workflows with `preloadModules` (and `interceptors`), then creates `count` Application
 * workflows in one reusable context, keeping them all alive as a worker's cache does.
 */
export async function workflowsInOneContext(
  preloadModules: string[], opts: { interceptors?: string[]; count?: number; measure?: boolean } = {},
): Promise<WorkflowsInOneContext> {
  const count = opts.count ?? 3;
  const creator = await InspectedCreator.create(await bundle(preloadModules, opts.interceptors ?? []), 5000, new Set());
  const modules: string[][] = [];
  const alive: { dispose(): Promise<void> }[] = [];
  try {
    if (opts.measure) collect();
    const heapBefore = process.memoryUsage().heapUsed;
    const cpuBefore = process.cpuUsage();
    for (let i = 0; i < count; i++) {
      alive.push(await creator.createWorkflow(createOptions(i)));
      if (!opts.measure || i === 0) modules.push(creator.lastModules());
    }
    const cpu = process.cpuUsage(cpuBefore);
    if (opts.measure) collect();
    const heap = process.memoryUsage().heapUsed - heapBefore;
    return {
      modules,
      heapBytesPerWorkflow: opts.measure ? heap / count : NaN,
      cpuMsPerWorkflow: opts.measure ? (cpu.user + cpu.system) / 1000 / count : NaN,
    };
  } finally {
    for (const w of alive) await w.dispose();
    await creator.destroy();
  }
}
