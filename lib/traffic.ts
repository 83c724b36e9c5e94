// A load generator for the local stack's data plane: requests through the proxy, each answer attributed to the pod and
// version that served it (the pod server says so in every answer). `npm run stack -- traffic` prints it live; tests
// call sendRequests() and count.
import { Agent, request } from 'node:http';
import { setTimeout as sleep } from 'node:timers/promises';

/** Where requests go: the proxy's base URL (on 127.0.0.0/8), the Host header that picks the route, a path, extra headers. */
export interface TrafficTarget {
  /** e.g. http://127.0.0.1:28080 */
  url: string;
  host?: string | undefined;
  path?: string | undefined;
  headers?: Record<string, string> | undefined;
}

/** One answer: its status (0 when no answer came), who served it, how long it took. */
export interface Answer {
  status: number;
  /** The serving pod's `version` label; undefined when no pod answered (the proxy did: 404, 500, 502...). */
  version?: string;
  pod?: string;
  ms: number;
  error?: string;
}

/** Counts over a set of answers. */
export interface TrafficSummary {
  total: number;
  /** Answers per version; answers no pod gave count under noPod. */
  byVersion: Record<string, number>;
  /** Answers per pod (namespace/name). */
  byPod: Record<string, number>;
  byStatus: Record<string, number>;
  /** 5xx answers and requests that got no answer, over all. */
  errorRate: number;
  p50Ms: number;
  p99Ms: number;
}

/** The byVersion key of answers that no pod gave. */
export const noPod = '(no pod)';

/** The share of `version` in a summary, 0-1. */
export function shareOf(summary: TrafficSummary, version: string): number {
  return summary.total ? (summary.byVersion[version] ?? 0) / summary.total : 0;
}

/** The q-quantile (0-1) of values by nearest rank; 0 for none. */
export function quantile(values: number[], q: number): number {
  if (!values.length) return 0;
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil(q * sorted.length) - 1))]!;
}

/** Counts answers by version, pod and status, with the error rate and latency quantiles. */
export function summarize(answers: Answer[]): TrafficSummary {
  const byVersion: Record<string, number> = {};
  const byPod: Record<string, number> = {};
  const byStatus: Record<string, number> = {};
  let errors = 0;
  for (const a of answers) {
    const v = a.version ?? noPod;
    byVersion[v] = (byVersion[v] ?? 0) + 1;
    if (a.pod) byPod[a.pod] = (byPod[a.pod] ?? 0) + 1;
    byStatus[String(a.status)] = (byStatus[String(a.status)] ?? 0) + 1;
    if (a.status === 0 || a.status >= 500) errors += 1;
  }
  const ms = answers.map((a) => a.ms);
  return {
    total: answers.length, byVersion, byPod, byStatus,
    errorRate: answers.length ? errors / answers.length : 0,
    p50Ms: quantile(ms, 0.5), p99Ms: quantile(ms, 0.99),
  };
}

/** Throws unless the URL names a loopback address: the load generator sends nowhere else. */
export function assertLoopback(url: string): URL {
  const u = new URL(url);
  if (u.protocol !== 'http:') throw new Error(`${url}: only http:// is supported`);
  if (!/^127(\.\d{1,3}){3}$/.test(u.hostname) && u.hostname !== 'localhost') throw new Error(`${url}: traffic goes only to 127.0.0.0/8 (the stack's proxy), not to ${u.hostname}`);
  return u;
}

const agent = new Agent({ keepAlive: true, maxSockets: 256 });

/** Sends one GET and reads who answered from the pod server's headers. */
export function sendOne(target: TrafficTarget, timeoutMs = 10_000): Promise<Answer> {
  const base = assertLoopback(target.url);
  const started = performance.now();
  return new Promise((resolve) => {
    const req = request({
      agent, host: base.hostname, port: base.port || 80, method: 'GET', path: target.path ?? '/', timeout: timeoutMs,
      headers: { ...target.headers, ...(target.host ? { host: target.host } : {}) },
    }, (res) => {
      res.resume();
      res.on('end', () => {
        const version = res.headers['x-version'];
        const pod = res.headers['x-pod-name'];
        const ns = res.headers['x-pod-namespace'];
        resolve({
          status: res.statusCode ?? 0, ms: performance.now() - started,
          ...(typeof version === 'string' ? { version } : {}),
          ...(typeof pod === 'string' ? { pod: `${typeof ns === 'string' ? ns : ''}/${pod}` } : {}),
        });
      });
    });
    req.on('timeout', () => req.destroy(new Error(`no answer within ${timeoutMs} ms`)));
    req.on('error', (err) => resolve({ status: 0, ms: performance.now() - started, error: err.message }));
    req.end();
  });
}

export interface SendOptions {
  /** Stop after this many requests. */
  count?: number;
  /** Requests per second, started on a fixed schedule whatever the answers take; without it, as fast as `concurrency` allows. */
  rps?: number;
  /** Stop after this long. */
  durationMs?: number;
  /** Requests in flight at most (default 16 without rps, 256 with). */
  concurrency?: number;
  signal?: AbortSignal;
  onAnswer?: (a: Answer) => void;
}

/** Sends requests until count, duration or the signal ends it; resolves with every answer once all are in. */
export async function sendRequests(target: TrafficTarget, opts: SendOptions): Promise<Answer[]> {
  assertLoopback(target.url);
  if (opts.count === undefined && opts.durationMs === undefined && !opts.signal) throw new Error('sendRequests needs a count, a duration or a signal to stop');
  if (opts.rps !== undefined && !(opts.rps > 0)) throw new Error(`rps must be above 0, not ${opts.rps}`);
  const limit = opts.concurrency ?? (opts.rps ? 256 : 16);
  const answers: Answer[] = [];
  const inFlight = new Set<Promise<void>>();
  const started = performance.now();
  // On a schedule the duration counts scheduled starts (rps x duration requests); without one, the time elapsed.
  const elapsed = (sent: number) => (opts.rps ? (sent * 1000) / opts.rps : performance.now() - started);
  const more = (sent: number) => (opts.count === undefined || sent < opts.count)
    && (opts.durationMs === undefined || elapsed(sent) < opts.durationMs)
    && !opts.signal?.aborted;
  for (let sent = 0; more(sent); sent++) {
    if (opts.rps) {
      const due = started + (sent * 1000) / opts.rps;
      const wait = due - performance.now();
      if (wait > 0) await sleep(wait);
      if (!more(sent)) break;
    }
    while (inFlight.size >= limit) await Promise.race(inFlight);
    const p: Promise<void> = sendOne(target).then((a) => {
      answers.push(a);
      opts.onAnswer?.(a);
    }).finally(() => inFlight.delete(p));
    inFlight.add(p);
  }
  await Promise.all(inFlight);
  return answers;
}
