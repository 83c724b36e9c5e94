// The pod server of the local stack's data plane: answers HTTP for every pod kwok pretends to run, so requests through
// the proxy reach "pods" and the answers say which pod and version served them. This process runs on the host: it
// watches Pods on the stack's API server, starts stack/pod-server-netns.ts inside the stack's network namespace (where
// the pod addresses are) and keeps it told of every pod, counts what it answered per pod, and serves those counts to
// tests on 127.0.0.1. Started by the stack (stack/dataplane.ts):
//   node stack/pod-server.ts --kubeconfig <file> --netns <name> --port <control port>
import { spawn } from 'node:child_process';
import { createServer } from 'node:http';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { parseArgs } from 'node:util';
import { Kube, type KubeObject } from '../kube/client.ts';
import { loadKubeconfig } from '../kube/config.ts';
import { Reflector } from '../kube/reflector.ts';
import type { ChildMessage, PodEntry, PodTable } from './pod-server-netns.ts';

/** What the control endpoint tells of one pod: who it is and what it answered. */
export interface PodRequests {
  namespace: string;
  name: string;
  ip: string;
  app: string;
  version: string;
  images: string[];
  /** False once the pod is deleted (its counts are kept). */
  present: boolean;
  requests: number;
  /** Answers by HTTP status. */
  statuses: Record<string, number>;
}

/** GET /pods on the control port. */
export interface PodServerReport {
  pods: PodRequests[];
  /** Requests to an address no pod has, by ip:port. */
  unknown: Record<string, number>;
}

interface PodSpecLike {
  spec?: { hostNetwork?: boolean; containers?: { image?: string; ports?: { containerPort?: number; protocol?: string }[] }[] };
  status?: { podIP?: string };
}

/** The pod as the namespace side needs it, or undefined while it has no address of its own. */
export function podEntryOf(pod: KubeObject): PodEntry | undefined {
  const p = pod as KubeObject & PodSpecLike;
  const ip = p.status?.podIP;
  if (!ip || p.spec?.hostNetwork) return undefined;
  const labels = (pod.metadata['labels'] ?? {}) as Record<string, string>;
  return {
    namespace: pod.metadata.namespace ?? '',
    name: pod.metadata.name,
    ip,
    app: labels['app.kubernetes.io/name'] ?? '',
    version: labels['version'] ?? '',
    containers: (p.spec?.containers ?? []).map((c) => ({
      image: c.image ?? '',
      ports: (c.ports ?? []).filter((port) => (port.protocol ?? 'TCP') === 'TCP' && port.containerPort).map((port) => port.containerPort!),
    })),
  };
}

async function main(): Promise<void> {
  const { values } = parseArgs({ options: { kubeconfig: { type: 'string' }, netns: { type: 'string' }, port: { type: 'string' } } });
  if (!values.kubeconfig || !values.netns || !values.port) throw new Error('usage: pod-server.ts --kubeconfig <file> --netns <name> --port <control port>');
  const controlPort = Number(values.port);
  const log = (line: string) => process.stderr.write(`${new Date().toISOString()} ${line}\n`);

  const child = spawn('ip', ['netns', 'exec', values.netns, process.execPath, join(import.meta.dirname, 'pod-server-netns.ts')], { stdio: ['pipe', 'pipe', 'inherit'] });
  child.on('exit', (code, signal) => {
    log(`the server inside ${values.netns} exited (${signal ?? code}); stopping`);
    process.exit(1);
  });

  const pods = new Map<string, PodEntry>();
  const counts = new Map<string, PodRequests>();
  const unknown: Record<string, number> = {};
  let sent = 0;
  let applied = 0;
  let sendTimer: NodeJS.Timeout | undefined;
  // Sends the whole table, at most every 20 ms: a rollout changes many pods at once.
  const scheduleSend = () => {
    sendTimer ??= setTimeout(() => {
      sendTimer = undefined;
      const table: PodTable = { seq: ++sent, pods: [...pods.values()] };
      child.stdin.write(`${JSON.stringify(table)}\n`);
    }, 20);
  };

  const recordOf = (key: string, entry: PodEntry): PodRequests => {
    let r = counts.get(key);
    if (!r) {
      r = { namespace: entry.namespace, name: entry.name, ip: entry.ip, app: entry.app, version: entry.version, images: [], present: true, requests: 0, statuses: {} };
      counts.set(key, r);
    }
    Object.assign(r, { ip: entry.ip, app: entry.app, version: entry.version, images: entry.containers.map((c) => c.image), present: true });
    return r;
  };

  createInterface({ input: child.stdout }).on('line', (line) => {
    const msg = JSON.parse(line) as ChildMessage;
    if ('applied' in msg) {
      applied = msg.applied;
      return;
    }
    const { request } = msg;
    if (!request.pod) {
      const key = `${request.ip}:${request.port}`;
      unknown[key] = (unknown[key] ?? 0) + 1;
      return;
    }
    const r = counts.get(request.pod);
    if (!r) return;
    r.requests += 1;
    r.statuses[String(request.status)] = (r.statuses[String(request.status)] ?? 0) + 1;
  });

  const kube = new Kube(await loadKubeconfig(values.kubeconfig));
  const reflector = new Reflector({
    kube, path: '/api/v1/pods',
    onEvent: (type, obj) => {
      const key = `${obj.metadata.namespace ?? ''}/${obj.metadata.name}`;
      const entry = type === 'delete' ? undefined : podEntryOf(obj);
      if (entry) {
        pods.set(key, entry);
        recordOf(key, entry);
      } else {
        pods.delete(key);
        const r = counts.get(key);
        if (r) r.present = false;
      }
      scheduleSend();
    },
    onError: (err, retryInMs) => log(`watching pods: ${err.message}; again in ${retryInMs} ms`),
  });
  await reflector.start();
  scheduleSend();

  const control = createServer((req, res) => {
    const url = new URL(req.url ?? '/', 'http://control');
    const json = (status: number, body: unknown) => {
      res.writeHead(status, { 'content-type': 'application/json' });
      res.end(`${JSON.stringify(body)}\n`);
    };
    if (url.pathname === '/healthz') {
      // In sync once the pods are listed and the namespace side serves the newest table.
      const synced = reflector.synced && applied === sent && sendTimer === undefined;
      json(synced ? 200 : 503, { synced, pods: pods.size });
    } else if (url.pathname === '/pods') {
      const ns = url.searchParams.get('namespace');
      const report: PodServerReport = { pods: [...counts.values()].filter((r) => !ns || r.namespace === ns), unknown };
      json(200, report);
    } else {
      json(404, { error: 'GET /healthz or /pods[?namespace=<ns>]' });
    }
  });
  control.listen(controlPort, '127.0.0.1', () => log(`pod server: control on 127.0.0.1:${controlPort}, pods in ${values.netns}`));
  const stop = () => {
    child.kill('SIGTERM');
    process.exit(0);
  };
  process.on('SIGTERM', stop);
  process.on('SIGINT', stop);
}

if (import.meta.main) {
  main().catch((err: unknown) => {
    process.stderr.write(`pod server: ${err instanceof Error ? err.message : String(err)}\n`);
    process.exit(1);
  });
}
