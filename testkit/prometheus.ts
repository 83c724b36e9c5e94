// The stack's Prometheus as the monitoring tests use it: its query API, its own PromQL parser (/api/v1/parse_query)
// to find the metric names an expression reads, and rule files loaded into it (rule_files, then a reload), so the
// rules are evaluated and their alerts fire as they would in production.
import { mkdir, readFile, rm } from 'node:fs/promises';
import { join } from 'node:path';
import { parse, stringify } from 'yaml';
import { writeWhole } from '../lib/files.ts';
import { eventually } from '../lib/poll.ts';
import type { StackInfo } from '../stack/stack.ts';

type Labels = Record<string, string>;
export interface Sample { metric: Labels; value: [number, string] }

interface ApiAnswer<T> { status: string; data?: T; error?: string; errorType?: string }

async function api<T>(prometheusUrl: string, path: string, params: Record<string, string | string[]> = {}): Promise<T> {
  const search = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) for (const one of [v].flat()) search.append(k, one);
  const res = await fetch(`${prometheusUrl}${path}?${search.toString()}`);
  const body = await res.json() as ApiAnswer<T>;
  if (body.status !== 'success' || body.data === undefined) throw new Error(`${path} ${JSON.stringify(params)}: HTTP ${res.status} ${body.errorType ?? ''} ${body.error ?? JSON.stringify(body)}`);
  return body.data;
}

/** An instant query; throws with Prometheus's message on a parse or evaluation error. A scalar comes back as one sample without labels. */
export async function query(prometheusUrl: string, promql: string): Promise<Sample[]> {
  const data = await api<{ resultType: string; result: unknown }>(prometheusUrl, '/api/v1/query', { query: promql });
  if (data.resultType === 'vector') return data.result as Sample[];
  if (data.resultType === 'scalar') return [{ metric: {}, value: data.result as [number, string] }];
  throw new Error(`query ${promql}: a ${data.resultType}, not an instant vector or a scalar`);
}

interface AstNode { type?: string; name?: string; matchers?: { name: string; type: string; value: string }[]; [key: string]: unknown }

/**
 * The metric names an expression reads, from Prometheus's own parser (a parse error throws with its message). A
 * selector that picks names by a regular expression, or none, cannot be checked and is an error too.
 */
export async function metricNames(prometheusUrl: string, promql: string): Promise<string[]> {
  const ast = await api<AstNode>(prometheusUrl, '/api/v1/parse_query', { query: promql });
  const names = new Set<string>();
  const walk = (node: unknown): void => {
    if (Array.isArray(node)) return node.forEach(walk);
    if (!node || typeof node !== 'object') return;
    const n = node as AstNode;
    if (n.type === 'vectorSelector' || n.type === 'matrixSelector') {
      const byName = n.matchers?.find((m) => m.name === '__name__');
      if (!n.name && byName?.type !== '=') throw new Error(`${promql}: a selector without a plain metric name (${JSON.stringify(n.matchers)}) cannot be checked`);
      names.add(n.name || byName!.value);
    }
    Object.values(n).forEach(walk);
  };
  walk(ast);
  return [...names].sort();
}

/** Names of the metrics Prometheus holds series of for the given selector (e.g. `{job="x"}`), over the last `lookback` seconds. */
export async function exportedNames(prometheusUrl: string, selector: string, lookbackSeconds = 3600): Promise<Set<string>> {
  const now = Date.now() / 1000;
  return new Set(await api<string[]>(prometheusUrl, '/api/v1/label/__name__/values', {
    'match[]': selector, start: String(now - lookbackSeconds), end: String(now),
  }));
}

export interface Alert { labels: Labels; annotations: Labels; state: 'pending' | 'firing'; value: string }

/** The alerts pending or firing now. */
export async function alerts(prometheusUrl: string): Promise<Alert[]> {
  return (await api<{ alerts: Alert[] }>(prometheusUrl, '/api/v1/alerts')).alerts;
}

export interface RuleState { name: string; type: 'alerting' | 'recording'; health: string; lastError?: string; lastEvaluation: string; query: string }
export interface RuleGroupState { name: string; file: string; rules: RuleState[] }

/** The rule groups Prometheus has loaded, with each rule's health after its last evaluation. */
export async function ruleGroups(prometheusUrl: string): Promise<RuleGroupState[]> {
  return (await api<{ groups: RuleGroupState[] }>(prometheusUrl, '/api/v1/rules')).groups;
}

type Stack = Pick<StackInfo, 'stateDir' | 'prometheusUrl'>;
const rulesDir = (stack: Stack) => join(stack.stateDir, 'prometheus', 'rules');
const configFile = (stack: Stack) => join(stack.stateDir, 'prometheus', 'prometheus.yml');

/** Makes Prometheus re-read its configuration and rule files; a rule file it refuses fails here with its message. */
async function reload(stack: Stack): Promise<void> {
  const res = await fetch(`${stack.prometheusUrl}/-/reload`, { method: 'POST' });
  if (!res.ok) throw new Error(`Prometheus refused the reload (HTTP ${res.status}): ${(await res.text()).trim()}`);
}

/**
 * Loads a rule file into the stack's Prometheus as `<name>.yml` (rule_files gains the stack's rules folder the first
 * time) and waits until its groups are loaded. A file Prometheus refuses is removed again, and the error says why.
 */
export async function loadRules(stack: Stack, name: string, content: string): Promise<RuleGroupState[]> {
  if (!/^[A-Za-z0-9_.-]+$/.test(name)) throw new Error(`rule file name ${JSON.stringify(name)}: use letters, digits, '_', '-' or '.'`);
  const file = join(rulesDir(stack), `${name}.yml`);
  await mkdir(rulesDir(stack), { recursive: true });
  await writeWhole(file, content);
  const config = parse(await readFile(configFile(stack), 'utf8')) as { rule_files?: string[] };
  const pattern = join(rulesDir(stack), '*.yml');
  if (!config.rule_files?.includes(pattern)) {
    config.rule_files = [...config.rule_files ?? [], pattern];
    await writeWhole(configFile(stack), stringify(config));
  }
  try {
    await reload(stack);
  } catch (err) {
    await rm(file, { force: true });
    await reload(stack).catch(() => undefined);
    // The reload's answer only says it failed; Prometheus's log says which rule and why.
    const log = await readFile(join(stack.stateDir, 'logs', 'prometheus.log'), 'utf8').catch(() => '');
    const why = log.split('\n').filter((l) => l.includes(file)).at(-1);
    throw new Error(`${(err as Error).message}${why ? `; Prometheus's log: ${why}` : ''}`, { cause: err });
  }
  return eventually(`rule file ${name} loaded`, async () => {
    const groups = (await ruleGroups(stack.prometheusUrl)).filter((g) => g.file === file);
    return groups.length ? groups : undefined;
  }, { timeoutMs: 30_000 });
}

/** Removes a rule file loaded with loadRules; its alerts go with it. */
export async function unloadRules(stack: Stack, name: string): Promise<void> {
  await rm(join(rulesDir(stack), `${name}.yml`), { force: true });
  await reload(stack);
}
