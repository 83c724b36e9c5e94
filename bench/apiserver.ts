// The benchmark's own view of the API server: its /metrics (apiserver_request_total), and cheap lists served from
// the watch cache (resourceVersion=0), with the admin client certificate of the bench's stack.
import { readFile } from 'node:fs/promises';
import { Agent, request } from 'node:https';
import { join } from 'node:path';
import type { StackInfo } from '../stack/stack.ts';

/** apiserver_request_total by (verb, dry_run, group, resource, subresource), summed over codes and scopes. */
export type RequestCounts = Map<string, number>;

const WRITE_VERBS = new Set(['POST', 'PUT', 'PATCH', 'APPLY', 'DELETE', 'DELETECOLLECTION', 'CREATE', 'UPDATE']);

export function isWrite(verb: string): boolean {
  return WRITE_VERBS.has(verb.replace(/ dry-run$/, ''));
}

export class ApiServer {
  /** Requests this client made, by verb (so the benchmark can subtract its own load). */
  readonly requests: Record<string, number> = {};
  private readonly base: string;
  private readonly agent: Agent;

  private constructor(base: string, agent: Agent) {
    this.base = base;
    this.agent = agent;
  }

  static async connect(info: StackInfo): Promise<ApiServer> {
    const pki = join(info.stateDir, 'pki');
    const [ca, cert, key] = await Promise.all(['ca.crt', 'admin.crt', 'admin.key'].map((f) => readFile(join(pki, f), 'utf8')));
    return new ApiServer(info.apiserverUrl, new Agent({ ca, cert, key, keepAlive: true, maxSockets: 8 }));
  }

  close(): void {
    this.agent.destroy();
  }

  /** Counts a request the benchmark made with another client (by the API server's verb: POST, APPLY, PATCH...). */
  count(verb: string, n = 1): void {
    this.requests[verb] = (this.requests[verb] ?? 0) + n;
  }

  /** One GET; resolves with the body text, rejects on a non-2xx answer. */
  get(path: string, accept = 'application/json', countAs = 'GET'): Promise<string> {
    this.requests[countAs] = (this.requests[countAs] ?? 0) + 1;
    const url = new URL(path, this.base);
    return new Promise((resolve, reject) => {
      const req = request(url, { agent: this.agent, headers: { Accept: accept }, timeout: 120_000 }, (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (c: Buffer) => chunks.push(c));
        res.on('end', () => {
          const body = Buffer.concat(chunks).toString('utf8');
          if ((res.statusCode ?? 0) >= 200 && (res.statusCode ?? 0) < 300) resolve(body);
          else reject(Object.assign(new Error(`GET ${url.pathname}: ${res.statusCode} ${body.slice(0, 300)}`), { status: res.statusCode }));
        });
        res.on('error', reject);
      });
      req.on('timeout', () => req.destroy(new Error(`GET ${url.pathname}: timed out`)));
      req.on('error', reject);
      req.end();
    });
  }

  /** A list from the watch cache (resourceVersion=0, the cheapest read of a collection), or a consistent one when asked. */
  async list<T = any>(collection: string, opts: { labelSelector?: string; metadataOnly?: boolean; consistent?: boolean } = {}): Promise<T[]> {
    const q = new URLSearchParams(opts.consistent ? {} : { resourceVersion: '0' });
    if (opts.labelSelector) q.set('labelSelector', opts.labelSelector);
    const accept = opts.metadataOnly ? 'application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json' : 'application/json';
    const body = await this.get(`${collection}?${q.toString()}`, accept, 'LIST');
    return (JSON.parse(body) as { items?: T[] }).items ?? [];
  }

  /** apiserver_request_total, summed by verb, dry-run, group, resource and subresource. */
  async requestCounts(): Promise<RequestCounts> {
    const text = await this.get('/metrics', 'text/plain', 'GET');
    return parseRequestTotals(text);
  }
}

const LABEL = /(\w+)="((?:[^"\\]|\\.)*)"/g;

export function parseRequestTotals(text: string): RequestCounts {
  const out: RequestCounts = new Map();
  for (const line of text.split('\n')) {
    if (!line.startsWith('apiserver_request_total{')) continue;
    const close = line.lastIndexOf('}');
    const labels: Record<string, string> = {};
    for (const m of line.slice('apiserver_request_total{'.length, close).matchAll(LABEL)) labels[m[1]!] = m[2]!;
    const value = Number(line.slice(close + 1).trim());
    if (!Number.isFinite(value)) continue;
    const key = [labels['verb'] ?? '?', labels['dry_run'] ?? '', labels['group'] ?? '', labels['resource'] ?? '', labels['subresource'] ?? ''].join('|');
    out.set(key, (out.get(key) ?? 0) + value);
  }
  return out;
}

/** after - before, key by key. */
export function delta(after: RequestCounts, before: RequestCounts): RequestCounts {
  const out: RequestCounts = new Map();
  for (const [k, v] of after) {
    const d = v - (before.get(k) ?? 0);
    if (d > 0) out.set(k, d);
  }
  return out;
}

/** A delta folded by verb; dry-run requests are their own verb ("APPLY dry-run"). */
export function byVerb(counts: RequestCounts): Record<string, number> {
  const out: Record<string, number> = {};
  for (const [k, v] of counts) {
    const [verb, dryRun] = k.split('|');
    const name = dryRun ? `${verb} dry-run` : verb!;
    out[name] = (out[name] ?? 0) + v;
  }
  return out;
}

/** A delta folded by "VERB group/resource[/subresource]", largest first (for the JSON and the bottleneck notes). */
export function byResource(counts: RequestCounts, limit = 40): Record<string, number> {
  const out: Record<string, number> = {};
  for (const [k, v] of counts) {
    const [verb, dryRun, group, resource, sub] = k.split('|');
    const name = `${verb}${dryRun ? ' dry-run' : ''} ${group ? `${group}/` : ''}${resource}${sub ? `/${sub}` : ''}`;
    out[name] = (out[name] ?? 0) + v;
  }
  return Object.fromEntries(Object.entries(out).sort((a, b) => b[1] - a[1]).slice(0, limit));
}

/** Subtracts a client's own requests (by verb) from a by-verb delta, never below zero. */
export function minus(a: Record<string, number>, b: Record<string, number>): Record<string, number> {
  const out: Record<string, number> = { ...a };
  for (const [k, v] of Object.entries(b)) if (out[k] !== undefined) out[k] = Math.max(0, out[k] - v);
  return out;
}

/** The difference of two by-verb counters taken from the same client at two moments. */
export function counterDelta(after: Record<string, number>, before: Record<string, number>): Record<string, number> {
  const out: Record<string, number> = {};
  for (const [k, v] of Object.entries(after)) {
    const d = v - (before[k] ?? 0);
    if (d !== 0) out[k] = d;
  }
  return out;
}

export function sum(rec: Record<string, number>, pick: (k: string) => boolean = () => true): number {
  return Object.entries(rec).filter(([k]) => pick(k)).reduce((n, [, v]) => n + v, 0);
}
