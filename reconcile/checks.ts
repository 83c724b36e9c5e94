// Pure decisions of a rollout's checks (spec.serviceMesh.canary.checks): which hosts the operator may call, what a
// check sends (its request, a Job's environment), and what an answer or a Job's end says, in one line for status,
// Events and the workflow's history. The activities in activities/checks.ts do the I/O around these.
import { BlockList, isIP } from 'node:net';
import type { CheckPhase } from '../api/constants.ts';
import type { Check, HttpCheck } from '../api/application.ts';

/** What a check is told about the rollout that runs it: an HTTP check's JSON body, a Job check's environment. */
export interface CheckContext {
  /** The Application's name. */
  application: string;
  namespace: string;
  /** The new version (canaryVersion) and its image. */
  version: string;
  image: string;
  /** The check's phase, or `step` when a step runs it. */
  phase: CheckPhase | 'step';
  /** The step's index (0-based) when a step runs it. */
  step?: number;
  /** The canary's share of traffic (percent) when the check runs. */
  weight?: number;
}

/** The checks that run by themselves at `phase`, in the order the spec lists them. */
export function checksAt(checks: readonly Check[] | undefined, phase: CheckPhase): Check[] {
  return (checks ?? []).filter((c) => c.phase === phase);
}

/** The check a step names; undefined only for a spec neither the CRD nor the model would accept. */
export function checkNamed(checks: readonly Check[] | undefined, name: string): Check | undefined {
  return (checks ?? []).find((c) => c.name === name);
}

/** The pause between a failed attempt of an HTTP check and the next (activities/checks.ts). */
export const RETRY_DELAY_MS = 1000;

/**
 * The longest one runHttpCheck call can take: every attempt timing out, with the pauses between them (a confirm
 * check makes one attempt a call). A workflow's start-to-close timeout for the call should be above it.
 */
export function httpCheckMaxMs(http: Pick<HttpCheck, 'timeoutSeconds' | 'retries' | 'confirm'>): number {
  const attempts = http.confirm ? 1 : 1 + http.retries;
  return attempts * http.timeoutSeconds * 1000 + (attempts - 1) * RETRY_DELAY_MS;
}

// ---- The allowlist of hosts (--check-allowed-hosts) ----

/** One entry of --check-allowed-hosts: a host name, IP address or `*.suffix`, with or without a port, or an IP range. */
export interface HostPattern {
  /** Lowercase; for a wildcard, the suffix after `*.`; an IPv6 address in brackets, as URLs write it; a range's address. */
  host: string;
  wildcard: boolean;
  /** Only this port (the URL's, or its scheme's default); absent: any port. */
  port?: number;
  /** A CIDR range's prefix length (host is its address): it allows URLs whose host is an IP address in the range. */
  prefix?: number;
}

const HOST_LABEL = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?$/;
const IPV6 = /^\[[0-9a-f:.]+\]$/;

/** `address/prefix`, IPv4 or IPv6, or null. */
function parseCidr(entry: string): HostPattern | null {
  const m = /^([0-9a-f:.]+)\/(\d{1,3})$/.exec(entry);
  if (!m) return null;
  const [, address = '', prefixText = ''] = m;
  const family = isIP(address);
  const prefix = Number(prefixText);
  if (family === 0 || prefix > (family === 4 ? 32 : 128)) return null;
  return { host: address, wildcard: false, prefix };
}

/**
 * Parses --check-allowed-hosts: comma-separated host names, IP addresses or `*.suffix` globs, each optionally with
 * `:port`, or CIDR ranges such as 127.0.0.0/8. Throws, naming the entry, on anything else (a URL, a path, a bare
 * `*`), so a typo fails at start instead of refusing every check at run time. An empty list allows every host.
 */
