// The operator's kubeconfig, read without @kubernetes/client-node: importing client-node's KubeConfig loads every
// generated API model (about 80 MB of resident memory, a quarter of the operator's budget). This reads what an
// operator runs with: kubeconfig files (a KUBECONFIG list merged as kubectl does), the in-cluster service account,
// client certificates, bearer tokens, token files and exec credential plugins. A kubeconfig that needs more (an
// auth-provider, a proxy, impersonation) is handed to client-node, loaded only then.
import type { KubeConfig } from '@kubernetes/client-node';
import { execFile } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import type { RequestOptions } from 'node:https';
import { homedir } from 'node:os';
import { delimiter, dirname, isAbsolute, join } from 'node:path';
import { promisify } from 'node:util';
import { YAMLParseError, parse } from 'yaml';

/** What our Kubernetes client needs of a kubeconfig; client-node's KubeConfig has the same shape. */
export interface KubeCredentials {
  getCurrentCluster(): { server: string } | null;
  getCurrentContext(): string;
  /** Sets TLS material and the Authorization header (or basic auth) on request options. */
  applyToHTTPSOptions(opts: RequestOptions): Promise<void>;
  /** Forgets cached credentials (after a 401), if it caches any. */
  invalidate?(): void;
}

interface Named<T> {
  name: string;
  [k: string]: unknown;
  cluster?: T;
  user?: T;
  context?: T;
}

interface ClusterEntry {
  server?: string;
  'certificate-authority'?: string;
  'certificate-authority-data'?: string;
  'insecure-skip-tls-verify'?: boolean;
  'tls-server-name'?: string;
  'proxy-url'?: string;
}

interface ExecConfig {
  apiVersion?: string;
  command: string;
  args?: string[];
  env?: { name: string; value: string }[] | null;
  interactiveMode?: string;
}

interface UserEntry {
  'client-certificate'?: string;
  'client-certificate-data'?: string;
  'client-key'?: string;
  'client-key-data'?: string;
  token?: string;
  tokenFile?: string;
  username?: string;
  password?: string;
  exec?: ExecConfig;
  'auth-provider'?: unknown;
  as?: string;
  'as-groups'?: unknown;
  'as-uid'?: string;
  'as-user-extra'?: unknown;
}

interface ContextEntry {
  cluster?: string;
  user?: string;
  namespace?: string;
}

interface Document {
  'current-context'?: string;
  clusters?: Named<ClusterEntry>[] | null;
  users?: Named<UserEntry>[] | null;
  contexts?: Named<ContextEntry>[] | null;
}

/** A file or inline data from the kubeconfig, resolved against the file it came from. */
interface Source {
  file?: string;
  data?: string;
}

const serviceAccount = '/var/run/secrets/kubernetes.io/serviceaccount';

/** The kubeconfig was read, but its current context names no cluster with a server. */
export class NoCurrentCluster extends Error {
  readonly currentContext: string;
  constructor(currentContext: string) {
    super(`it names no current cluster (current-context "${currentContext}")`);
    this.name = 'NoCurrentCluster';
    this.currentContext = currentContext;
  }
}

/** The cluster and user of the current context, as read from kubeconfig files or the in-cluster service account. */
export class KubeconfigCredentials implements KubeCredentials {
  readonly contextName: string;
  private readonly server: string;
  private readonly tls: { ca?: Source; cert?: Source; key?: Source; insecure: boolean; serverName?: string };
  private readonly user: { token?: string; tokenFile?: string; username?: string; password?: string; exec?: ExecConfig };
  private exec: { token?: string; cert?: string; key?: string; expires: number } | undefined;

  constructor(opts: { contextName: string; server: string; tls: KubeconfigCredentials['tls']; user: KubeconfigCredentials['user'] }) {
    this.contextName = opts.contextName;
    this.server = opts.server;
    this.tls = opts.tls;
    this.user = opts.user;
  }

  getCurrentCluster(): { server: string } {
    return { server: this.server };
  }

  getCurrentContext(): string {
    return this.contextName;
  }

  invalidate(): void {
    this.exec = undefined;
  }

  async applyToHTTPSOptions(opts: RequestOptions): Promise<void> {
    const exec = this.user.exec ? await this.execCredential(this.user.exec) : undefined;
    const ca = read(this.tls.ca);
    const cert = exec?.cert ?? read(this.tls.cert);
    const key = exec?.key ?? read(this.tls.key);
    if (ca) opts.ca = ca;
    if (cert) opts.cert = cert;
    if (key) opts.key = key;
    if (this.tls.insecure) opts.rejectUnauthorized = false;
    if (this.tls.serverName) opts.servername = this.tls.serverName;
    // A token file is read on every call: the kubelet rotates projected service-account tokens.
    const token = exec?.token ?? (this.user.tokenFile ? readFileSync(this.user.tokenFile, 'utf8').trim() : this.user.token);
    if (token) opts.headers = { ...opts.headers, Authorization: `Bearer ${token}` };
    else if (this.user.username) opts.auth = `${this.user.username}:${this.user.password ?? ''}`;
  }

