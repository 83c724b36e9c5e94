import { KubeConfig } from '@kubernetes/client-node';
import { readFile } from 'node:fs/promises';
import { readStack, type StackInfo } from '../stack/stack.ts';

/** What every integration test needs; fails loudly (never skips) when the run has no stack. */
export interface TestEnv {
  kubeconfigPath: string;
  kc: KubeConfig;
  temporalAddress: string;
  temporalNamespace: string;
  /** The stack's Prometheus, e.g. http://127.0.0.1:29090. */
  prometheusUrl: string;
  workflowBundlePath: string;
  stack: StackInfo | null;
}

function required(name: string): string {
  const v = process.env[name];
  if (!v) {
    throw new Error(`${name} is not set: integration tests need the real stack. Run them with \`npm test\` (which starts one), or set STACK_STATE_DIR to a stack from \`npm run stack -- up\`.`);
  }
  return v;
}

let cached: TestEnv | undefined;

/** The run's shared stack, from the environment that test/run.ts sets. */
export async function testEnv(): Promise<TestEnv> {
  if (cached) return cached;
  const kubeconfigPath = required('KUBECONFIG');
  const kc = new KubeConfig();
  kc.loadFromFile(kubeconfigPath);
  const stateDir = process.env['STACK_STATE_DIR'];
  cached = {
    kubeconfigPath,
    kc,
    temporalAddress: required('TEMPORAL_ADDRESS'),
    temporalNamespace: process.env['TEMPORAL_NAMESPACE'] ?? 'default',
    prometheusUrl: required('PROMETHEUS_ADDRESS'),
    workflowBundlePath: required('WORKFLOW_BUNDLE_PATH'),
    stack: stateDir ? await readStack(stateDir) : null,
  };
  return cached;
}

/** The prebuilt workflow bundle, to pass as `workflowBundle: { code }`. */
export async function workflowBundle(): Promise<{ code: string }> {
  return { code: await readFile((await testEnv()).workflowBundlePath, 'utf8') };
}

/** The stack's state, for tests that stop and restart servers; fails when the stack was not started by this run's harness. */
export async function ownStack(): Promise<StackInfo> {
  const env = await testEnv();
  if (!env.stack) throw new Error('this test restarts servers and needs a stack started by `npm test` or `npm run stack -- up` (STACK_STATE_DIR)');
  return env.stack;
}
