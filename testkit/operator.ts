// `application-operator run` as a child process against the run's stack: the one spawner the tests, the benchmark
// and the chaos run use.
import { spawn, type ChildProcess } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { createWriteStream } from 'node:fs';
import { readFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { freePort } from '../lib/net.ts';
import { eventually, StopPolling } from '../lib/poll.ts';
import { preloadArgs, withRuntimeEnv } from '../operator/runtime.ts';
import { testEnv } from './env.ts';

const root = resolve(import.meta.dirname, '..');

/** Flags that make an operator quick to react, for tests (the benchmark runs with the defaults instead). */
export const testFlags = [
  '--temporal-ui-url=http://127.0.0.1:8233', '--coalesce-ms=100', '--progress-recheck-seconds=5', '--release-poll-seconds=5', '--log-level=debug',
  // Member clusters are probed only by the fleet tests' hub, which names its own --clusters-namespace.
  '--cluster-probe-seconds=0',
];

/** An operator process of our own: its own task queue, watching only the given namespaces. */
export interface OperatorProcess {
  taskQueue: string;
  metricsUrl: string;
  logFile: string;
  /** The flags it was started with (after `run`). */
  args: string[];
  /** Stops it (SIGKILL simulates a crash; SIGTERM is followed by SIGKILL after graceMs) and waits for it to exit. */
  stop(signal?: NodeJS.Signals, graceMs?: number): Promise<void>;
  /** Sends a signal and returns at once (stop() waits and kills). */
  signal(signal: NodeJS.Signals): void;
  /** How the running process ends: its exit code, or the signal that killed it. */
  exited(): Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
  /** Starts it again with the same settings. */
  restart(): Promise<void>;
  logs(): Promise<string>;
  /** Whether /readyz answers 200 right now. */
  isReady(): Promise<boolean>;
  /** The running process's id (undefined once it exited). */
  pid(): number | undefined;
  /** Throws, with the log's tail, when the process has exited. */
  assertAlive(): Promise<void>;
}

export interface OperatorOptions {
  namespaces: string[];
  taskQueue?: string;
  /** Run the watcher, a worker, or both (default). */
  mode?: 'all' | 'watcher' | 'worker';
  /** Flags after the connection flags; default testFlags. */
  flags?: string[];
  extraArgs?: string[];
  extraEnv?: Record<string, string>;
  /** Bundle the workflow code at start, as an operator given no --workflow-bundle does (default: the run's prebuilt bundle). */
  bundleAtStart?: boolean;
  /** Arguments for node itself before the program (e.g. --import of a probe). */
  nodeArgs?: string[];
  /** Talk to this Temporal frontend instead of the run's (e.g. a dev server of the test's own with its UI on). */
  temporalAddress?: string;
  /** Talk to the API server with this kubeconfig instead of the run's admin one (e.g. a ServiceAccount token, a member cluster's). */
  kubeconfig?: string;
  /** Run in this Temporal namespace instead of the run's (a member cluster's operator). */
  temporalNamespace?: string;
  /** Wait until /readyz says ready before returning (default); false returns once the process serves /healthz. */
  waitReady?: boolean;
  readyTimeoutMs?: number;
  /** Where the log goes (default: the temp folder, named by task queue and logName). */
  logFile?: string;
  /** Tells this process's log file apart from others on the same task queue (default: the task queue alone). */
  logName?: string;
}

/** Spawns `application-operator run` against the run's stack and waits until /readyz says ready (or, without waitReady, /healthz). */
export async function startOperator(opts: OperatorOptions): Promise<OperatorProcess> {
  const env = await testEnv();
  const taskQueue = opts.taskQueue ?? `test-${randomUUID()}`;
  // The port is the kernel's free one at the time, but another process may take it before the operator binds it
  // (an outgoing connection's ephemeral port, another test's operator): then start() moves to a fresh one.
  let port = await freePort();
  const metricsUrl = () => `http://127.0.0.1:${port}`;
  const logFile = opts.logFile ?? join(tmpdir(), `operator-${taskQueue}${opts.logName ? `-${opts.logName}` : ''}.log`);
  const log = createWriteStream(logFile, { flags: 'a' });
  const args = [
    `--kubeconfig=${opts.kubeconfig ?? env.kubeconfigPath}`, `--temporal-address=${opts.temporalAddress ?? env.temporalAddress}`, `--temporal-namespace=${opts.temporalNamespace ?? env.temporalNamespace}`,
    `--task-queue=${taskQueue}`, `--namespaces=${opts.namespaces.join(',')}`,
    ...(opts.bundleAtStart ? [] : [`--workflow-bundle=${env.workflowBundlePath}`]),
    // A member cluster's operator runs in a Temporal namespace of its own, whose search attributes it registers.
    '--metrics-addr', `--mode=${opts.mode ?? 'all'}`, ...(opts.temporalNamespace ? [] : ['--no-register-search-attributes']),
    ...(opts.flags ?? testFlags), ...(opts.extraArgs ?? []),
  ];
  let child: ChildProcess | undefined;
  const exited = (c: ChildProcess) => c.exitCode !== null || c.signalCode !== null;
  const tail = async () => (await readFile(logFile, 'utf8').catch(() => '')).slice(-3000);

  const metricsAt = args.indexOf('--metrics-addr');
  const start = async (attempt = 1): Promise<void> => {
    args[metricsAt] = `--metrics-addr=127.0.0.1:${port}`;
    child = spawn(process.execPath, [...preloadArgs(root), ...(opts.nodeArgs ?? []), join(root, 'bin', 'application-operator.ts'), 'run', ...args], {
      cwd: root, env: withRuntimeEnv({ ...process.env, ...opts.extraEnv }), stdio: ['ignore', 'pipe', 'pipe'],
    });
    child.stdout?.pipe(log, { end: false });
    child.stderr?.pipe(log, { end: false });
    // Only this process saying it serves on our port makes /readyz its answer: another test's server may hold a
    // port picked at the same moment, and would answer for it.
    let bound = false;
    let seen = '';
    child.stdout?.on('data', (d: Buffer) => {
      if (bound) return;
      seen = (seen + d.toString()).slice(-8192);
      bound = seen.split('\n').some((l) => l.includes('serving /metrics') && l.includes(`"addr":"127.0.0.1:${port}"`));
    });
    const c = child;
    const probe = opts.waitReady === false ? 'healthz' : 'readyz';
    try {
      await eventually(`operator ${probe === 'readyz' ? 'ready' : 'serving'}`, async () => {
        if (exited(c)) throw new StopPolling(`operator exited with ${c.exitCode ?? c.signalCode}; log: ${logFile}\n${await tail()}`);
        if (!bound) return undefined;
        const r = await fetch(`${metricsUrl()}/${probe}`).catch(() => null);
        return r?.ok ? true : undefined;
      }, { timeoutMs: opts.readyTimeoutMs ?? 60_000 });
    } catch (err) {
      // Not left running behind a failed start.
      if (!exited(c)) c.kill('SIGKILL');
      if (attempt < 3 && exited(c) && `${String(err)}${await tail()}`.includes(`EADDRINUSE: address already in use 127.0.0.1:${port}`)) {
        port = await freePort();
        return start(attempt + 1);
      }
      throw err;
    }
  };

  const stop = async (signal: NodeJS.Signals = 'SIGTERM', graceMs = 15_000) => {
    const c = child;
    if (!c || exited(c)) return;
    const gone = new Promise<void>((r) => c.once('exit', () => r()));
    c.kill(signal);
    const timer = setTimeout(() => c.kill('SIGKILL'), graceMs);
    await gone;
    clearTimeout(timer);
  };

  const current = () => {
    if (!child) throw new Error('operator not started');
    return child;
  };
  await start();
  return {
    taskQueue, logFile, args, stop, restart: () => start(),
    signal: (sig) => current().kill(sig),
    exited: () => {
      const c = current();
      if (exited(c)) return Promise.resolve({ code: c.exitCode, signal: c.signalCode });
      return new Promise((r) => c.once('exit', (code, sig) => r({ code, signal: sig })));
    },
    get metricsUrl() { return metricsUrl(); },
    logs: () => readFile(logFile, 'utf8'),
    isReady: async () => (await fetch(`${metricsUrl()}/readyz`).catch(() => null))?.ok === true,
    pid: () => (child && !exited(child) ? child.pid : undefined),
    assertAlive: async () => {
      if (child && exited(child)) throw new Error(`operator (pid ${child.pid}) exited with ${child.exitCode ?? child.signalCode}; log ${logFile}:\n${await tail()}`);
    },
  };
}
