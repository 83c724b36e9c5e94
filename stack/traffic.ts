// `npm run stack -- traffic <app> -n <ns> --rps N`: requests through the stack's proxy to an app, addressed the way its
// HTTPRoute expects (the route's hostname as the Host header, its path), with the share answered by each version,
// the error rate and latency printed every second and summed up at the end.
import { noPod, sendRequests, summarize, type Answer, type TrafficSummary, type TrafficTarget } from '../lib/traffic.ts';
import { kubectl, type StackInfo } from './stack.ts';

interface HttpRouteLike {
  metadata: { name: string; labels?: Record<string, string> };
  spec?: {
    hostnames?: string[];
    rules?: { matches?: { path?: { type?: string; value?: string }; headers?: unknown[] }[] }[];
  };
}

/** The stable pods' version label (api/ STABLE_VERSION); any other version is a canary. */
const stableVersion = 'stable';

/**
 * How to address `app` through its HTTPRoute: the route named after the app, else the one labelled with it; the
 * first hostname (a wildcard's `*` made concrete) and the path of the first rule matching no header (the one that
 * carries the weights). Throws naming what was found when no single route fits.
 */
export function routeTarget(routes: HttpRouteLike[], app: string): { route: string; host?: string; path: string } {
  const named = routes.filter((r) => r.metadata.name === app);
  const labelled = routes.filter((r) => r.metadata.labels?.['app.kubernetes.io/name'] === app);
  const candidates = named.length ? named : labelled;
  if (candidates.length !== 1) {
    const seen = routes.map((r) => r.metadata.name).join(', ') || 'none';
    throw new Error(candidates.length
      ? `several HTTPRoutes are labelled app.kubernetes.io/name=${app} (${candidates.map((r) => r.metadata.name).join(', ')}); pass --host and --path`
      : `no HTTPRoute named ${app} or labelled app.kubernetes.io/name=${app} (HTTPRoutes here: ${seen}); pass --host to send anyway`);
  }
  const route = candidates[0]!;
  const hostname = route.spec?.hostnames?.[0]?.replace(/^\*\./, 'traffic.');
  const matches = (route.spec?.rules ?? []).flatMap((r) => r.matches ?? []);
  const plain = matches.find((m) => !m.headers?.length) ?? matches[0];
  const path = plain?.path?.value && plain.path.type !== 'RegularExpression' ? plain.path.value : '/';
  return { route: route.metadata.name, ...(hostname ? { host: hostname } : {}), path };
}

/** One line of shares: each version's percent (stable first), the error rate and latency. */
export function formatSummary(s: TrafficSummary): string {
  const versions = Object.keys(s.byVersion).sort((a, b) => rank(a) - rank(b) || a.localeCompare(b));
  const shares = versions.map((v) => `${v === stableVersion || v === noPod ? v : `${v} (canary)`} ${pct(s.byVersion[v]! / s.total)}`).join('  ');
  return `${String(s.total).padStart(6)} req  ${shares || '-'}  errors ${pct(s.errorRate)}  p50 ${s.p50Ms.toFixed(0)} ms  p99 ${s.p99Ms.toFixed(0)} ms`;
}

const rank = (v: string) => (v === stableVersion ? 0 : v === noPod ? 2 : 1);
const pct = (x: number) => `${(100 * x).toFixed(1)}%`;

export interface TrafficOptions {
  app: string;
  namespace: string;
  rps: number;
  durationSeconds?: number;
  headers: Record<string, string>;
  host?: string;
  path?: string;
}

/** Sends the requests, printing each second's shares, and returns the summary of all. */
export async function runTraffic(info: StackInfo, opts: TrafficOptions, print: (l: string) => void): Promise<TrafficSummary> {
  const dp = info.dataPlane;
  if (!dp) throw new Error(`the stack in ${info.stateDir} has no data plane; start one with: npm run stack -- up --data-plane`);
  let host = opts.host;
  let path = opts.path;
  if (host === undefined || path === undefined) {
    const list = JSON.parse(await kubectl(info, ['get', 'httproutes.gateway.networking.k8s.io', '-n', opts.namespace, '-o', 'json'])) as { items: HttpRouteLike[] };
    try {
      const found = routeTarget(list.items, opts.app);
      host ??= found.host;
      path ??= found.path;
      print(`HTTPRoute ${opts.namespace}/${found.route}: Host ${host ?? '(any)'}, path ${path}`);
    } catch (err) {
      if (host === undefined) throw err;
    }
  }
  const target: TrafficTarget = { url: dp.gatewayUrl, host, path: path ?? '/', headers: opts.headers };
  print(`sending ${opts.rps} req/s to ${dp.gatewayUrl}${target.path}${opts.durationSeconds ? ` for ${opts.durationSeconds} s` : ' (Ctrl-C to stop)'}`);
  const stop = new AbortController();
  const onSignal = () => stop.abort();
  process.once('SIGINT', onSignal);
  let window: Answer[] = [];
  const started = Date.now();
  const ticker = setInterval(() => {
    const s = summarize(window);
    window = [];
    print(`${String(Math.round((Date.now() - started) / 1000)).padStart(4)} s ${formatSummary(s)}`);
  }, 1000);
  try {
    const answers = await sendRequests(target, {
      rps: opts.rps, signal: stop.signal, onAnswer: (a) => window.push(a),
      ...(opts.durationSeconds ? { durationMs: opts.durationSeconds * 1000 } : {}),
    });
    const summary = summarize(answers);
    print(`total  ${formatSummary(summary)}`);
    const statuses = Object.entries(summary.byStatus).map(([k, v]) => `${k === '0' ? 'no answer' : k}: ${v}`).join(', ');
    print(`statuses: ${statuses || '-'}`);
    return summary;
  } finally {
    clearInterval(ticker);
    process.off('SIGINT', onSignal);
  }
}