export function parseHostAllowlist(list: string): HostPattern[] {
  return list.split(',').map((s) => s.trim()).filter(Boolean).map((entry) => {
    const lower = entry.toLowerCase();
    if (lower.includes('/')) {
      const cidr = parseCidr(lower);
      if (cidr) return cidr;
    }
    const m = /^(\[[^\]]*\]|[^:/]*)(?::(\d{1,5}))?$/.exec(lower);
    const [host = '', portText] = m ? [m[1], m[2]] : [];
    const port = portText === undefined ? undefined : Number(portText);
    const wildcard = host.startsWith('*.');
    const name = wildcard ? host.slice(2) : host;
    const validName = IPV6.test(name) ? !wildcard : name.split('.').every((label) => HOST_LABEL.test(label));
    if (!m || !validName || (port !== undefined && (port < 1 || port > 65535))) {
      throw new Error(`--check-allowed-hosts: ${JSON.stringify(entry)} is not a host name, an IP address, *.suffix or a CIDR range, with an optional :port`);
    }
    return { host: name, wildcard, ...(port === undefined ? {} : { port }) };
  });
}

/** An entry as the operator's flag spells it. */
export function describeHostPattern(p: HostPattern): string {
  if (p.prefix !== undefined) return `${p.host}/${p.prefix}`;
  return `${p.wildcard ? '*.' : ''}${p.host}${p.port === undefined ? '' : `:${p.port}`}`;
}

/** The port a request to `url` goes to. */
function portOf(url: URL): number {
  if (url.port) return Number(url.port);
  return url.protocol === 'https:' ? 443 : 80;
}

/** Whether `address` (an IP address, IPv6 in brackets or not) is in the range `p`. */
function inRange(p: HostPattern & { prefix: number }, address: string): boolean {
  const bare = address.replace(/^\[|\]$/g, '');
  const family = isIP(bare);
  if (family === 0 || family !== isIP(p.host)) return false;
  const range = new BlockList();
  const type = family === 4 ? 'ipv4' : 'ipv6';
  range.addSubnet(p.host, p.prefix, type);
  return range.check(bare, type);
}

/**
 * Whether one entry allows a request to `url`: the same host, a host under the suffix of a `*.` entry, or an IP
 * address in a range (a name is not resolved: a range allows only URLs that name an address); and the port, when
 * the entry names one.
 */
export function hostMatches(p: HostPattern, url: URL): boolean {
  const host = url.hostname.toLowerCase().replace(/\.$/, '');
  if (p.prefix !== undefined) return inRange({ ...p, prefix: p.prefix }, host);
  const hostOk = p.wildcard ? host.endsWith(`.${p.host}`) : host === p.host;
  return hostOk && (p.port === undefined || p.port === portOf(url));
}

/**
 * Why the operator must not call `url` (`what` says who asked, e.g. `check smoke calls http://...`), or null when
 * the allowlist allows it. An empty allowlist allows everything, as Argo Rollouts and Flagger do.
 */
export function hostRefusal(allowlist: readonly HostPattern[], url: string, what: string): string | null {
  if (allowlist.length === 0) return null;
  let parsed: URL;
  try {
    parsed = new URL(url);
  } catch {
    return `refused: ${JSON.stringify(url)} is no URL the operator could check against --check-allowed-hosts: ${what}`;
  }
  if (allowlist.some((p) => hostMatches(p, parsed))) return null;
  return `refused: host ${parsed.host} not in --check-allowed-hosts (${allowlist.map(describeHostPattern).join(', ')}): ${what}`;
}

// ---- HTTP checks ----

/** A URL for messages: scheme, host and path, without credentials or a query that may carry a token. */
export function describeUrl(url: string): string {
  try {
    const u = new URL(url);
    return `${u.origin}${u.pathname}`;
  } catch {
    return url;
  }
}

/** The JSON body of a POST check: the context and the check's name, always the same fields (null where there is no step or weight). */
export function checkPayload(check: string, context: CheckContext): Record<string, string | number | null> {
  return {
    application: context.application,
    namespace: context.namespace,
    version: context.version,
    image: context.image,
    phase: context.phase,
    check,
    step: context.step ?? null,
    weight: context.weight ?? null,
  };
}

export interface HttpCheckRequest {
  method: 'GET' | 'POST';
  headers: Record<string, string>;
  /** POST only: the rollout's context as JSON. */
  body?: string;
}

