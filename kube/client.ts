import { context, propagation, SpanKind, SpanStatusCode, trace } from '@opentelemetry/api';
import { tracer } from '../lib/trace.ts';
import { Agent as HttpsAgent, request as httpsRequest, type RequestOptions } from 'node:https';
import { Agent as HttpAgent, request as httpRequest, type IncomingMessage } from 'node:http';
import type { KubeCredentials } from './config.ts';
import { collectionPath, objectPath, type CollectionRef, type ObjectRef } from './resources.ts';

/** An error answered by the API server, with its Status reason. */
export class KubeError extends Error {
  readonly status: number;
  readonly reason: string;
  constructor(status: number, reason: string, message: string) {
    super(message);
    this.name = 'KubeError';
    this.status = status;
    this.reason = reason;
  }

  /** True when the namespace is being deleted and refuses new objects: creating anything there can never succeed. */
  get namespaceTerminating(): boolean {
    return this.status === 403 && this.message.includes('because it is being terminated');
  }

  /** True when retrying the same request cannot succeed (the request itself is wrong). */
  get permanent(): boolean {
    // Server-side apply answers a field the schema does not declare with a 500 that no retry can fix.
    const badPatch = this.status === 500 && this.message.includes('failed to create typed patch object');
    return this.status === 400 || this.status === 422 || this.status === 415 || badPatch || this.unservedType || this.deniedByAdmission;
  }

  /**
   * True when admission refused the object for what it says (403): a ValidatingAdmissionPolicy or a webhook denied
   * it, a ResourceQuota would be exceeded, a LimitRange bounds it. The same request is refused again until the
   * object or the policy changes; a 403 of authorization (`cannot patch resource`) or of a namespace admission
   * not ready yet (after an API server restart) is not this.
   */
  get deniedByAdmission(): boolean {
    return this.overQuota || (this.status === 403 && /denied (?:the )?request|usage per (?:Container|Pod|PersistentVolumeClaim) is|limit to request ratio/.test(this.message));
  }

  /**
   * True when authorization refused the request (403): the caller's role does not grant this verb on this resource
   * (`User "..." cannot patch resource "deployments"`). Refused until someone grants it, which changes nothing the
   * caller can see.
   */
  get forbiddenByRole(): boolean {
    return this.status === 403 && !this.deniedByAdmission && / cannot [a-z]+ resource /.test(this.message);
  }

  /** True when a ResourceQuota refused the object (403): refused until the spec or the quota changes, or others free some. */
  get overQuota(): boolean {
    return this.status === 403 && /exceeded quota|failed quota|insufficient quota/.test(this.message);
  }

  /** True when the API server does not serve the object's type at all (its CRD is not installed). */
  get unservedType(): boolean {
    return this.status === 404 && this.message.includes('the server could not find the requested resource');
  }
}

export interface KubeObject {
  apiVersion: string;
  kind: string;
  metadata: { name: string; namespace?: string; uid?: string; resourceVersion?: string; generation?: number; [k: string]: unknown };
  [k: string]: unknown;
}

export interface KubeList<T> {
  items: T[];
  metadata: { resourceVersion: string };
}

interface RequestOpts {
  body?: unknown;
  accept?: string;
  signal?: AbortSignal;
  contentType?: string;
  query?: Record<string, string>;
  allowNotFound?: boolean;
  timeoutMs?: number;
  /** Extra headers (the trace context). */
  headers?: Record<string, string>;
  /** Told the HTTP status of a successful answer (a server-side apply's 201 says it created the object). */
  onStatus?: (status: number) => void;
}

type TlsMaterial = Pick<RequestOptions, 'ca' | 'cert' | 'key' | 'pfx' | 'passphrase' | 'servername' | 'rejectUnauthorized'>;

interface Transport {
  agent: HttpsAgent | HttpAgent;
  tls: TlsMaterial;
  headers: Record<string, string>;
  auth?: string;
}

/** How long resolved credentials are reused before the kubeconfig is asked again (client-go re-reads token files every minute). */
const CREDENTIALS_TTL_MS = 60_000;

function readBody(res: IncomingMessage): Promise<string> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    res.on('data', (c: Buffer) => chunks.push(c));
    res.on('end', () => resolve(Buffer.concat(chunks).toString('utf8')));
    res.on('error', reject);
  });
}

