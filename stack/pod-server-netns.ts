// The part of the pod server that runs inside the stack's network namespace (`ip netns exec <ns> node <this file>`),
// where every pod address is local: one listener per distinct container port, on 0.0.0.0, takes the connections to
// every pod, and the address a connection came to says which pod it is for. It cannot reach the API server (that
// listens on the host's loopback), so stack/pod-server.ts, on the host, sends it the pods over stdin, one JSON line
// per change with the whole table, and reads one JSON line per answered request from its stdout.
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import { createInterface } from 'node:readline';
import { behaviourOf, failsRequest, failureStatus, type PodBehaviour } from './pod-behaviour.ts';

/** One pod, as the host side sends it. */
export interface PodEntry {
  namespace: string;
  name: string;
  ip: string;
  app: string;
  version: string;
  /** The image of each container, with the ports it declares. */
  containers: { image: string; ports: number[] }[];
}

/** A message from the host side: the whole table of pods, numbered. */
export interface PodTable {
  seq: number;
  pods: PodEntry[];
}

/** A message to the host side: a table applied (with the ports listened on), or one answered request. */
export type ChildMessage =
  | { applied: number; ports: number[] }
  | { request: { ip: string; port: number; pod?: string; status: number; ms: number } };

interface Served {
  entry: PodEntry;
  /** Requests answered so far, for the even spread of failures. */
  count: number;
}

const byIp = new Map<string, Served>();
const listeners = new Map<number, Server>();

function send(msg: ChildMessage): void {
  process.stdout.write(`${JSON.stringify(msg)}\n`);
}

/** The behaviour of the container declaring `port`, else of the pod's first container; a bad tag is reported in the answer. */
function behaviourFor(entry: PodEntry, port: number): PodBehaviour | Error {
  const container = entry.containers.find((c) => c.ports.includes(port)) ?? entry.containers[0];
  try {
    return behaviourOf(container?.image ?? '');
  } catch (err) {
    return err as Error;
  }
}

function answer(req: IncomingMessage, res: ServerResponse): void {
  const started = performance.now();
  const ip = (req.socket.localAddress ?? '').replace(/^::ffff:/, '');
  const port = req.socket.localPort ?? 0;
  req.resume();
  const served = byIp.get(ip);
  const finish = (status: number, body: Record<string, unknown>, headers: Record<string, string> = {}) => {
    res.writeHead(status, { 'content-type': 'application/json', ...headers });
    res.end(`${JSON.stringify(body)}\n`);
    send({ request: { ip, port, ...(served ? { pod: `${served.entry.namespace}/${served.entry.name}` } : {}), status, ms: Math.round(performance.now() - started) } });
  };
  if (!served) {
    process.stderr.write(`${new Date().toISOString()} no pod has ${ip}:${port} (${req.method} ${req.headers.host ?? ''}${req.url}): answered 502\n`);
    finish(502, { error: `no pod has address ${ip}`, ip, port });
    return;
  }
  const { entry } = served;
  const who = { pod: entry.name, namespace: entry.namespace, app: entry.app, version: entry.version, ip, port };
  const headers = { 'x-pod-name': entry.name, 'x-pod-namespace': entry.namespace, 'x-app': entry.app, 'x-version': entry.version };
  const behaviour = behaviourFor(entry, port);
  if (behaviour instanceof Error) {
    finish(500, { ...who, error: behaviour.message }, headers);
    return;
  }
  served.count += 1;
  const fails = failsRequest(served.count, behaviour.errorPercent);
  const request = { method: req.method, host: req.headers.host ?? '', path: req.url ?? '/' };
  setTimeout(() => {
    if (fails) finish(failureStatus, { ...who, ...request, error: `injected failure (${behaviour.errorPercent}% of requests)` }, headers);
    else finish(200, { ...who, ...request }, headers);
  }, behaviour.latencyMs);
}

function listen(port: number): Promise<void> {
  return new Promise((resolve, reject) => {
    const server = createServer({ keepAliveTimeout: 65_000 }, answer);
    server.once('error', reject);
    server.listen(port, '0.0.0.0', () => {
      server.off('error', reject);
      listeners.set(port, server);
      resolve();
    });
  });
}

/** Serves exactly the table's pods and ports; a port that cannot be bound is reported and left out. */
async function apply(table: PodTable): Promise<void> {
  const counts = new Map([...byIp].map(([ip, s]) => [`${ip}/${s.entry.namespace}/${s.entry.name}`, s.count]));
  byIp.clear();
  for (const entry of table.pods) byIp.set(entry.ip, { entry, count: counts.get(`${entry.ip}/${entry.namespace}/${entry.name}`) ?? 0 });
  const wanted = new Set(table.pods.flatMap((p) => p.containers.flatMap((c) => c.ports)));
  for (const [port, server] of listeners) {
    if (wanted.has(port)) continue;
    listeners.delete(port);
    server.close();
    server.closeAllConnections();
  }
  for (const port of wanted) {
    if (listeners.has(port)) continue;
    await listen(port).catch((err: unknown) => process.stderr.write(`cannot listen on port ${port}: ${(err as Error).message}\n`));
  }
  send({ applied: table.seq, ports: [...listeners.keys()].sort((a, b) => a - b) });
}

// Tables are applied one at a time, in order; the host side waits for `applied` before it calls itself in sync.
let queue = Promise.resolve();
createInterface({ input: process.stdin }).on('line', (line) => {
  const table = JSON.parse(line) as PodTable;
  queue = queue.then(() => apply(table));
}).on('close', () => process.exit(0));
