// Which modules of the workflow bundle every workflow in a worker shares, instead of evaluating them again for each
// one. The worker runs all workflows in one V8 context (Temporal's reusable context); a module is evaluated once per
// workflow unless the bundle preloads it, and evaluating our workflow code, the SDK's public module and
// OpenTelemetry's API cost each workflow about 112 KB of heap and 1.4 ms of CPU, again each time it entered the
// worker's cache (13 KB and 0.5 ms shared; docs/benchmark.md, "Workflow modules evaluated once"). Shared modules are
// frozen by the SDK and run before any workflow exists, so they keep no state of a workflow at module level
// (docs/architecture.md, "Workflow code: modules shared by every workflow"; test/unit/workflow-bundle.test.ts).
import { bundleWorkflowCode } from '@temporalio/worker';
import { fileURLToPath } from 'node:url';

/** The operator's workflow code, the module a worker registers its workflows from (every module of it through it). */
export const workflowsIndex = fileURLToPath(new URL('../workflows/index.ts', import.meta.url));

/**
 * The modules to preload (`preloadModules` of the bundler). With tracing on, OpenTelemetry's API is not shared:
 * Temporal's tracing interceptors register each workflow's tracer provider in its module state, which a shared (and
 * frozen) copy would refuse; our workflow modules import it, so none of them is shared either, only the SDK's module.
 */
export function sharedWorkflowModules(opts: { tracing?: boolean } = {}): string[] {
  return opts.tracing ? ['@temporalio/workflow'] : ['@temporalio/workflow', '@opentelemetry/api', workflowsIndex];
}

/** webpack's progress dropped; its warnings and errors printed. */
const quiet = () => undefined;
export const bundlerLogger = { log: quiet, trace: quiet, debug: quiet, info: quiet, warn: (m: string) => console.warn(m), error: (m: string) => console.error(m) };

/** The fields of a source map (version 3) that this module reads or keeps. */
export interface InlineSourceMap {
  version: number;
  sources: string[];
  names: string[];
  mappings: string;
  sourcesContent?: (string | null)[];
}

/** The source map webpack inlined at the end of a bundle (the Temporal worker requires one there), and where its data starts. */
export function inlineSourceMap(code: string): { data: number; sourceMap: InlineSourceMap } {
  const comment = code.lastIndexOf('//# sourceMappingURL=data:');
  const base64 = comment < 0 ? -1 : code.indexOf('base64,', comment);
  if (base64 < 0) throw new Error('the workflow bundle has no inline source map');
  const data = base64 + 'base64,'.length;
  return { data, sourceMap: JSON.parse(Buffer.from(code.slice(data).trimEnd(), 'base64').toString()) as InlineSourceMap };
}

/**
 * The bundle with its source map's copy of every source file (`sourcesContent`) left out: two fifths of the bundle,
 * kept as text on both of the worker's threads and parsed there (about 15 MB of the operator's memory when ready;
 * docs/benchmark.md, "The bundle's copy of its sources"). The mappings and the sources' paths stay, so workflow
 * errors' stacks still name the TypeScript file and line; a debugger reads the sources from those paths.
 */
export function withoutSourcesContent(code: string): string {
  const { data, sourceMap } = inlineSourceMap(code);
  const { sourcesContent: _dropped, ...rest } = sourceMap;
  return `${code.slice(0, data)}${Buffer.from(JSON.stringify(rest)).toString('base64')}\n`;
}

/**
 * The workflow code bundled as a worker loads it (`workflowBundle: { code }`): the operator's, or `workflowsPath`
 * (a module that re-exports it with more), with the shared modules preloaded unless `preloadModules` says otherwise,
 * and without the sources' text in its source map (`withoutSourcesContent`).
 */
export async function bundleWorkflows(opts: { workflowsPath?: string; preloadModules?: string[]; interceptors?: string[] } = {}): Promise<string> {
  const { code } = await bundleWorkflowCode({
    workflowsPath: opts.workflowsPath ?? workflowsIndex,
    preloadModules: opts.preloadModules ?? sharedWorkflowModules(),
    workflowInterceptorModules: opts.interceptors ?? [],
    logger: bundlerLogger,
  });
  return withoutSourcesContent(code);
}