function sameTls(a: TlsMaterial, b: TlsMaterial): boolean {
  const same = (x: unknown, y: unknown) => (Buffer.isBuffer(x) && Buffer.isBuffer(y) ? x.equals(y) : JSON.stringify(x) === JSON.stringify(y));
  return (Object.keys({ ...a, ...b }) as (keyof TlsMaterial)[]).every((k) => same(a[k], b[k]));
}

function definedOnly<T extends object>(o: T): Partial<T> {
  return Object.fromEntries(Object.entries(o).filter(([, v]) => v !== undefined)) as Partial<T>;
}

const contentTypes = {
  apply: 'application/apply-patch+yaml',
  merge: 'application/merge-patch+json',
  json: 'application/json-patch+json',
} as const;

/**
 * A small JSON client over the kubeconfig's credentials. Unlike the generated typed clients it keeps objects as the
 * API server sends them (no Date conversion, no dropped fields) and sends server-side apply bodies unchanged.
 */
export class Kube {
  /**
   * Told of every write this client made (the API server's answer: the object as it is now; null for a delete), so
   * a copy of the object kept elsewhere (kube/recent.ts) is never older than this process's own last write.
   */
  onWrite: ((ref: ObjectRef, answer: KubeObject | null) => void) | undefined;
  private readonly kc: KubeCredentials;
  private readonly server: URL;
  private transport: Promise<Transport> | undefined;
  private expiresAt = 0;

  constructor(kc: KubeCredentials) {
    this.kc = kc;
    const cluster = kc.getCurrentCluster();
    if (!cluster) throw new Error('kubeconfig has no current cluster');
    this.server = new URL(cluster.server);
  }

  /**
   * The connection pool and credentials, resolved once and reused: resolving them costs more than a request, and a
   * fresh TLS handshake per request (client-node's agent does not keep connections alive) costs the API server
   * more still. Resolved again after CREDENTIALS_TTL_MS, as client-go re-reads a token file, or at once after a 401
   * (exec plugins and token files rotate).
   */
  private credentials(refresh = false): Promise<Transport> {
    if (!this.transport || refresh || performance.now() >= this.expiresAt) {
      if (refresh) this.kc.invalidate?.();
      this.expiresAt = performance.now() + CREDENTIALS_TTL_MS;
      this.transport = this.resolve(this.transport).catch((err: unknown) => {
        this.expiresAt = 0;
        throw err;
      });
    }
    return this.transport;
  }

  private async resolve(current: Promise<Transport> | undefined): Promise<Transport> {
    const opts: RequestOptions = {};
    await this.kc.applyToHTTPSOptions(opts);
    const tls: TlsMaterial = { ca: opts.ca, cert: opts.cert, key: opts.key, pfx: opts.pfx, passphrase: opts.passphrase, servername: opts.servername, rejectUnauthorized: opts.rejectUnauthorized };
    const previous = await current?.catch(() => undefined);
    // Keep the pool (and its open connections) unless the TLS material itself changed.
    const agent = previous && sameTls(previous.tls, tls) ? previous.agent
      : this.server.protocol === 'http:' ? new HttpAgent({ keepAlive: true }) : new HttpsAgent({ keepAlive: true, ...definedOnly(tls) });
    if (previous && previous.agent !== agent) previous.agent.destroy();
    const headers = Object.fromEntries(Object.entries(opts.headers ?? {}).map(([k, v]) => [k, String(v)]));
    return { agent, tls, headers, ...(opts.auth ? { auth: opts.auth } : {}) };
  }

  /**
   * Sends one request; resolves to the parsed body, or null for 404 when allowNotFound. Inside a traced piece of work
   * (an activity, with tracing on) the request is a client span of its own and carries `traceparent`, so the API
   * server's spans join the trace; elsewhere (the watcher's lists) it is sent as it is.
   */
  async request<T>(method: string, path: string, opts: RequestOpts = {}): Promise<T | null> {
    if (!trace.getActiveSpan()) return this.exchange<T>(method, path, opts);
    const name = `${method} ${path.split('?')[0]!}`;
    return tracer().startActiveSpan(name, { kind: SpanKind.CLIENT, attributes: { 'http.request.method': method, 'url.path': path } }, async (span) => {
      const headers: Record<string, string> = {};
      propagation.inject(context.active(), headers);
      try {
        return await this.exchange<T>(method, path, { ...opts, headers: { ...opts.headers, ...headers } });
      } catch (err) {
        if (err instanceof KubeError) span.setAttribute('http.response.status_code', err.status);
        span.setStatus({ code: SpanStatusCode.ERROR, message: err instanceof Error ? err.message : String(err) });
        throw err;
      } finally {
        span.end();
      }
    });
  }