  /** Runs the exec plugin (client.authentication.k8s.io ExecCredential), reusing its answer until it expires. */
  private async execCredential(exec: ExecConfig): Promise<{ token?: string; cert?: string; key?: string }> {
    if (this.exec && Date.now() < this.exec.expires) return this.exec;
    const apiVersion = exec.apiVersion ?? 'client.authentication.k8s.io/v1';
    const env = { ...process.env, ...Object.fromEntries((exec.env ?? []).map((e) => [e.name, e.value])) };
    env['KUBERNETES_EXEC_INFO'] = JSON.stringify({ apiVersion, kind: 'ExecCredential', spec: { interactive: false } });
    const { stdout } = await promisify(execFile)(exec.command, exec.args ?? [], { env, timeout: 60_000 });
    const status = (JSON.parse(stdout) as { status?: { token?: string; clientCertificateData?: string; clientKeyData?: string; expirationTimestamp?: string } }).status ?? {};
    const expires = status.expirationTimestamp ? Date.parse(status.expirationTimestamp) : Number.POSITIVE_INFINITY;
    this.exec = {
      ...(status.token ? { token: status.token } : {}),
      ...(status.clientCertificateData ? { cert: status.clientCertificateData } : {}),
      ...(status.clientKeyData ? { key: status.clientKeyData } : {}),
      expires,
    };
    return this.exec;
  }
}

function read(source: Source | undefined): Buffer | undefined {
  if (source?.file) return readFileSync(source.file);
  if (source?.data) return Buffer.from(source.data, 'base64');
  return undefined;
}

/**
 * The kubeconfig at `path` (a file, or a list separated like PATH), or else the default one: $KUBECONFIG,
 * ~/.kube/config, then the in-cluster service account. Throws when there is none or it names no usable context.
 */
export async function loadKubeconfig(path: string | undefined, env: NodeJS.ProcessEnv = process.env, serviceAccountDir = serviceAccount): Promise<KubeCredentials> {
  const files = kubeconfigFiles(path, env);
  if (files.length === 0) {
    const inCluster = inClusterCredentials(env, serviceAccountDir);
    if (inCluster) return inCluster;
    throw new Error('no kubeconfig: set KUBECONFIG or --kubeconfig, create ~/.kube/config, or run in a cluster');
  }
  const merged = merge(files);
  const needs = unsupported(merged);
  if (needs) return clientNodeConfig(files);
  return merged.credentials;
}

/** The service account's token and CA, as a pod sees them. */
function inClusterCredentials(env: NodeJS.ProcessEnv, dir: string): KubeCredentials | undefined {
  const host = env['KUBERNETES_SERVICE_HOST'];
  const port = env['KUBERNETES_SERVICE_PORT'];
  if (!host || !port || !existsSync(`${dir}/token`)) return undefined;
  return new KubeconfigCredentials({
    contextName: 'inClusterContext',
    server: `https://${host.includes(':') ? `[${host}]` : host}:${port}`,
    tls: { ca: { file: `${dir}/ca.crt` }, insecure: false },
    user: { tokenFile: `${dir}/token` },
  });
}

interface Merged {
  credentials: KubeconfigCredentials;
  cluster: ClusterEntry;
  user: UserEntry;
  namespace: string | undefined;
}

/** The namespace of the current context of the kubeconfig at `path`, else the default one (kubectl's default namespace), else 'default'. */
export function defaultNamespaceOf(env: NodeJS.ProcessEnv = process.env, path?: string): string {
  try {
    const files = kubeconfigFiles(path, env);
    if (files.length) return merge(files).namespace ?? 'default';
    return readFileSync(`${serviceAccount}/namespace`, 'utf8').trim() || 'default';
  } catch {
    return 'default';
  }
}

/** The kubeconfig files to read: `path` (a list separated like PATH), else $KUBECONFIG, else ~/.kube/config if it exists. */
function kubeconfigFiles(path: string | undefined, env: NodeJS.ProcessEnv): string[] {
  const files = (path ?? env['KUBECONFIG'] ?? '').split(delimiter).filter(Boolean);
  if (files.length > 0) return files;
  const home = join(env['HOME'] ?? homedir(), '.kube', 'config');
  return existsSync(home) ? [home] : [];
}

/** Reads the files, the first one's current-context and the first definition of each name winning (as kubectl merges them). */
function merge(files: string[]): Merged {
  return mergeDocuments(files.map((file) => ({ text: readFileSync(file, 'utf8'), dir: dirname(file), what: file })));
}

/**
 * A kubeconfig given as text (a member cluster's, from a Secret), read like a file in `dir`. Throws saying why it
 * cannot be used; an exec plugin, and what only client-node reads (an auth-provider, a proxy, impersonation), are
 * refused here.
 */
