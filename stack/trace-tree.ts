// Reading traces back from the stack's Jaeger (its query API; no Jaeger UI can be had here) and printing one as an
// indented tree with durations: `npm run stack -- trace <app>`. Spans of the API server that started a trace of
// their own (it does so for callers outside system:masters, keeping the caller's context as a link) are grafted
// under the span they link to, so one tree shows a change from the watcher down to etcd.
import { httpGet } from '../lib/http.ts';

/** A span as Jaeger's query API answers it (GET /api/traces). */
export interface JaegerSpan {
  traceID: string;
  spanID: string;
  operationName: string;
  references?: { refType: 'CHILD_OF' | 'FOLLOWS_FROM'; traceID: string; spanID: string }[];
  /** Microseconds since the epoch, and microseconds long. */
  startTime: number;
  duration: number;
  processID: string;
  tags?: { key: string; value: unknown }[];
}

export interface JaegerTrace {
  traceID: string;
  spans: JaegerSpan[];
  processes: Record<string, { serviceName: string }>;
}

/** One line of the tree: depth, service, span name, offset from the root's start and duration (ms). */
export interface TreeLine {
  depth: number;
  service: string;
  name: string;
  offsetMs: number;
  durationMs: number;
  error: boolean;
}

/**
 * The spans of `root` (and of `linked` traces whose root spans link to one of its spans) as a depth-first tree,
 * children in start order. A span whose parent is missing (not exported yet, or dropped) hangs under the root.
 */
export function traceTree(root: JaegerTrace, linked: JaegerTrace[] = []): TreeLine[] {
  const service = new Map<string, string>();
  const children = new Map<string, JaegerSpan[]>();
  const spans: JaegerSpan[] = [];
  for (const t of [root, ...linked]) {
    for (const s of t.spans) {
      service.set(s.spanID, t.processes[s.processID]?.serviceName ?? '?');
      spans.push(s);
    }
  }
  const ids = new Set(spans.map((s) => s.spanID));
  const parentOf = (s: JaegerSpan): string | undefined => {
    const ref = s.references?.find((r) => r.refType === 'CHILD_OF' && ids.has(r.spanID)) ?? s.references?.find((r) => ids.has(r.spanID));
    return ref?.spanID;
  };
  const tops: JaegerSpan[] = [];
  for (const s of spans) {
    const p = parentOf(s);
    if (p) children.set(p, [...(children.get(p) ?? []), s]);
    else tops.push(s);
  }
  // One root: the earliest span of the trace asked for; other parentless spans of it hang under that root.
  const first = [...tops].filter((s) => s.traceID === root.traceID).sort((a, b) => a.startTime - b.startTime)[0];
  if (!first) return [];
  for (const s of tops) if (s !== first && s.traceID === root.traceID) children.set(first.spanID, [...(children.get(first.spanID) ?? []), s]);
  const lines: TreeLine[] = [];
  const walk = (s: JaegerSpan, depth: number) => {
    lines.push({
      depth, service: service.get(s.spanID) ?? '?', name: s.operationName,
      offsetMs: (s.startTime - first.startTime) / 1000, durationMs: s.duration / 1000,
      error: (s.tags ?? []).some((t) => (t.key === 'error' && t.value === true) || (t.key === 'otel.status_code' && t.value === 'ERROR')),
    });
    for (const c of (children.get(s.spanID) ?? []).sort((a, b) => a.startTime - b.startTime)) walk(c, depth + 1);
  };
  walk(first, 0);
  return lines;
}

/** The tree as text: `+offset  duration  service  name`, indented by depth. */
export function formatTree(lines: TreeLine[]): string {
  const ms = (v: number) => (v >= 1000 ? `${(v / 1000).toFixed(2)} s` : `${v.toFixed(1)} ms`);
  return lines.map((l) => `${`+${ms(l.offsetMs)}`.padStart(10)} ${ms(l.durationMs).padStart(9)}  ${`${'  '.repeat(l.depth)}${l.name}`}  [${l.service}]${l.error ? '  ERROR' : ''}`).join('\n');
}

async function getJson<T>(url: string): Promise<T> {
  const res = await httpGet(url);
  if (res.status !== 200) throw new Error(`GET ${url}: ${res.status} ${res.body.slice(0, 200)}`);
  return JSON.parse(res.body) as T;
}

/** Traces of a service, newest first, filtered by tags (Jaeger's `tags` parameter), within the last `lookbackMs`. */
export async function findTraces(queryUrl: string, q: { service: string; tags?: Record<string, string>; operation?: string; lookbackMs?: number; limit?: number }): Promise<JaegerTrace[]> {
  const end = Date.now() * 1000;
  const params = new URLSearchParams({
    service: q.service, start: String(end - (q.lookbackMs ?? 3_600_000) * 1000), end: String(end), limit: String(q.limit ?? 20),
    ...(q.tags ? { tags: JSON.stringify(q.tags) } : {}), ...(q.operation ? { operation: q.operation } : {}),
  });
  const body = await getJson<{ data: JaegerTrace[] | null }>(`${queryUrl}/api/traces?${params.toString()}`);
  return (body.data ?? []).sort((a, b) => Math.min(...b.spans.map((s) => s.startTime)) - Math.min(...a.spans.map((s) => s.startTime)));
}

/** One trace by id (null when Jaeger has none). */
export async function getTrace(queryUrl: string, traceId: string): Promise<JaegerTrace | null> {
  const res = await httpGet(`${queryUrl}/api/traces/${traceId}`);
  if (res.status === 404) return null;
  if (res.status !== 200) throw new Error(`GET ${queryUrl}/api/traces/${traceId}: ${res.status}`);
  return (JSON.parse(res.body) as { data: JaegerTrace[] }).data[0] ?? null;
}

/** The API server's traces that link to a span of `trace` (started as new roots for a caller it does not trust). */
export async function linkedTraces(queryUrl: string, trace: JaegerTrace): Promise<JaegerTrace[]> {
  const start = Math.min(...trace.spans.map((s) => s.startTime));
  const end = Math.max(...trace.spans.map((s) => s.startTime + s.duration));
  const services = (await getJson<{ data: string[] | null }>(`${queryUrl}/api/services`)).data ?? [];
  const out: JaegerTrace[] = [];
  for (const service of services.filter((s) => s === 'apiserver' || s === 'etcd')) {
    const params = new URLSearchParams({ service, start: String(start - 1000), end: String(end + 1_000_000), limit: '500' });
    const body = await getJson<{ data: JaegerTrace[] | null }>(`${queryUrl}/api/traces?${params.toString()}`);
    for (const t of body.data ?? []) {
      if (t.traceID !== trace.traceID && t.spans.some((s) => s.references?.some((r) => r.traceID === trace.traceID))) out.push(t);
    }
  }
  return out;
}
