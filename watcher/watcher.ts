import { makeInformer, type Informer, type KubeConfig, type KubernetesObject, type ObjectCache } from '@kubernetes/client-node';
import type { Client } from '@temporalio/client';
import { API_VERSION, FINALIZER, KIND, LABEL_MANAGED_BY, MANAGED_BY, RELEASE_ANNOTATION, RELEASE_KIND } from '../api/constants.ts';
import { Kube } from '../kube/client.ts';
import { collectionPath } from '../kube/resources.ts';
import type { Logger } from '../operator/log.ts';
import { childKinds } from '../render/children.ts';
import type { applicationWorkflow } from '../workflows/application.ts';
import type { releaseWorkflow } from '../workflows/release/workflow.ts';
import {
  applicationWorkflowId, applicationWorkflowType, changedSignal, releaseWorkflowId, releaseWorkflowType,
  type ChangeReason, type ChangeSignal, type LoopOptions, type ReleaseWorkflowInput,
} from '../workflows/contract.ts';
import { appNameKey, appNamespaceKey } from '../workflows/search-attributes.ts';
import { changeReason, reasonStrength, type Observation, type WatchEvent } from './change.ts';

export interface WatcherOptions {
  kc: KubeConfig;
  temporal: Client;
  taskQueue: string;
  /** Namespaces to watch; empty means all. */
  namespaces: string[];
  loopOptions?: Partial<LoopOptions>;
  /** Events for one Application within this window become one signal. */
  coalesceMs?: number;
  /** Signals in flight to Temporal at once. */
  maxInFlight?: number;
  log: Logger;
  /** Durations of Release workflows (tests shorten the safety-net poll). */
  releaseOptions?: ReleaseWorkflowInput['options'];
  /** Called after each signal-with-start (for metrics). */
  onSignal?: (reason: ChangeReason, ok: boolean) => void;
}

interface Pending {
  reason: ChangeReason;
  object?: string;
  timer?: NodeJS.Timeout;
  attempts: number;
}

type Obj = KubernetesObject & { status?: unknown };

/**
 * Translates Kubernetes events into workflow messages and nothing else: one signal-with-start per Application
 * per burst of events. Informers that stop on an error are restarted with backoff from their last resourceVersion,
 * so no event is lost across a restart.
 */
export class Watcher {
  private readonly opts: Required<Omit<WatcherOptions, 'onSignal' | 'loopOptions' | 'releaseOptions'>> & Pick<WatcherOptions, 'onSignal' | 'loopOptions' | 'releaseOptions'>;
  private readonly kube: Kube;
  private readonly informers: { name: string; informer: Informer<Obj> & ObjectCache<Obj>; started: boolean; errors: number; backoffMs: number; timer?: NodeJS.Timeout }[] = [];
  private readonly apps = new Map<string, Observation>();
  private readonly releases = new Map<string, Observation>();
  private readonly children = new Map<string, Observation>();
  private readonly pending = new Map<string, Pending>();
  private readonly ready: string[] = [];
  private inFlight = 0;
  private stopped = false;
  private initialSync = true;

  constructor(opts: WatcherOptions) {
    this.opts = { coalesceMs: 300, maxInFlight: 20, ...opts };
    this.kube = new Kube(opts.kc);
  }

  /** True once every informer has listed once: the watcher has seen every Application. */
  get synced(): boolean {
    return this.informers.length > 0 && this.informers.every((i) => i.started);
  }

  /** The Applications in the informers' caches (the metrics report running rollouts from them). */
  applications(): Obj[] {
    return this.informers.filter((i) => i.name.startsWith('applications')).flatMap((i) => i.informer.list());
  }

  /** Signals waiting to be sent (for metrics and tests). */
  get backlog(): number {
    return this.pending.size;
  }

  /** Starts the informers; resolves once the Applications have been listed (children follow in the background). */
  async start(): Promise<void> {
    const scopes = this.opts.namespaces.length ? this.opts.namespaces : [undefined];
    for (const ns of scopes) {
      this.addInformer(`applications${ns ? `/${ns}` : ''}`, collectionPath({ apiVersion: API_VERSION, kind: KIND, namespace: ns }), undefined, (type, obj) => this.onApplication(type, obj));
      this.addInformer(`releases${ns ? `/${ns}` : ''}`, collectionPath({ apiVersion: API_VERSION, kind: RELEASE_KIND, namespace: ns }), undefined, (type, obj) => this.onRelease(type, obj));
    }
    for (const ns of scopes) {
      for (const c of childKinds.filter((k) => k.watched)) {
        const path = collectionPath({ apiVersion: c.apiVersion, kind: c.kind, namespace: ns });
        this.addInformer(`${c.kind}${ns ? `/${ns}` : ''}`, path, `${LABEL_MANAGED_BY}=${MANAGED_BY}`, (type, obj) => this.onChild(c.kind, type, obj));
      }
    }
    // Applications (and Releases) first, so children events can be matched to a known Application.
    const appInformers = this.informers.filter((i) => i.name.startsWith('applications') || i.name.startsWith('releases'));
    await Promise.all(appInformers.map((i) => this.startInformer(i)));
    this.initialSync = false;
    await Promise.all(this.informers.filter((i) => !appInformers.includes(i)).map((i) => this.startInformer(i)));
  }