  private async exchange<T>(method: string, path: string, opts: RequestOpts): Promise<T | null> {
    const res = await this.open(method, path, opts);
    if (!res) return null;
    opts.onStatus?.(res.statusCode ?? 0);
    const text = await readBody(res);
    return text ? (JSON.parse(text) as T) : null;
  }

  /**
   * Watches a collection: calls `onEvent` with each event of the stream (newline-delimited JSON) until the server
   * ends it (resolves) or it fails (rejects; an expired resourceVersion as a KubeError with status 410).
   */
  async watch(path: string, query: Record<string, string>, onEvent: (e: { type: string; object: KubeObject }) => void, opts: { accept?: string; signal?: AbortSignal; timeoutMs?: number } = {}): Promise<void> {
    const res = await this.open('GET', path, { query: { ...query, watch: '1' }, ...opts });
    if (!res) return;
    await new Promise<void>((resolve, reject) => {
      let buffered = '';
      res.setEncoding('utf8');
      res.on('data', (chunk: string) => {
        buffered += chunk;
        let nl: number;
        try {
          while ((nl = buffered.indexOf('\n')) >= 0) {
            const line = buffered.slice(0, nl);
            buffered = buffered.slice(nl + 1);
            if (!line.trim()) continue;
            const e = JSON.parse(line) as { type: string; object: KubeObject & { code?: number; reason?: string; message?: string } };
            if (e.type === 'ERROR') throw new KubeError(e.object.code ?? 500, e.object.reason ?? 'Unknown', `watch ${path}: ${e.object.message ?? 'error event'}`);
            onEvent(e);
          }
        } catch (err) {
          res.destroy();
          reject(err instanceof Error ? err : new Error(String(err)));
        }
      });
      res.on('end', () => resolve());
      res.on('error', reject);
      res.on('close', () => resolve());
    });
  }

  /** Opens a request and answers its response once the status says success; null for 404 when allowNotFound. Retries once after a 401 (rotated credentials). */
  private async open(method: string, path: string, opts: RequestOpts): Promise<IncomingMessage | null> {
    try {
      return await this.send(await this.credentials(), method, path, opts);
    } catch (err) {
      if (!(err instanceof KubeError && err.status === 401)) throw err;
      return this.send(await this.credentials(true), method, path, opts);
    }
  }

  private send(t: Transport, method: string, path: string, opts: RequestOpts): Promise<IncomingMessage | null> {
    const url = new URL(path, this.server);
    for (const [k, v] of Object.entries(opts.query ?? {})) url.searchParams.set(k, v);
    const payload = opts.body === undefined ? undefined : JSON.stringify(opts.body);
    const send = url.protocol === 'http:' ? httpRequest : httpsRequest;
    return new Promise<IncomingMessage | null>((resolve, reject) => {
      const req = send(url, {
        agent: t.agent,
        method,
        timeout: opts.timeoutMs ?? 30_000,
        ...(opts.signal ? { signal: opts.signal } : {}),
        ...(t.auth ? { auth: t.auth } : {}),
        headers: {
          ...t.headers,
          ...opts.headers,
          Accept: opts.accept ?? 'application/json',
          ...(payload !== undefined ? { 'Content-Type': opts.contentType ?? 'application/json', 'Content-Length': Buffer.byteLength(payload) } : {}),
        },
      }, (res) => {
        const status = res.statusCode ?? 0;
        if (status >= 200 && status < 300) {
          resolve(res);
          return;
        }
        readBody(res).then((text) => {
          if (status === 404 && opts.allowNotFound) {
            resolve(null);
            return;
          }
          let reason = 'Unknown';
          let message = text.slice(0, 500);
          try {
            const s = JSON.parse(text) as { reason?: string; message?: string };
            reason = s.reason ?? reason;
            message = s.message ?? message;
          } catch {
            // not a Status object
          }
          reject(new KubeError(status, reason, `${method} ${url.pathname}: ${status} ${reason}: ${message}`));
        }, reject);
      });
      req.on('timeout', () => req.destroy(new Error(`${method} ${url.pathname}: timed out`)));
      req.on('error', (err) => reject(new Error(`${method} ${url.pathname}: ${err.message}`)));
      if (payload !== undefined) req.write(payload);
      req.end();
    });
  }

