import { spawn, type ChildProcess } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { createWriteStream } from 'node:fs';
import { readFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { freePort } from '../../stack/processes.ts';
import { testEnv } from './env.ts';
import { eventually } from './wait.ts';

const root = resolve(import.meta.dirname, '..', '..');

/** An operator process of our own for one test file: its own task queue, watching only the given namespaces. */
export interface OperatorProcess {
  taskQueue: string;
  metricsUrl: string;
  logFile: string;
  /** Stops it (SIGKILL simulates a crash) and waits for the process to exit. */
  stop(signal?: NodeJS.Signals): Promise<void>;
  /** Starts it again with the same settings. */
  restart(): Promise<void>;
  logs(): Promise<string>;
  /** Whether /readyz answers 200 right now. */
  isReady(): Promise<boolean>;
  /** The running process's id (undefined once it exited). */
  pid(): number | undefined;
}

export interface OperatorOptions {
  namespaces: string[];
  taskQueue?: string;
  extraArgs?: string[];
  extraEnv?: Record<string, string>;
  /** Talk to the API server with this kubeconfig instead of the run's admin one (e.g. a ServiceAccount token). */
  kubeconfig?: string;
  /** Wait until /readyz says ready before returning (default); false returns once the process serves /healthz. */
  waitReady?: boolean;
  readyTimeoutMs?: number;
  /** Tells this process's log file apart from others on the same task queue (default: the task queue alone). */
  logName?: string;
}

/** Spawns `application-operator run` against the run's stack and waits until /readyz says ready (or, without waitReady, /healthz). */
export async function startOperator(opts: OperatorOptions): Promise<OperatorProcess> {
  const env = await testEnv();
  const taskQueue = opts.taskQueue ?? `test-${randomUUID()}`;
  const port = await freePort();
  const metricsUrl = `http://127.0.0.1:${port}`;
  const logFile = join(tmpdir(), `operator-${taskQueue}${opts.logName ? `-${opts.logName}` : ''}.log`);
  const log = createWriteStream(logFile, { flags: 'a' });
  let child: ChildProcess | undefined;

  const start = async () => {
    child = spawn(process.execPath, [
      join(root, 'bin', 'application-operator.ts'), 'run',
      `--kubeconfig=${opts.kubeconfig ?? env.kubeconfigPath}`, `--temporal-address=${env.temporalAddress}`, `--temporal-namespace=${env.temporalNamespace}`,
      `--task-queue=${taskQueue}`, `--namespaces=${opts.namespaces.join(',')}`, `--workflow-bundle=${env.workflowBundlePath}`,
      `--metrics-addr=127.0.0.1:${port}`, '--temporal-ui-url=http://127.0.0.1:8233', '--coalesce-ms=100', '--progress-recheck-seconds=5',
      '--log-level=debug', '--no-register-search-attributes',
      ...(opts.extraArgs ?? []),
    ], { cwd: root, env: { ...process.env, ...opts.extraEnv }, stdio: ['ignore', 'pipe', 'pipe'] });
    child.stdout?.pipe(log, { end: false });
    child.stderr?.pipe(log, { end: false });
    const c = child;
    const probe = opts.waitReady === false ? 'healthz' : 'readyz';
    await eventually(`operator ${probe === 'readyz' ? 'ready' : 'serving'}`, async () => {
      if (c.exitCode !== null) throw new Error(`operator exited with ${c.exitCode}; log: ${logFile}\n${(await readFile(logFile, 'utf8')).slice(-3000)}`);
      const r = await fetch(`${metricsUrl}/${probe}`).catch(() => null);
      return r?.ok ? true : undefined;
    }, { timeoutMs: opts.readyTimeoutMs ?? 60_000 });
  };

  const stop = async (signal: NodeJS.Signals = 'SIGTERM') => {
    const c = child;
    if (!c || c.exitCode !== null || c.signalCode !== null) return;
    const exited = new Promise<void>((r) => c.once('exit', () => r()));
    c.kill(signal);
    await exited;
  };

  await start();
  return {
    taskQueue, metricsUrl, logFile, stop, restart: start,
    logs: () => readFile(logFile, 'utf8'),
    isReady: async () => (await fetch(`${metricsUrl}/readyz`).catch(() => null))?.ok === true,
    pid: () => (child && child.exitCode === null && child.signalCode === null ? child.pid : undefined),
  };
}