  /** Stops the informers and drops pending signals (another replica or the next start resyncs every app). */
  async stop(): Promise<void> {
    this.stopped = true;
    for (const i of this.informers) {
      clearTimeout(i.timer);
      await i.informer.stop();
    }
    for (const p of this.pending.values()) clearTimeout(p.timer);
  }

  private addInformer(name: string, path: string, labelSelector: string | undefined, handler: (type: 'add' | 'update' | 'delete', obj: Obj) => void): void {
    const informer = makeInformer<Obj>(this.opts.kc, path, () => this.kube.listPath<Obj>(path, labelSelector), labelSelector);
    const entry: (typeof this.informers)[number] = { name, informer, started: false, errors: 0, backoffMs: 1000 };
    informer.on('add', (o) => { entry.backoffMs = 1000; handler('add', o); });
    informer.on('update', (o) => { entry.backoffMs = 1000; handler('update', o); });
    informer.on('delete', (o) => { entry.backoffMs = 1000; handler('delete', o); });
    informer.on('error', (err: unknown) => {
      if (this.stopped) return;
      entry.errors++;
      const delay = entry.backoffMs;
      entry.backoffMs = Math.min(entry.backoffMs * 2, 30_000);
      this.opts.log.warn({ informer: name, err: errMessage(err), retryInMs: delay }, 'informer stopped; restarting');
      clearTimeout(entry.timer);
      entry.timer = setTimeout(() => void this.startInformer(entry), delay);
    });
    this.informers.push(entry);
  }

  private async startInformer(entry: (typeof this.informers)[number]): Promise<void> {
    if (this.stopped) return;
    try {
      // start() resolves even when its list fails (the error goes to the 'error' handler above, which restarts it):
      // only a start without an error has listed, so only that one makes the watcher synced.
      const errorsBefore = entry.errors;
      await entry.informer.start();
      if (entry.errors === errorsBefore) entry.started = true;
    } catch (err) {
      this.opts.log.warn({ informer: entry.name, err: errMessage(err) }, 'informer failed to start');
    }
  }

  private onApplication(type: WatchEvent['type'], obj: Obj): void {
    const key = keyOf(obj);
    const now = observe(KIND, obj);
    const before = this.apps.get(key);
    if (type === 'delete') this.apps.delete(key);
    else this.apps.set(key, now);
    const reason = changeReason(before, now, { type, initialSync: this.initialSync });
    // A deleted object has nothing to start: its workflow, if it still runs, only needs to hear about it.
    if (reason) this.enqueue(`app:${key}`, reason, undefined, { signalOnly: type === 'delete' });
    // A Release follows the Applications it claimed: it hears when their rollouts move (or they go).
    const release = obj.metadata?.annotations?.[RELEASE_ANNOTATION];
    if (release && (type === 'delete' || now.status !== before?.status)) {
      this.enqueue(`release:${obj.metadata?.namespace ?? ''}/${release}`, 'child-status', `Application/${obj.metadata?.name ?? ''}`, { signalOnly: true });
    }
  }

  private onRelease(type: WatchEvent['type'], obj: Obj): void {
    const key = keyOf(obj);
    const now = observe(RELEASE_KIND, obj);
    const before = this.releases.get(key);
    if (type === 'delete') this.releases.delete(key);
    else this.releases.set(key, now);
    const reason = changeReason(before, now, { type, initialSync: this.initialSync });
    if (reason) this.enqueue(`release:${key}`, reason, undefined, { signalOnly: type === 'delete' });
  }

  private onChild(kind: string, type: WatchEvent['type'], obj: Obj): void {
    const owner = obj.metadata?.ownerReferences?.find((o) => o.kind === KIND && o.apiVersion === API_VERSION);
    if (!owner || !obj.metadata?.namespace) return;
    const appKey = `${obj.metadata.namespace}/${owner.name}`;
    const childKey = `${kind}/${keyOf(obj)}`;
    const now = observe(kind, obj);
    const before = this.children.get(childKey);
    if (type === 'delete') this.children.delete(childKey);
    else this.children.set(childKey, now);
    // Children of an app being deleted (or already gone) are the finalizer's business.
    const app = this.apps.get(appKey);
    if (!app || app.deleting) return;
    const reason = changeReason(before, now, { type, initialSync: this.initialSync });
    if (reason) this.enqueue(`app:${appKey}`, reason, `${kind}/${obj.metadata.name}`);
  }

  private enqueue(key: string, reason: ChangeReason, object?: string, opts: { signalOnly?: boolean } = {}): void {
    if (this.stopped) return;
    const p = this.pending.get(key);
    if (p) {
      if (reasonStrength[reason] > reasonStrength[p.reason]) {
        p.reason = reason;
        if (object) p.object = object;
      }
      return;
    }
    const entry: Pending = { reason, attempts: 0, ...(object ? { object } : {}) };
    this.pending.set(key, entry);
    entry.timer = setTimeout(() => this.markReady(key, opts.signalOnly ?? false), this.opts.coalesceMs);
  }