export function kubeconfigFromText(text: string, what: string, dir = process.cwd()): KubeCredentials {
  const merged = mergeDocuments([{ text, dir, what }]);
  // Whoever may write the Secret must not be able to run a command in the operator: no exec plugins (use a token).
  // Nor read the operator's files (its own service-account token, sent to a server the Secret names): data only.
  const { cluster: c, user: u } = merged;
  const files = [c['certificate-authority'], u['client-certificate'], u['client-key'], u.tokenFile].some(Boolean);
  const needs = u.exec ? 'an exec plugin (a command the operator would run)' : files ? 'files of the operator (certificate, key or token paths; embed them as *-data or token)' : unsupported(merged);
  if (needs) throw new Error(`${what} needs ${needs}, which a member cluster's kubeconfig may not use: give it a token or a client certificate`);
  return merged.credentials;
}

/**
 * Parses a kubeconfig's YAML. A syntax error says where, never what the line holds: the parser's message quotes the
 * line, which in a kubeconfig may be a token or a key, and this message reaches logs, status and Events.
 */
function parseKubeconfig(text: string, what: string): Document | null {
  try {
    return parse(text) as Document | null;
  } catch (err) {
    const at = err instanceof YAMLParseError && err.linePos ? ` (line ${err.linePos[0].line}, column ${err.linePos[0].col})` : '';
    throw new Error(`${what} is not valid YAML${at}`, { cause: err });
  }
}

function mergeDocuments(sources: { text: string; dir: string; what: string }[]): Merged {
  const clusters = new Map<string, { entry: ClusterEntry; dir: string }>();
  const users = new Map<string, { entry: UserEntry; dir: string }>();
  const contexts = new Map<string, ContextEntry>();
  let current: string | undefined;
  for (const { text, dir, what } of sources) {
    const doc = parseKubeconfig(text, what);
    if (!doc || typeof doc !== 'object') throw new Error(`${what} is not a kubeconfig (empty, or not a YAML mapping)`);
    current ??= doc['current-context'] || undefined;
    for (const c of doc.clusters ?? []) if (!clusters.has(c.name)) clusters.set(c.name, { entry: c.cluster ?? {}, dir });
    for (const u of doc.users ?? []) if (!users.has(u.name)) users.set(u.name, { entry: u.user ?? {}, dir });
    for (const c of doc.contexts ?? []) if (!contexts.has(c.name)) contexts.set(c.name, c.context ?? {});
  }
  const context = current ? contexts.get(current) : undefined;
  const cluster = context?.cluster ? clusters.get(context.cluster) : undefined;
  if (!current || !context || !cluster?.entry.server) throw new NoCurrentCluster(current ?? '');
  const user = (context.user ? users.get(context.user) : undefined) ?? { entry: {}, dir: cluster.dir };
  const source = (dir: string, file: string | undefined, data: string | undefined): Source | undefined =>
    file ? { file: isAbsolute(file) ? file : join(dir, file) } : data ? { data } : undefined;
  const c = cluster.entry;
  const u = user.entry;
  const tls = {
    insecure: c['insecure-skip-tls-verify'] === true,
    ...optional('ca', source(cluster.dir, c['certificate-authority'], c['certificate-authority-data'])),
    ...optional('cert', source(user.dir, u['client-certificate'], u['client-certificate-data'])),
    ...optional('key', source(user.dir, u['client-key'], u['client-key-data'])),
    ...optional('serverName', c['tls-server-name']),
  };
  const exec = u.exec ? { ...u.exec, command: isAbsolute(u.exec.command) || !u.exec.command.includes('/') ? u.exec.command : join(user.dir, u.exec.command) } : undefined;
  const credentials = new KubeconfigCredentials({
    contextName: current, server: c.server!, tls,
    user: {
      ...optional('token', u.token), ...optional('username', u.username), ...optional('password', u.password), ...optional('exec', exec),
      ...optional('tokenFile', u.tokenFile ? (isAbsolute(u.tokenFile) ? u.tokenFile : join(user.dir, u.tokenFile)) : undefined),
    },
  });
  return { credentials, cluster: c, user: u, namespace: context.namespace || undefined };
}

function optional<K extends string, V>(key: K, value: V | undefined): { [P in K]?: V } {
  return (value === undefined ? {} : { [key]: value }) as { [P in K]?: V };
}

/** What this reader does not do itself, if the kubeconfig needs it. */
function unsupported({ cluster, user }: Merged): string | undefined {
  if (user['auth-provider']) return 'an auth-provider';
  if (cluster['proxy-url']) return 'a proxy-url';
  if (user.as || user['as-groups'] || user['as-uid'] || user['as-user-extra']) return 'impersonation';
  if (user.exec?.interactiveMode === 'Always') return 'an interactive exec plugin';
  return undefined;
}

/** client-node's KubeConfig for what needs it, imported only then. */
async function clientNodeConfig(files: string[]): Promise<KubeCredentials> {
  const { KubeConfig: ClientNodeKubeConfig } = await import('@kubernetes/client-node');
  const kc: KubeConfig = new ClientNodeKubeConfig();
  kc.loadFromFile(files[0]!);
  for (const file of files.slice(1)) {
    const more = new ClientNodeKubeConfig();
    more.loadFromFile(file);
    kc.mergeConfig(more);
  }
  return kc;
}