/** What one attempt of an HTTP check sends: the spec's method and headers; with POST, the context as JSON. */
export function httpCheckRequest(check: string, http: Pick<HttpCheck, 'method' | 'headers'>, context: CheckContext): HttpCheckRequest {
  const base = { 'user-agent': 'application-operator' };
  if (http.method === 'GET') return { method: 'GET', headers: { ...base, ...http.headers } };
  return {
    method: 'POST',
    headers: { ...base, 'content-type': 'application/json', ...http.headers },
    body: JSON.stringify(checkPayload(check, context)),
  };
}

/** How much of an answer's body a message quotes. */
export const QUOTED_BODY_CHARS = 200;

/** The start of a body, on one line, as a message quotes it ('' for an empty one). */
export function quoteBody(body: string): string {
  const line = body.replace(/\s+/g, ' ').trim();
  return line.length > QUOTED_BODY_CHARS ? `${line.slice(0, QUOTED_BODY_CHARS)}…` : line;
}

/** A duration in a message: `500 ms`, `10 s`, `1.5 s`. */
export function formatMs(ms: number): string {
  return ms < 1000 ? `${Math.round(ms)} ms` : `${Math.round(ms / 100) / 10} s`;
}

/** What an answer means: 2xx passes; anything else (a redirect too: they are not followed) fails, quoting the body. */
export function httpAnswer(url: string, status: number, body: string, location?: string | null): { ok: boolean; message: string } {
  const quoted = quoteBody(body);
  const head = `HTTP ${status} from ${describeUrl(url)}`;
  if (status >= 300 && status < 400) return { ok: false, message: `${head}: redirects are not followed${location ? ` (to ${describeUrl(location)})` : ''}` };
  return { ok: status >= 200 && status < 300, message: quoted ? `${head}: ${quoted}` : head };
}

/** What an attempt that got no answer says: the timeout, or why the host could not be reached. */
export function httpNoAnswer(url: string, timeoutMs: number, err: unknown): string {
  if (err instanceof Error && (err.name === 'TimeoutError' || err.name === 'AbortError')) return `timed out after ${formatMs(timeoutMs)} waiting for ${describeUrl(url)}`;
  const cause = (err as { cause?: { code?: string; message?: string } } | undefined)?.cause;
  const why = cause?.code ?? cause?.message ?? (err instanceof Error ? err.message : String(err));
  return `could not reach ${describeUrl(url)}: ${why}`;
}

// ---- Job checks ----

/** The environment a Job check's containers get: the context, one ROLLOUT_* variable per field. */
export function checkEnv(check: string, context: CheckContext): { name: string; value: string }[] {
  return Object.entries(checkPayload(check, context)).filter(([, value]) => value !== null).map(([key, value]) => ({
    name: `ROLLOUT_${key.toUpperCase()}`,
    value: String(value),
  }));
}

/** What observeJobCheck reads of a Job. */
export interface ObservedJob {
  metadata: { name: string };
  spec?: { activeDeadlineSeconds?: number };
  status?: {
    conditions?: { type: string; status: string; reason?: string; message?: string }[];
    active?: number;
    startTime?: string;
    completionTime?: string;
  };
}

/** What observeJobCheck reads of a Job's pods. */
export interface ObservedCheckPod {
  metadata: { name: string; creationTimestamp?: string };
  status?: {
    phase?: string;
    conditions?: { type: string; status: string; reason?: string; message?: string }[];
    containerStatuses?: {
      name: string;
      state?: {
        waiting?: { reason?: string; message?: string };
        terminated?: { exitCode?: number; reason?: string; message?: string; finishedAt?: string };
      };
    }[];
  };
}

export type JobCheckState = 'running' | 'succeeded' | 'failed';

/** How much of a failed container's termination message (or log tail) a message quotes, from its end. */
export const QUOTED_TAIL_CHARS = 240;

