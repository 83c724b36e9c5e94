import type { KubeObject } from './client.ts';
import type { ObjectRef } from './resources.ts';

/** The resourceVersion a watch last delivered for an object, or undefined when no watch follows it. */
export type LatestVersion = (ref: ObjectRef) => string | undefined;

/** Whether a watch that has listed the object's collection sees it; undefined when no such watch follows it. */
export type Presence = (ref: ObjectRef) => boolean | undefined;

/**
 * Objects as the operator last had them in hand (a watch event, an apply's, a patch's or a read's answer), served
 * instead of a GET only while they are current: while they are at least as new as what the watcher's watch last
 * delivered of the same object. Resource versions of one object compare (Kubernetes guarantees it from 1.35,
 * KEP-5504; etcd revisions always did): a copy this process wrote or read after the watch's last delivery is newer
 * than it, so a read right after this process's own write is served its answer, never the object as it was before
 * the write, and a copy older than the watch's is never served. A version that does not compare (not a plain
 * number: an aggregated API server's) is current only while equal to the watch's. A pass signalled by a watch event
 * then reads nothing the event did not already bring, and a status write's compare-and-swap still catches anything
 * the watch has not shown yet. Without a watcher in the process (a worker-only replica, a standby) nothing is
 * current and every read goes to the API server.
 *
 * Kept as JSON (a one-byte string per object, no managed fields) in a bounded least-recently-used map: at most
 * `capacity` objects, a few KB each. A miss costs the GET it saves.
 */
export class RecentObjects {
  private readonly objects = new Map<string, { version: string; json: string }>();
  private latest: LatestVersion | undefined;
  private present: Presence | undefined;
  /**
   * The objects this process created or applied and has not deleted since (keys only, bounded like the copies): what
   * it may have made before the watch shows it, or before a status write could record it.
   */
  private readonly written = new Set<string>();
  private readonly capacity: number;
  private readonly kinds: ReadonlySet<string> | undefined;
  /** Reads served from here and reads that went to the API server (for the benchmark and tests). */
  readonly counts = { served: 0, missed: 0 };
  /** Kinds the cluster did not serve when the watcher started (`apiVersion/kind`): none of them can exist. */
  private unserved = new Set<string>();
  /** Kinds this process has written an object of (`apiVersion/kind`): served after all (a CRD installed since). */
  private readonly kindsWritten = new Set<string>();

  /** `kinds`: the kinds whose read and write answers are kept (keeps); all of them when not given. */
  constructor(capacity = 4096, kinds?: ReadonlySet<string>) {
    this.capacity = capacity;
    this.kinds = kinds;
  }

  /**
   * Starts judging currency by `latest` and existence by `present` (the watcher's), or stops (undefined: no watch,
   * nothing is current, and only this process's own writes tell what exists).
   */
  follow(latest: LatestVersion | undefined, present?: Presence): void {
    this.latest = latest;
    this.present = latest ? present : undefined;
    // What the watcher found not served holds only while it follows (another process may write such kinds).
    if (!latest) this.unserved = new Set();
  }

  /**
   * Keeps `obj` as it is now (answers and watch events alike). The newest version wins: a watch event that arrives
   * after a write's answer but is older than it (the watch catching up) leaves the answer in hand. Versions that do
   * not compare: the newest by arrival.
   */
  remember(obj: KubeObject | null | undefined): void {
    const version = obj?.metadata?.resourceVersion;
    if (!obj || !version) return;
    const key = keyOf(obj.apiVersion, obj.kind, obj.metadata.namespace, obj.metadata.name);
    const kept = this.objects.get(key);
    if (kept && (compareVersions(version, kept.version) ?? 0) < 0) return;
    const { managedFields: _m, ...metadata } = obj.metadata;
    this.objects.delete(key);
    this.objects.set(key, { version, json: JSON.stringify({ ...obj, metadata }) });
    if (this.objects.size > this.capacity) this.objects.delete(this.objects.keys().next().value!);
  }

