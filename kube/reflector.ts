// List-then-watch of one collection, as client-go's reflector does it: a paged list, then a watch from the list's
// resourceVersion, resumed from the last one seen after the server ends it or it fails, and a fresh list when that
// version has expired (410), which reports the objects deleted meanwhile. It keeps only each object's metadata
// (what a relist needs to report a deletion): unlike client-node's informer it holds no copy of whole objects, and
// a collection that only matters by its metadata is listed and watched as metadata only.
import { setTimeout as sleep } from 'node:timers/promises';
import { KubeError, type Kube, type KubeObject } from './client.ts';

export type ReflectorEvent = 'add' | 'update' | 'delete';

export interface ReflectorOptions {
  kube: Kube;
  /** The collection's REST path (kube/resources.ts collectionPath). */
  path: string;
  labelSelector?: string | undefined;
  /** Only the objects' metadata is needed: the server sends PartialObjectMetadata, less to send and to parse. */
  metadataOnly?: boolean;
  /** Objects per list page (default 500). */
  pageSize?: number;
  /** How long the server keeps one watch open (default 300 s; it is then resumed). */
  watchSeconds?: number;
  /** Called for every change, in order; on a delete found by a relist, with the object's last known metadata. */
  onEvent: (type: ReflectorEvent, obj: KubeObject) => void;
  /** Called when listing or watching failed; the reflector tries again after `retryInMs`. */
  onError?: (err: Error, retryInMs: number) => void;
}

const metadataAccept = {
  list: 'application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json',
  watch: 'application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1,application/json',
};

/** Keeps one collection's events flowing to `onEvent` until stopped. */
export class Reflector {
  private readonly opts: ReflectorOptions;
  /** namespace/name -> the last metadata seen (managed fields left out). */
  private readonly known = new Map<string, KubeObject>();
  private resourceVersion = '';
  private stopped = false;
  /** Aborts the request in flight and the wait before a retry. */
  private readonly abort = new AbortController();
  private running: Promise<void> | undefined;
  private listed = false;
  private attempted!: () => void;
  private readonly firstAttempt: Promise<void> = new Promise((r) => {
    this.attempted = r;
  });

  constructor(opts: ReflectorOptions) {
    this.opts = opts;
  }

  /** True once a whole list has been delivered. */
  get synced(): boolean {
    return this.listed;
  }

  /** Starts listing and watching; resolves after the first list attempt (a failed one is reported and retried). */
  start(): Promise<void> {
    this.running ??= this.run();
    return this.firstAttempt;
  }

  /** Stops watching; no event is delivered after this resolves. */
  async stop(): Promise<void> {
    this.stopped = true;
    this.abort.abort();
    this.attempted();
    await this.running;
  }

  private async run(): Promise<void> {
    let backoffMs = 1000;
    while (!this.stopped) {
      try {
        if (!this.resourceVersion) {
          await this.list();
          this.listed = true;
          this.attempted();
        }
        await this.watch();
        backoffMs = 1000;
      } catch (err) {
        if (this.stopped) return;
        // An expired version (410) needs a fresh list, at once; anything else is retried from where it stopped.
        if (err instanceof KubeError && err.status === 410) {
          this.resourceVersion = '';
          continue;
        }
        this.opts.onError?.(err instanceof Error ? err : new Error(String(err)), backoffMs);
        this.attempted();
        await sleep(backoffMs, undefined, { signal: this.abort.signal }).catch(() => undefined);
        backoffMs = Math.min(backoffMs * 2, 30_000);
      }
    }
  }

  /** Lists every object (in pages), reports what is new, changed or gone since what was known, and remembers the version. */
  private async list(): Promise<void> {
    const seen = new Set<string>();
    let continueToken: string | undefined;
    let version: string;
    const { kube, path, labelSelector, metadataOnly, pageSize } = this.opts;
    do {
      const query: Record<string, string> = { limit: String(pageSize ?? 500) };
      if (labelSelector) query['labelSelector'] = labelSelector;
      if (continueToken) query['continue'] = continueToken;
      const page = await kube.request<{ items: KubeObject[]; metadata: { resourceVersion: string; continue?: string } }>('GET', path, {
        query, signal: this.abort.signal, ...(metadataOnly ? { accept: metadataAccept.list } : {}),
      });
      if (this.stopped) return;
      for (const obj of page?.items ?? []) {
        const key = keyOf(obj);
        seen.add(key);
        const before = this.known.get(key);
        if (before?.metadata.resourceVersion === obj.metadata.resourceVersion) continue;
        this.known.set(key, metadataOf(obj));
        this.opts.onEvent(before ? 'update' : 'add', obj);
      }
      continueToken = page?.metadata.continue || undefined;
      version = page?.metadata.resourceVersion ?? '';
    } while (continueToken);
    for (const [key, last] of this.known) {
      if (seen.has(key)) continue;
      this.known.delete(key);
      this.opts.onEvent('delete', last);
    }
    this.resourceVersion = version;
  }

  /** Watches from the last version seen until the server ends the watch. */
  private async watch(): Promise<void> {
    const { kube, path, labelSelector, metadataOnly } = this.opts;
    const seconds = this.opts.watchSeconds ?? 300;
    const query: Record<string, string> = { resourceVersion: this.resourceVersion, allowWatchBookmarks: 'true', timeoutSeconds: String(seconds) };
    if (labelSelector) query['labelSelector'] = labelSelector;
    await kube.watch(path, query, (e) => {
      if (this.stopped) return;
      const obj = e.object;
      this.resourceVersion = obj.metadata.resourceVersion ?? this.resourceVersion;
      if (e.type === 'BOOKMARK') return;
      const key = keyOf(obj);
      if (e.type === 'DELETED') {
        this.known.delete(key);
        this.opts.onEvent('delete', obj);
        return;
      }
      const existed = this.known.has(key);
      this.known.set(key, metadataOf(obj));
      this.opts.onEvent(existed ? 'update' : 'add', obj);
    }, { ...(metadataOnly ? { accept: metadataAccept.watch } : {}), signal: this.abort.signal, timeoutMs: (seconds + 30) * 1000 });
  }
}

function keyOf(obj: KubeObject): string {
  return `${obj.metadata.namespace ?? ''}/${obj.metadata.name}`;
}

/** What is kept of an object: its metadata, without the managed fields (the largest part of most objects). */
function metadataOf(obj: KubeObject): KubeObject {
  const { managedFields: _m, ...metadata } = obj.metadata;
  return { apiVersion: obj.apiVersion, kind: obj.kind, metadata };
}
