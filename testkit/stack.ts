// One local stack for a whole run of tests, the benchmark or the chaos run: a temporary state folder, every server
// on free ports, the workflow code bundled once, and the environment that points the testkit and operator processes
// at it. Or an already running stack (STACK_STATE_DIR), which is left running.
import { mkdtemp } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { writeWhole } from '../lib/files.ts';
import { bundleWorkflows } from '../operator/workflow-bundle.ts';
import { buildAll } from '../stack/build.ts';
import { down, readStack, status, up, type StackInfo } from '../stack/stack.ts';

export interface RunStack {
  info: StackInfo;
  /** Started by this run (and stopped by stop()), as opposed to reused. */
  owned: boolean;
  bundlePath: string;
  /** The variables that point the testkit (testkit/env.ts) and the operator's flags at this stack. */
  env: Record<string, string>;
  /** Stops and removes an owned stack (unless kept); leaves a reused one alone. */
  stop(): Promise<void>;
}

export interface RunStackOptions {
  /** Names the temporary state folder. */
  prefix: string;
  /** The workflow module to bundle (the operator's, or one that adds test-only workflows). */
  workflowsPath: string;
  /** A running stack's state folder to use instead of starting one. */
  reuse?: string | undefined;
  nodes?: number;
  podDelayMs?: number;
  /** Start the data plane (Traefik, the pod server, the pod network), building it first if needed. */
  dataPlane?: boolean;
  /** Start it with its trace backend (Jaeger; the API server and etcd export spans of traced requests). */
  tracing?: boolean;
  /** Leave an owned stack running at stop() (its folder is printed). */
  keep?: boolean;
  /** Told the new stack's state folder before its servers start, so a caller can tear a half-started stack down (Ctrl-C). */
  onStateDir?: (stateDir: string) => void;
  /** Stops a start under way: the servers started so far are stopped and the state folder removed (a reused stack is left alone). */
  signal?: AbortSignal;
  print?: (line: string) => void;
}

/** Starts (or reuses) the stack and bundles the workflow code; call stop() when done. */
export async function startRunStack(opts: RunStackOptions): Promise<RunStack> {
  const print = opts.print ?? ((l: string) => console.log(l));
  let info: StackInfo;
  let owned = false;
  if (opts.reuse) {
    const rows = await status(opts.reuse);
    const found = await readStack(opts.reuse);
    const notUp = rows?.filter((r) => r.state !== 'up') ?? [];
    if (!rows || !found || notUp.length > 0) {
      const which = notUp.map((r) => `${r.name} ${r.state}${r.detail ? ` (${r.detail})` : ''}`).join('; ');
      throw new Error(`STACK_STATE_DIR=${opts.reuse} names no running stack${which ? `: ${which}` : ''} (see: npm run stack -- status); unset it to let the run start its own`);
    }
    print(`reusing the stack in ${opts.reuse}`);
    info = found;
  } else {
    await buildAll({ print, with: ['metrics', 'helm', ...(opts.dataPlane ? ['data-plane' as const] : []), ...(opts.tracing ? ['tracing' as const] : [])] });
    const stateDir = await mkdtemp(join(tmpdir(), `${opts.prefix}-`));
    print(`starting a stack for this run in ${stateDir}`);
    opts.onStateDir?.(stateDir);
    try {
      info = await up({
        stateDir, ports: 'free', headless: true, nodes: opts.nodes ?? 2, podDelayMs: opts.podDelayMs ?? 200, dataPlane: opts.dataPlane ?? false, tracing: opts.tracing ?? false, print,
        ...(opts.signal ? { signal: opts.signal } : {}),
      });
    } catch (err) {
      // The servers that did start are not left running behind a failed or interrupted start.
      await down(stateDir, { purge: true }).catch(() => undefined);
      throw err;
    }
    owned = true;
  }
  const bundle = await bundleWorkflows({ workflowsPath: opts.workflowsPath });
  if (opts.signal?.aborted) {
    if (owned) await down(info.stateDir, { purge: true });
    throw new Error('stopped while starting the stack');
  }
  const bundlePath = join(info.stateDir, `workflow-bundle-${process.pid}.js`);
  await writeWhole(bundlePath, bundle);
  const env = {
    STACK_STATE_DIR: info.stateDir,
    KUBECONFIG: info.kubeconfig,
    TEMPORAL_ADDRESS: info.temporalAddress,
    TEMPORAL_NAMESPACE: info.temporalNamespace,
    PROMETHEUS_ADDRESS: info.prometheusUrl,
    WORKFLOW_BUNDLE_PATH: bundlePath,
    ...(info.dataPlane ? { GATEWAY_URL: info.dataPlane.gatewayUrl, POD_SERVER_URL: info.dataPlane.podServerUrl } : {}),
    // Not OTEL_EXPORTER_OTLP_ENDPOINT: only the tests that want traces point an operator at Jaeger.
    ...(info.tracing ? { JAEGER_OTLP_URL: info.tracing.otlpHttpUrl, JAEGER_QUERY_URL: info.tracing.queryUrl } : {}),
  };
  return {
    info, owned, bundlePath, env,
    stop: async () => {
      if (!owned) return;
      if (opts.keep) print(`stack kept in ${info.stateDir} (stop it with: npm run stack -- --state-dir ${info.stateDir} down --purge)`);
      else await down(info.stateDir, { purge: true });
    },
  };
}

