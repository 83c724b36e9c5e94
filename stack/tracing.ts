// The stack's trace backend, when a stack is created with it (`up --tracing`): Jaeger (v2, built from its Go
// module) receiving OTLP on 127.0.0.1 and keeping traces in memory, the kube-apiserver exporting its spans to it
// (a tracing configuration file) and etcd too (its distributed-tracing flags). Both sample only what arrives with a
// sampled trace context (a rate of 0 for the rest), so a stack with tracing costs nothing for untraced requests.
// `npm run stack -- trace <app>` reads traces back through Jaeger's query API (stack/trace-tree.ts).
import { mkdir, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { stringify } from 'yaml';
import { httpGet } from '../lib/http.ts';
import { assertPortFree, freePortsBesides } from '../lib/net.ts';
import { withFlag } from './dataplane.ts';
import { isOurs, startDetached, stopPid, waitFor, type ServerSpec } from './processes.ts';
import { readStack, type StackInfo } from './stack.ts';
import { artifactPaths } from './versions.ts';

export interface TracingPorts {
  otlpGrpc: number;
  otlpHttp: number;
  query: number;
  queryGrpc: number;
}

export const defaultTracingPorts: TracingPorts = { otlpGrpc: 24317, otlpHttp: 24318, query: 26686, queryGrpc: 26685 };

/** What stack.json records of the trace backend. */
export interface TracingInfo {
  ports: TracingPorts;
  /** Where the operator sends spans (OTLP/HTTP base URL: OTEL_EXPORTER_OTLP_ENDPOINT). */
  otlpHttpUrl: string;
  /** Jaeger's query API (GET /api/traces...). */
  queryUrl: string;
  server: ServerSpec & { pid?: number };
}

const tracingDir = (stateDir: string) => join(stateDir, 'tracing');

/** Jaeger's configuration: OTLP in, memory storage, the query API; everything on 127.0.0.1, no telemetry port of its own. */
export function jaegerConfig(ports: TracingPorts): object {
  const at = (port: number) => `127.0.0.1:${port}`;
  return {
    service: {
      extensions: ['jaeger_storage', 'jaeger_query'],
      pipelines: { traces: { receivers: ['otlp'], processors: ['batch'], exporters: ['jaeger_storage_exporter'] } },
      telemetry: { metrics: { level: 'none' }, logs: { level: 'warn' } },
    },
    extensions: {
      // Jaeger does not trace itself (it would send its own spans to the default 127.0.0.1:4317).
      jaeger_query: { storage: { traces: 'memory' }, http: { endpoint: at(ports.query) }, grpc: { endpoint: at(ports.queryGrpc) }, enable_tracing: false },
      jaeger_storage: { backends: { memory: { memory: { max_traces: 100000 } } } },
    },
    receivers: { otlp: { protocols: { grpc: { endpoint: at(ports.otlpGrpc) }, http: { endpoint: at(ports.otlpHttp) } } } },
    processors: { batch: { timeout: '200ms' } },
    exporters: { jaeger_storage_exporter: { trace_storage: 'memory' } },
  };
}

/** The kube-apiserver's tracing configuration: OTLP/gRPC to Jaeger, sampling only what comes sampled. */
export function apiserverTracingConfig(ports: TracingPorts): object {
  return { apiVersion: 'apiserver.config.k8s.io/v1', kind: 'TracingConfiguration', endpoint: `127.0.0.1:${ports.otlpGrpc}`, samplingRatePerMillion: 0 };
}

/** Adds the trace backend to a stack being created: Jaeger's server, and the API server's and etcd's tracing flags. */
export async function addTracing(info: StackInfo, opts: { freePorts: boolean }): Promise<TracingInfo> {
  const ports = opts.freePorts ? await freeTracingPorts(Object.values<number>({ ...info.ports })) : defaultTracingPorts;
  const dir = tracingDir(info.stateDir);
  await mkdir(dir, { recursive: true });
  const jaegerFile = join(dir, 'jaeger.yaml');
  const apiserverFile = join(dir, 'apiserver-tracing.yaml');
  await writeFile(jaegerFile, stringify(jaegerConfig(ports)));
  await writeFile(apiserverFile, stringify(apiserverTracingConfig(ports)));
  const apiserver = info.servers['kube-apiserver'];
  apiserver.args = withFlag(apiserver.args, '--tracing-config-file', apiserverFile);
  const etcd = info.servers.etcd;
  etcd.args = [
    ...etcd.args.filter((a) => !a.startsWith('--enable-distributed-tracing') && !a.startsWith('--distributed-tracing-')),
    '--enable-distributed-tracing', `--distributed-tracing-address=127.0.0.1:${ports.otlpGrpc}`,
    '--distributed-tracing-service-name=etcd', '--distributed-tracing-sampling-rate=0',
  ];
  const tracing: TracingInfo = {
    ports,
    otlpHttpUrl: `http://127.0.0.1:${ports.otlpHttp}`,
    queryUrl: `http://127.0.0.1:${ports.query}`,
    server: {
      name: 'jaeger', command: artifactPaths().jaeger, log: join(info.stateDir, 'logs', 'jaeger.log'),
      ports: [ports.otlpGrpc, ports.otlpHttp, ports.query, ports.queryGrpc], args: [`--config=${jaegerFile}`],
    },
  };
  info.tracing = tracing;
  return tracing;
}

async function freeTracingPorts(taken: number[]): Promise<TracingPorts> {
  const [otlpGrpc, otlpHttp, query, queryGrpc] = (await freePortsBesides(taken, 4)) as [number, number, number, number];
  return { otlpGrpc, otlpHttp, query, queryGrpc };
}

/** Whether Jaeger answers its query API. */
export async function jaegerAnswers(tracing: TracingInfo): Promise<boolean> {
  return (await httpGet(`${tracing.queryUrl}/api/services`).catch(() => null))?.status === 200;
}

/** Starts Jaeger before the servers that export to it (idempotent). */
export async function startTracingBackend(info: StackInfo, print: (l: string) => void, signal?: AbortSignal): Promise<void> {
  const tracing = info.tracing;
  if (!tracing) return;
  const spec = tracing.server;
  if (isOurs(spec.pid, spec.command)) return;
  for (const port of spec.ports) await waitFor(`port ${port} free for jaeger`, () => assertPortFree(port, 'jaeger').then(() => true), { timeoutMs: 15_000, signal });
  const t0 = Date.now();
  const pid = startDetached(spec);
  await savePid(info.stateDir, pid);
  spec.pid = pid;
  await waitFor('jaeger', () => jaegerAnswers(tracing), { pid, log: spec.log, timeoutMs: 60_000, signal });
  print(`  jaeger up (pid ${pid}) in ${((Date.now() - t0) / 1000).toFixed(1)} s: OTLP ${tracing.otlpHttpUrl}, query ${tracing.queryUrl}`);
}

/** Stops Jaeger (after the servers that export to it). */
export async function stopTracingBackend(info: StackInfo): Promise<void> {
  const spec = info.tracing?.server;
  if (!spec?.pid) return;
  await stopPid(spec.pid, spec.command);
  delete spec.pid;
  await savePid(info.stateDir, undefined);
}

/** Jaeger's row for `stack status`. */
export async function tracingStatus(info: StackInfo): Promise<{ name: 'jaeger'; pid?: number; ports: number[]; state: 'up' | 'unhealthy' | 'stopped'; detail?: string }[]> {
  const t = info.tracing;
  if (!t) return [];
  const row = { name: 'jaeger' as const, ports: t.server.ports, ...(t.server.pid ? { pid: t.server.pid } : {}) };
  if (!isOurs(t.server.pid, t.server.command)) return [{ ...row, state: 'stopped' }];
  return (await jaegerAnswers(t)) ? [{ ...row, state: 'up' }] : [{ ...row, state: 'unhealthy', detail: `${t.queryUrl}/api/services does not answer 200` }];
}

async function savePid(stateDir: string, pid: number | undefined): Promise<void> {
  const current = await readStack(stateDir);
  if (!current?.tracing) return;
  if (pid === undefined) delete current.tracing.server.pid;
  else current.tracing.server.pid = pid;
  await writeFile(join(stateDir, 'stack.json'), JSON.stringify(current, null, 2));
}

/** The exports that point an operator at the stack's trace backend (for `stack env`). */
export function tracingEnvLines(info: StackInfo): string[] {
  return info.tracing ? [`export OTEL_EXPORTER_OTLP_ENDPOINT=${info.tracing.otlpHttpUrl}`, `export JAEGER_QUERY_URL=${info.tracing.queryUrl}`] : [];
}