/** The end of a termination message on one line: its last lines joined by ' / ', cut from the front. */
export function messageTail(text: string): string {
  const line = text.split('\n').map((l) => l.trim()).filter(Boolean).join(' / ');
  return line.length > QUOTED_TAIL_CHARS ? `…${line.slice(-QUOTED_TAIL_CHARS)}` : line;
}

/** The first container that failed in a Job's pods (newest pod first), in words: pod, container, reason, exit code, message tail. */
function failedContainer(pods: readonly ObservedCheckPod[]): string | undefined {
  const newestFirst = [...pods].sort((a, b) => (b.metadata.creationTimestamp ?? '').localeCompare(a.metadata.creationTimestamp ?? ''));
  for (const pod of newestFirst) {
    for (const c of pod.status?.containerStatuses ?? []) {
      const t = c.state?.terminated;
      if (!t || t.exitCode === 0) continue;
      const tail = t.message ? messageTail(t.message) : '';
      return `pod ${pod.metadata.name}: container ${c.name}: ${t.reason ?? 'Error'} (exit code ${t.exitCode ?? '?'})${tail ? `: ${tail}` : ''}`;
    }
  }
  return undefined;
}

/** What keeps a Job's pod from running (a waiting reason other than starting up, or no node), in words. */
function stuckPod(pods: readonly ObservedCheckPod[]): string | undefined {
  for (const pod of pods) {
    for (const c of pod.status?.containerStatuses ?? []) {
      const w = c.state?.waiting;
      if (w?.reason && w.reason !== 'ContainerCreating' && w.reason !== 'PodInitializing') {
        return `pod ${pod.metadata.name}: container ${c.name}: ${w.reason}${w.message ? `: ${w.message}` : ''}`;
      }
    }
    const unscheduled = pod.status?.conditions?.find((c) => c.type === 'PodScheduled' && c.status === 'False');
    if (unscheduled) return `pod ${pod.metadata.name}: ${unscheduled.reason ?? 'Unschedulable'}: ${unscheduled.message ?? 'cannot be scheduled'}`;
  }
  return undefined;
}

const conditionTrue = (job: ObservedJob, ...types: string[]) => job.status?.conditions?.find((c) => types.includes(c.type) && c.status === 'True');

/**
 * Where a Job check stands, from its Job and pods: succeeded or failed once the Job controller says so (the early
 * SuccessCriteriaMet and FailureTarget count, as the end is then decided), else running. A failure names the Job's
 * reason (BackoffLimitExceeded, DeadlineExceeded: its timeout) and the failed container with the tail of its
 * termination message; a Job that is gone has failed.
 */
export function jobCheckOutcome(jobName: string, job: ObservedJob | null, pods: readonly ObservedCheckPod[]): { state: JobCheckState; message: string } {
  if (!job) return { state: 'failed', message: `Job ${jobName} is gone: it was deleted before it finished` };
  const took = job.status?.startTime && job.status.completionTime
    ? ` in ${formatMs(Date.parse(job.status.completionTime) - Date.parse(job.status.startTime))}` : '';
  if (conditionTrue(job, 'Complete', 'SuccessCriteriaMet')) return { state: 'succeeded', message: `Job ${jobName} succeeded${took}` };
  const failed = conditionTrue(job, 'Failed', 'FailureTarget');
  const container = failedContainer(pods);
  if (failed) {
    const deadline = job.spec?.activeDeadlineSeconds;
    const why = failed.reason === 'DeadlineExceeded'
      ? `timed out: it ran longer than its ${deadline === undefined ? '' : `${deadline} s `}deadline (DeadlineExceeded)`
      : `failed: ${failed.reason ?? 'Failed'}${failed.message ? `: ${failed.message}` : ''}`;
    return { state: 'failed', message: `Job ${jobName} ${why}${container ? `; ${container}` : ''}` };
  }
  const detail = stuckPod(pods) ?? container;
  const active = job.status?.active ?? 0;
  return { state: 'running', message: `Job ${jobName} running${detail ? `: ${detail}` : active ? `: ${active} pod${active === 1 ? '' : 's'} active` : ': waiting for its pod'}` };
}
