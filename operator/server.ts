import { createServer, type Server } from 'node:http';
import type { Registry } from 'prom-client';

export interface HealthChecks {
  /** Liveness: the process can serve. */
  healthz: () => { ok: boolean; detail: string };
  /** Readiness: the watcher has synced and the worker is polling. */
  readyz: () => { ok: boolean; detail: string };
}

/** Serves /metrics (ours plus the Temporal worker's), /healthz and /readyz. */
export function startHttpServer(addr: string, registry: Registry, checks: HealthChecks, workerMetricsUrl?: string): Promise<Server> {
  const [host, portText] = addr.includes(':') ? [addr.slice(0, addr.lastIndexOf(':')), addr.slice(addr.lastIndexOf(':') + 1)] : ['0.0.0.0', addr];
  const server = createServer((req, res) => {
    void (async () => {
      if (req.url === '/metrics') {
        let body = await registry.metrics();
        if (workerMetricsUrl) {
          body += await fetch(workerMetricsUrl).then((r) => r.text(), () => '');
        }
        res.writeHead(200, { 'Content-Type': registry.contentType });
        res.end(body);
        return;
      }
      const check = req.url === '/healthz' ? checks.healthz : req.url === '/readyz' ? checks.readyz : undefined;
      if (!check) {
        res.writeHead(404).end('not found\n');
        return;
      }
      const { ok, detail } = check();
      res.writeHead(ok ? 200 : 503, { 'Content-Type': 'text/plain' }).end(`${detail}\n`);
    })().catch((err: unknown) => {
      res.writeHead(500).end(String(err));
    });
  });
  return new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(Number(portText), host, () => resolve(server));
  });
}