  private readonly signalOnly = new Set<string>();

  private markReady(key: string, signalOnly: boolean): void {
    if (signalOnly) this.signalOnly.add(key);
    this.ready.push(key);
    this.pump();
  }

  private pump(): void {
    while (this.inFlight < this.opts.maxInFlight && this.ready.length > 0) {
      const key = this.ready.shift()!;
      this.inFlight++;
      void this.send(key).finally(() => {
        this.inFlight--;
        this.pump();
      });
    }
  }

  private async send(key: string): Promise<void> {
    const p = this.pending.get(key);
    if (!p) return;
    const [target, ref] = key.split(':') as ['app' | 'release', string];
    const [namespace, name] = ref.split('/') as [string, string];
    const workflowId = target === 'app' ? applicationWorkflowId(namespace, name) : releaseWorkflowId(namespace, name);
    const signal: ChangeSignal = { reason: p.reason, ...(p.object ? { object: p.object } : {}) };
    // Taken off the map before the call so events that arrive meanwhile queue a new signal.
    this.pending.delete(key);
    const signalOnly = this.signalOnly.delete(key);
    const searchAttributes = [{ key: appNamespaceKey, value: namespace }, { key: appNameKey, value: name }];
    try {
      if (signalOnly) {
        await this.opts.temporal.workflow.getHandle(workflowId).signal(changedSignal, signal).catch((err: unknown) => {
          if (!(err instanceof Error && err.name === 'WorkflowNotFoundError')) throw err;
        });
      } else if (target === 'app') {
        await this.opts.temporal.workflow.signalWithStart<typeof applicationWorkflow, [ChangeSignal]>(applicationWorkflowType, {
          workflowId,
          taskQueue: this.opts.taskQueue,
          args: [{ namespace, name, ...(this.opts.loopOptions ? { options: this.opts.loopOptions } : {}) }],
          signal: changedSignal,
          signalArgs: [signal],
          typedSearchAttributes: searchAttributes,
          staticSummary: `Application ${namespace}/${name}`,
          staticDetails: `Reconciles the children and status of Application ${namespace}/${name}; canary rollouts run here too.`,
        });
      } else {
        await this.opts.temporal.workflow.signalWithStart<typeof releaseWorkflow, [ChangeSignal]>(releaseWorkflowType, {
          workflowId,
          taskQueue: this.opts.taskQueue,
          args: [{ namespace, name, ...(this.opts.releaseOptions ? { options: this.opts.releaseOptions } : {}) }],
          signal: changedSignal,
          signalArgs: [signal],
          typedSearchAttributes: searchAttributes,
          staticSummary: `Release ${namespace}/${name}`,
          staticDetails: `Rolls the Applications of Release ${namespace}/${name} out in waves; when a canary fails, the earlier waves are rolled back.`,
        });
      }
      this.opts.onSignal?.(p.reason, true);
    } catch (err) {
      this.opts.onSignal?.(p.reason, false);
      if (this.stopped) return;
      // Temporal unreachable: keep the event (merged with any newer one) and retry with backoff.
      const attempts = p.attempts + 1;
      const delay = Math.min(100 * 2 ** attempts, 60_000);
      this.opts.log.warn({ namespace, name, err: errMessage(err), retryInMs: delay }, 'signal failed; will retry');
      const newer = this.pending.get(key);
      if (newer) {
        if (reasonStrength[p.reason] > reasonStrength[newer.reason]) newer.reason = p.reason;
        newer.attempts = attempts;
      } else {
        const again: Pending = { ...p, attempts };
        this.pending.set(key, again);
        again.timer = setTimeout(() => this.markReady(key, signalOnly), delay);
      }
    }
  }
}

function observe(kind: string, obj: Obj): Observation {
  const meta = obj.metadata ?? {};
  return {
    kind, generation: meta.generation, deleting: Boolean(meta.deletionTimestamp),
    status: statusOf(kind, obj), finalizer: (meta.finalizers ?? []).includes(FINALIZER),
  };
}

/**
 * What of an object's status the watcher compares: a child's whole status; for an Application in a Release, what
 * its rollout says (the Release follows it); nothing for the rest (our own status writes wake nobody).
 */
function statusOf(kind: string, obj: Obj): string {
  if (kind !== KIND) return kind === RELEASE_KIND ? '' : JSON.stringify(obj.status ?? null);
  if (!obj.metadata?.annotations?.[RELEASE_ANNOTATION]) return '';
  const s = obj.status as { phase?: string; canary?: { phase?: string; version?: string; step?: number } } | undefined;
  return JSON.stringify([s?.phase, s?.canary?.phase, s?.canary?.version, s?.canary?.step]);
}

function keyOf(obj: KubernetesObject): string {
  return `${obj.metadata?.namespace ?? ''}/${obj.metadata?.name ?? ''}`;
}

function errMessage(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}