  /**
   * A write of this process (Kube.onWrite): its answer is kept when its kind is, and anything kept of the object is
   * dropped otherwise (and for a delete). A read before the watch delivers the write is served the answer (it is
   * newer than what the watch delivered), never the copy from before the write (a route read back as it was before
   * its own change, a deleted canary as if it still ran).
   */
  wrote(ref: ObjectRef, answer: KubeObject | null): void {
    const key = keyOf(ref.apiVersion, ref.kind, ref.namespace, ref.name);
    // Served after all; not said by a delete (a finalizer's delete of every kind answers 404 for one not served).
    if (answer) this.kindsWritten.add(`${ref.apiVersion}/${ref.kind}`);
    // A write that took the last finalizer off an object being deleted deleted it: its answer is its last state.
    if (answer?.metadata?.deletionTimestamp && !(answer.metadata.finalizers as unknown[] | undefined)?.length) answer = null;
    this.written.delete(key);
    if (answer) {
      this.written.add(key);
      if (this.written.size > this.capacity) this.written.delete(this.written.values().next().value!);
    }
    if (answer?.metadata?.resourceVersion && this.keeps(answer.kind)) this.remember(answer);
    else this.objects.delete(key);
  }

  /**
   * Whether the object may exist, as far as this process can tell without a read: true when it wrote the object
   * (and did not delete it since) or a watch sees it, false when a watch that has listed its collection does not,
   * undefined when nothing here follows it (only a GET can tell).
   */
  mayExist(ref: ObjectRef): boolean | undefined {
    if (this.written.has(keyOf(ref.apiVersion, ref.kind, ref.namespace, ref.name))) return true;
    const kind = `${ref.apiVersion}/${ref.kind}`;
    // An Istio-only cluster has no HTTPRoute nor TraefikService: after a rollout every pass read both back (404s).
    if (this.unserved.has(kind) && !this.kindsWritten.has(kind)) return false;
    return this.present?.(ref);
  }

  /**
   * The kinds the cluster does not serve (the watcher asks at its start; each start replaces what an earlier one
   * said): no object of them exists, so none is read back, until this process writes one (its CRD installed since).
   */
  notServed(kinds: Iterable<{ apiVersion: string; kind: string }>): void {
    this.unserved = new Set([...kinds].map((k) => `${k.apiVersion}/${k.kind}`));
  }

  /** Whether objects of `kind` are kept from reads and write answers (the watcher's deliveries are kept regardless). */
  keeps(kind: string): boolean {
    return !this.kinds || this.kinds.has(kind);
  }

  /**
   * Drops what is kept of an object (it is gone, or a write on it conflicted: the next read must go to the server),
   * and that this process wrote it: whether it exists is the watch's to say again.
   */
  forget(ref: ObjectRef): void {
    const key = keyOf(ref.apiVersion, ref.kind, ref.namespace, ref.name);
    this.objects.delete(key);
    this.written.delete(key);
  }

  /** A copy of the object if what is kept is current, else undefined (read it from the API server). */
  current<T = KubeObject>(ref: ObjectRef): T | undefined {
    const key = keyOf(ref.apiVersion, ref.kind, ref.namespace, ref.name);
    const kept = this.objects.get(key);
    const latest = kept && this.latest?.(ref);
    if (!kept || latest === undefined || !(kept.version === latest || (compareVersions(kept.version, latest) ?? 0) > 0)) {
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

/**
 * How two resource versions of one object compare (negative: `a` is older), as Kubernetes defines it (KEP-5504): a
 * version is a decimal number without leading zeros, so the longer is newer and equal lengths compare digit by
 * digit. Undefined when either is not such a number (the versions are then opaque: only equality means anything).
 */
export function compareVersions(a: string, b: string): number | undefined {
  if (!plainNumber.test(a) || !plainNumber.test(b)) return undefined;
  if (a.length !== b.length) return a.length - b.length;
  return a < b ? -1 : a > b ? 1 : 0;
}

const plainNumber = /^[1-9][0-9]*$/;

function keyOf(apiVersion: string, kind: string, namespace: string | undefined, name: string): string {
  return `${apiVersion}/${kind}/${namespace ?? ''}/${name}`;
}
