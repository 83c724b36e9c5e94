// One GET over http or https, for health checks: the answer whatever its status, or an error that names the URL.
import { request as httpRequest } from 'node:http';
import { request as httpsRequest } from 'node:https';

/** What a GET answered. */
export interface HttpAnswer {
  url: string;
  status: number;
  body: string;
}

/** TLS for an https GET: a CA and client certificate (PEM), or none checked (a server's self-signed certificate). */
export type HttpTls = { ca: string; cert?: string; key?: string } | { rejectUnauthorized: false };

/**
 * GETs `url` (http or https by its scheme) within `timeoutMs`; resolves with any status, rejects naming the URL and
 * the cause (refused, timed out).
 */
export function httpGet(url: string, opts: { tls?: HttpTls; timeoutMs?: number } = {}): Promise<HttpAnswer> {
  const timeoutMs = opts.timeoutMs ?? 3000;
  const send = new URL(url).protocol === 'https:' ? httpsRequest : httpRequest;
  return new Promise((resolve, reject) => {
    const req = send(url, { ...opts.tls, timeout: timeoutMs }, (r) => {
      let body = '';
      r.on('data', (d: Buffer) => (body += d.toString()));
      r.on('end', () => resolve({ url, status: r.statusCode ?? 0, body }));
      r.on('error', (err) => reject(new Error(`GET ${url}: ${err.message}`, { cause: err })));
    });
    req.on('error', (err) => reject(new Error(`GET ${url}: ${err.message}`, { cause: err })));
    req.on('timeout', () => req.destroy(new Error(`no answer within ${timeoutMs / 1000} s`)));
    req.end();
  });
}
