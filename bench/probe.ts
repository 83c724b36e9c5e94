// Loaded into each operator process the benchmark starts (`node --import bench/probe.ts ...`): counts every
// Kubernetes request the process makes, by the API server's verb (GET, LIST, WATCH, POST, PUT, PATCH, APPLY, DELETE,
// dry-run marked) and resource, and writes the counts to $BENCH_PROBE_FILE a few times a second and at exit.
// The API server's own metrics count every client (controllers, scheduler, kwok); this file is what the operator did.
// It wraps node:http(s).request (our JSON client, informer lists) and undici's fetch (the informers' watches); it
// changes nothing about the requests themselves.
import { renameSync, writeFileSync } from 'node:fs';
import http from 'node:http';
import https from 'node:https';
import { createRequire, syncBuiltinESMExports } from 'node:module';

const file = process.env['BENCH_PROBE_FILE'];

/** How often the counts are written: a reader sees every request made more than this long ago. */
export const probeFlushMs = 250;

type Counts = Record<string, number>;
const counts: Counts = {};
let dirty = true;

function resourceOf(pathname: string): { resource: string; named: boolean } | null {
  const parts = pathname.split('/').filter(Boolean);
  let rest: string[];
  if (parts[0] === 'api' && parts.length >= 2) rest = parts.slice(2);
  else if (parts[0] === 'apis' && parts.length >= 3) rest = [`${parts[1]}:`, ...parts.slice(3)];
  else return null;
  let group = '';
  if (rest[0]?.endsWith(':')) group = `${rest.shift()!.slice(0, -1)}/`;
  if (rest[0] === 'namespaces' && rest.length >= 3) rest = rest.slice(2);
  const [plural, name, sub] = rest;
  if (!plural) return null;
  return { resource: `${group}${plural}${sub ? `/${sub}` : ''}`, named: name !== undefined };
}

function record(method: string, url: URL, contentType: string | undefined): void {
  const r = resourceOf(url.pathname);
  if (!r) return;
  let verb = method.toUpperCase();
  if (verb === 'GET' && !r.named) verb = url.searchParams.get('watch') === 'true' || url.searchParams.get('watch') === '1' ? 'WATCH' : 'LIST';
  if (verb === 'PATCH' && contentType?.startsWith('application/apply-patch')) verb = 'APPLY';
  if (url.searchParams.get('dryRun')) verb += ' dry-run';
  const key = `${verb} ${r.resource}`;
  counts[key] = (counts[key] ?? 0) + 1;
  dirty = true;
}

function headerOf(headers: unknown, name: string): string | undefined {
  if (!headers || typeof headers !== 'object') return undefined;
  if (typeof (headers as { get?: unknown }).get === 'function') return (headers as Headers).get(name) ?? undefined;
  for (const [k, v] of Object.entries(headers as Record<string, unknown>)) if (k.toLowerCase() === name.toLowerCase()) return String(v);
  return undefined;
}

function wrapRequest(mod: typeof https | typeof http, scheme: string): void {
  const original = mod.request.bind(mod) as (...args: unknown[]) => http.ClientRequest;
  (mod as { request: unknown }).request = (...args: unknown[]): http.ClientRequest => {
    try {
      const a = args[0] as string | URL | http.RequestOptions | undefined;
      const b = args[1] as http.RequestOptions | (() => void) | undefined;
      let url: URL | undefined;
      let opts: http.RequestOptions = {};
      if (typeof a === 'string' || a instanceof URL) {
        url = new URL(a);
        if (b && typeof b === 'object') opts = b;
      } else if (a && typeof a === 'object') {
        opts = a;
        url = new URL(opts.path ?? '/', `${scheme}://${opts.hostname ?? opts.host ?? 'localhost'}`);
      }
      if (url) record(opts.method ?? 'GET', url, headerOf(opts.headers, 'content-type'));
    } catch {
      // counting must never break a request
    }
    return original(...args);
  };
}

function wrapUndici(): void {
  try {
    // Resolved from @kubernetes/client-node, whose watches use it: the same module instance they import.
    const require = createRequire(createRequire(import.meta.url).resolve('@kubernetes/client-node'));
    const undici = require('undici') as { fetch: (input: unknown, init?: { method?: string; headers?: unknown }) => Promise<unknown> };
    const original = undici.fetch;
    undici.fetch = (input: unknown, init?: { method?: string; headers?: unknown }) => {
      try {
        const url = new URL(input instanceof URL ? input.href : typeof input === 'string' ? input : String((input as { url?: string }).url));
        record(init?.method ?? 'GET', url, headerOf(init?.headers, 'content-type'));
      } catch {
        // counting must never break a request
      }
      return original(input, init);
    };
  } catch {
    // no undici: watches are then only seen in the API server's metrics
  }
}

function flush(): void {
  if (!file || !dirty) return;
  dirty = false;
  const tmp = `${file}.tmp`;
  writeFileSync(tmp, JSON.stringify({ pid: process.pid, at: Date.now(), counts }));
  renameSync(tmp, file);
}

if (file) {
  wrapRequest(https, 'https');
  wrapRequest(http, 'http');
  syncBuiltinESMExports();
  wrapUndici();
  flush();
  setInterval(flush, probeFlushMs).unref();
  process.on('exit', flush);
}
