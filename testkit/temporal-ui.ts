// A Temporal dev server of a test's own: with its web UI on (the run's stack is headless), optionally pointed at a
// codec server, for a browser test to look at workflows the way a user does; or with lowered history limits, or
// restarted on an empty database, for the tests of long rollouts and of Temporal's state being lost. And the
// `application-operator codec-server` command as a process.
import { spawn, type ChildProcess } from 'node:child_process';
import { createWriteStream } from 'node:fs';
import { readFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { Client, Connection } from '@temporalio/client';
import { freePort } from '../lib/net.ts';
import { eventually, StopPolling } from '../lib/poll.ts';
import { TEMPORAL_SQLITE_FLAGS, withUiCodecEndpoint } from '../stack/stack.ts';
import { artifactPaths } from '../stack/versions.ts';
import { searchAttributeFlags } from '../workflows/search-attributes.ts';

const root = resolve(import.meta.dirname, '..');

export interface RunningProcess {
  /** Stops it (SIGTERM, then SIGKILL after a grace period) and waits for it to exit. */
  stop(): Promise<void>;
  logFile: string;
}

/** Spawns a long-running process logging to a file, and waits until `ready()` says so (or fails with the log's tail if it exits). */
async function spawnServer(name: string, command: string, args: string[], ready: () => Promise<boolean>, timeoutMs: number): Promise<RunningProcess> {
  const logFile = join(tmpdir(), `${name}-${process.pid}-${Date.now()}.log`);
  const log = createWriteStream(logFile, { flags: 'a' });
  const child: ChildProcess = spawn(command, args, { cwd: root, stdio: ['ignore', 'pipe', 'pipe'] });
  child.stdout?.pipe(log, { end: false });
  child.stderr?.pipe(log, { end: false });
  const exited = () => child.exitCode !== null || child.signalCode !== null;
  const stop = async () => {
    if (exited()) return;
    const gone = new Promise<void>((r) => child.once('exit', () => r()));
    child.kill('SIGTERM');
    const timer = setTimeout(() => child.kill('SIGKILL'), 10_000);
    await gone;
    clearTimeout(timer);
  };
  try {
    await eventually(`${name} ready`, async () => {
      if (exited()) throw new StopPolling(`${name} exited with ${child.exitCode ?? child.signalCode}; log ${logFile}:\n${(await readFile(logFile, 'utf8').catch(() => '')).slice(-2000)}`);
      return (await ready().catch(() => false)) ? true : undefined;
    }, { timeoutMs, intervalMs: 300 });
  } catch (err) {
    await stop();
    throw err;
  }
  return { stop, logFile };
}

export interface TemporalWithUi extends RunningProcess {
  /** gRPC frontend, host:port. */
  address: string;
  /** The web UI, e.g. http://127.0.0.1:41234 (the origin a codec server must allow). */
  uiUrl: string;
}

/**
 * The cached Temporal CLI's dev server on free ports with its UI, in memory, with the operator's search attributes;
 * `codecEndpoint` points the UI at a codec server the way `npm run stack -- up --codec-endpoint` does.
 */
export async function startTemporalWithUi(opts: { codecEndpoint?: string } = {}): Promise<TemporalWithUi> {
  const [grpc, ui, http, metrics] = [await freePort(), await freePort(), await freePort(), await freePort()];
  const args = withUiCodecEndpoint([
    'server', 'start-dev', '--ip=127.0.0.1', `--port=${grpc}`, '--ui-ip=127.0.0.1', `--ui-port=${ui}`, `--http-port=${http}`, `--metrics-port=${metrics}`,
    '--namespace=default', '--log-level=warn', ...searchAttributeFlags(),
  ], opts.codecEndpoint ?? '');
  const address = `127.0.0.1:${grpc}`;
  const uiUrl = `http://127.0.0.1:${ui}`;
  const server = await spawnServer('temporal-ui', artifactPaths().temporal, args, async () => {
    if (!(await fetch(uiUrl)).ok) return false;
    const connection = await Connection.connect({ address, connectTimeout: 2000 });
    try {
      await connection.workflowService.getSystemInfo({});
      return true;
    } finally {
      await connection.close();
    }
  }, 90_000);
  return { ...server, address, uiUrl };
}

export interface OwnTemporal extends RunningProcess {
  /** gRPC frontend, host:port. */
  address: string;
  /** Stops it and starts it again on the same ports: on the same database, or (`emptyDatabase`) on a new empty one. */
  restart(opts?: { emptyDatabase?: boolean }): Promise<void>;
  /** A client on it (closed by stop()). */
  client(): Promise<Client>;
}

/**
 * The cached Temporal CLI's dev server on free ports, headless, with a database file of its own, the operator's
 * search attributes and the given dynamic config values (e.g. `limit.historyCount.error`).
 */
export async function startTemporal(opts: { dynamicConfig?: Record<string, string | number> } = {}): Promise<OwnTemporal> {
  const [grpc, http, metrics] = [await freePort(), await freePort(), await freePort()];
  const address = `127.0.0.1:${grpc}`;
  let db = 0;
  const dbFile = () => join(tmpdir(), `temporal-${process.pid}-${grpc}-${db}.db`);
  const args = () => [
    'server', 'start-dev', '--headless', '--ip=127.0.0.1', `--port=${grpc}`, `--http-port=${http}`, `--metrics-port=${metrics}`,
    `--db-filename=${dbFile()}`, ...TEMPORAL_SQLITE_FLAGS, '--namespace=default', '--log-level=warn', ...searchAttributeFlags(),
    ...Object.entries(opts.dynamicConfig ?? {}).flatMap(([k, v]) => ['--dynamic-config-value', `${k}=${v}`]),
  ];
  const ready = async () => {
    const connection = await Connection.connect({ address, connectTimeout: 2000 });
    try {
      await connection.workflowService.getSystemInfo({});
      return true;
    } finally {
      await connection.close();
    }
  };
  let server = await spawnServer('temporal', artifactPaths().temporal, args(), ready, 90_000);
  let clients: { connection: Connection; client: Client } | undefined;
  return {
    address,
    get logFile() { return server.logFile; },
    stop: async () => {
      await clients?.connection.close();
      clients = undefined;
      await server.stop();
    },
    restart: async ({ emptyDatabase = false } = {}) => {
      await clients?.connection.close();
      clients = undefined;
      await server.stop();
      if (emptyDatabase) db++;
      server = await spawnServer('temporal', artifactPaths().temporal, args(), ready, 90_000);
    },
    client: async () => {
      if (!clients) {
        const connection = await Connection.connect({ address });
        clients = { connection, client: new Client({ connection, namespace: 'default' }) };
      }
      return clients.client;
    },
  };
}

/**
 * `application-operator codec-server` with the operator's key file, allowing the given browser origins, on `port`
 * (chosen beforehand when the UI must be told the endpoint before the codec server can be told the UI's origin).
 */
export async function startCodecServerProcess(opts: { keyFile: string; corsOrigins: string[]; port?: number }): Promise<RunningProcess & { url: string }> {
  const url = `http://127.0.0.1:${opts.port ?? await freePort()}`;
  const server = await spawnServer('codec-server', process.execPath, [
    join(root, 'bin', 'application-operator.ts'), 'codec-server', `--listen=${new URL(url).host}`,
    `--cors-origin=${opts.corsOrigins.join(',')}`, `--payload-encryption-key-file=${opts.keyFile}`,
  ], async () => (await fetch(`${url}/healthz`)).ok, 30_000);
  return { ...server, url };
}