  /** Server-side apply with our field manager, taking ownership of the fields we send (force). */
  async apply<T extends KubeObject>(obj: T, opts: { fieldManager: string; subresource?: string; force?: boolean; dryRun?: boolean; onCreated?: () => void }): Promise<T> {
    const ref = refOf(obj);
    const out = await this.request<T>('PATCH', objectPath(ref, opts.subresource), {
      body: obj,
      contentType: contentTypes.apply,
      query: { fieldManager: opts.fieldManager, force: String(opts.force ?? true), ...(opts.dryRun ? { dryRun: 'All' } : {}) },
      ...(opts.onCreated ? { onStatus: (status: number) => { if (status === 201) opts.onCreated!(); } } : {}),
    });
    if (!opts.dryRun) this.onWrite?.(ref, out);
    return out as T;
  }

  /** Whether the API server serves a kind (`plural` of `apiVersion`): a CRD that is not installed is not. */
  async serves(apiVersion: string, plural: string): Promise<boolean> {
    const list = await this.request<{ resources?: { name?: string }[] }>('GET', apiVersion.includes('/') ? `/apis/${apiVersion}` : `/api/${apiVersion}`, { allowNotFound: true });
    return (list?.resources ?? []).some((r) => r.name === plural);
  }

  /** Reads one object, or null when it does not exist. */
  get<T = KubeObject>(ref: ObjectRef): Promise<T | null> {
    return this.request<T>('GET', objectPath(ref), { allowNotFound: true });
  }

  /** Lists a collection (optionally by label selector). */
  list<T = KubeObject>(ref: CollectionRef, labelSelector?: string): Promise<KubeList<T>> {
    return this.listPath<T>(collectionPath(ref), labelSelector);
  }

  /** Lists a collection by its REST path (what an informer asks for). */
  async listPath<T = KubeObject>(path: string, labelSelector?: string): Promise<KubeList<T>> {
    const out = await this.request<KubeList<T>>('GET', path, labelSelector ? { query: { labelSelector } } : {});
    return out ?? { items: [], metadata: { resourceVersion: '' } };
  }

  /** Deletes one object; "not found" counts as done. Returns whether it existed. */
  async delete(ref: ObjectRef, opts: { propagationPolicy?: 'Foreground' | 'Background' | 'Orphan'; uid?: string } = {}): Promise<boolean> {
    const body: Record<string, unknown> = { apiVersion: 'v1', kind: 'DeleteOptions', propagationPolicy: opts.propagationPolicy ?? 'Background' };
    if (opts.uid) body['preconditions'] = { uid: opts.uid };
    const out = await this.request('DELETE', objectPath(ref), { body, allowNotFound: true });
    this.onWrite?.(ref, null);
    return out !== null;
  }

  /** JSON merge patch, on the object or a subresource such as status. */
  mergePatch<T = KubeObject>(ref: ObjectRef, body: unknown, subresource?: string): Promise<T | null> {
    return this.wrote(ref, this.request<T>('PATCH', objectPath(ref, subresource), { body, contentType: contentTypes.merge }));
  }

  /** RFC 6902 JSON patch (with `test` operations for optimistic concurrency). */
  jsonPatch<T = KubeObject>(ref: ObjectRef, ops: unknown[], subresource?: string): Promise<T | null> {
    return this.wrote(ref, this.request<T>('PATCH', objectPath(ref, subresource), { body: ops, contentType: contentTypes.json }));
  }

  /** Creates an object in the collection its apiVersion, kind and namespace name. */
  create<T extends KubeObject>(obj: T): Promise<T | null> {
    return this.wrote(refOf(obj), this.request<T>('POST', collectionPath({ apiVersion: obj.apiVersion, kind: obj.kind, namespace: obj.metadata.namespace }), { body: obj }));
  }

  /** A write's answer, once onWrite was told of it. */
  private async wrote<T>(ref: ObjectRef, write: Promise<T | null>): Promise<T | null> {
    const answer = await write;
    this.onWrite?.(ref, answer as KubeObject | null);
    return answer;
  }
}

/** Where an object lives (its kind, namespace and name). */
function refOf(obj: KubeObject): ObjectRef {
  return { apiVersion: obj.apiVersion, kind: obj.kind, name: obj.metadata.name, ...(obj.metadata.namespace ? { namespace: obj.metadata.namespace } : {}) };
}
