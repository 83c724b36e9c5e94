import type { KubeObject } from './client.ts';
import type { ObjectRef } from './resources.ts';

/** The resourceVersion a watch last delivered for an object, or undefined when no watch follows it. */
export type LatestVersion = (ref: ObjectRef) => string | undefined;

/**
 * Objects as the operator last had them in hand (a watch event, an apply's or a patch's answer), served instead of
 * a GET only while they are current: while their resourceVersion is the one the watcher's watch last delivered for
 * the same object. A pass signalled by a watch event then reads nothing the event did not already bring, and a
 * status write's compare-and-swap still catches anything the watch has not shown yet. Without a watcher in the
 * process (a worker-only replica, a standby) nothing is current and every read goes to the API server.
 *
 * Kept as JSON (a one-byte string per object, no managed fields) in a bounded least-recently-used map: at most
 * `capacity` objects, a few KB each. A miss costs the GET it saves.
 */
export class RecentObjects {
  private readonly objects = new Map<string, { version: string; json: string }>();
  private latest: LatestVersion | undefined;
  private readonly capacity: number;
  /** Reads served from here and reads that went to the API server (for the benchmark and tests). */
  readonly counts = { served: 0, missed: 0 };

  constructor(capacity = 4096) {
    this.capacity = capacity;
  }

  /** Starts judging currency by `latest` (the watcher's), or stops (undefined: no watch, nothing is current). */
  follow(latest: LatestVersion | undefined): void {
    this.latest = latest;
  }

  /** Keeps `obj` as it is now (answers and watch events alike; the newest by arrival wins, currency decides use). */
  remember(obj: KubeObject | null | undefined): void {
    const version = obj?.metadata?.resourceVersion;
    if (!obj || !version) return;
    const key = keyOf(obj.apiVersion, obj.kind, obj.metadata.namespace, obj.metadata.name);
    const { managedFields: _m, ...metadata } = obj.metadata;
    this.objects.delete(key);
    this.objects.set(key, { version, json: JSON.stringify({ ...obj, metadata }) });
    if (this.objects.size > this.capacity) this.objects.delete(this.objects.keys().next().value!);
  }

  /** Drops what is kept of an object (it is gone, or a write on it conflicted: the next read must go to the server). */
  forget(ref: ObjectRef): void {
    this.objects.delete(keyOf(ref.apiVersion, ref.kind, ref.namespace, ref.name));
  }

  /** A copy of the object if what is kept is current, else undefined (read it from the API server). */
  current<T = KubeObject>(ref: ObjectRef): T | undefined {
    const key = keyOf(ref.apiVersion, ref.kind, ref.namespace, ref.name);
    const kept = this.objects.get(key);
    const latest = kept && this.latest?.(ref);
    if (!kept || latest === undefined || latest !== kept.version) {
      this.counts.missed++;
      return undefined;
    }
    this.objects.delete(key);
    this.objects.set(key, kept);
    this.counts.served++;
    return JSON.parse(kept.json) as T;
  }

  get size(): number {
    return this.objects.size;
  }
}

function keyOf(apiVersion: string, kind: string, namespace: string | undefined, name: string): string {
  return `${apiVersion}/${kind}/${namespace ?? ''}/${name}`;
}
