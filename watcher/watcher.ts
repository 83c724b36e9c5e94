import { makeInformer, type Informer, type KubeConfig, type KubernetesObject, type ObjectCache } from '@kubernetes/client-node';
import type { Client } from '@temporalio/client';
import { API_VERSION, FINALIZER, KIND, LABEL_MANAGED_BY, MANAGED_BY } from '../api/constants.ts';
import { Kube } from '../kube/client.ts';
import { collectionPath } from '../kube/resources.ts';
import type { Logger } from '../operator/log.ts';
import { applicationWorkflowId, changedSignal, type ChangeReason, type LoopOptions } from '../workflows/messages.ts';
import { appNameKey, appNamespaceKey } from '../workflows/search-attributes.ts';

/** The kinds of children whose changes wake an Application's workflow. */
const childKinds = [
  { apiVersion: 'apps/v1', kind: 'Deployment' },
  { apiVersion: 'v1', kind: 'Service' },
  { apiVersion: 'v1', kind: 'PersistentVolumeClaim' },
  { apiVersion: 'autoscaling/v2', kind: 'HorizontalPodAutoscaler' },
  { apiVersion: 'networking.istio.io/v1', kind: 'VirtualService' },
  { apiVersion: 'networking.istio.io/v1', kind: 'DestinationRule' },
] as const;

// When several reasons arrive in one burst, the workflow needs only the strongest (any of them re-applies
// except child-status, which only refreshes status).
const strength: Record<ChangeReason, number> = { 'child-status': 0, resync: 1, child: 2, deleted: 3, spec: 4 };

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
  /** Called after each signal-with-start (for metrics). */
  onSignal?: (reason: ChangeReason, ok: boolean) => void;
}

interface Pending {
  reason: ChangeReason;
  object?: string;
  timer?: NodeJS.Timeout;
  attempts: number;
}

interface Seen {
  generation: number | undefined;
  deleting: boolean;
  statusHash: string;
}

type Obj = KubernetesObject & { status?: unknown };

/**
 * Translates Kubernetes events into workflow messages and nothing else: one signal-with-start per Application
 * per burst of events. Informers that stop on an error are restarted with backoff from their last resourceVersion,
 * so no event is lost across a restart.
 */
export class Watcher {
  private readonly opts: Required<Omit<WatcherOptions, 'onSignal' | 'loopOptions'>> & Pick<WatcherOptions, 'onSignal' | 'loopOptions'>;
  private readonly kube: Kube;
  private readonly informers: { name: string; informer: Informer<Obj> & ObjectCache<Obj>; started: boolean; backoffMs: number; timer?: NodeJS.Timeout }[] = [];
  private readonly apps = new Map<string, Seen>();
  private readonly children = new Map<string, Seen>();
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

  /** Signals waiting to be sent (for metrics and tests). */
  get backlog(): number {
    return this.pending.size;
  }

  /** Starts the informers; resolves once the Applications have been listed (children follow in the background). */
  async start(): Promise<void> {
    const scopes = this.opts.namespaces.length ? this.opts.namespaces : [undefined];
    for (const ns of scopes) {
      this.addInformer(`applications${ns ? `/${ns}` : ''}`, collectionPath(API_VERSION, KIND, ns), undefined, (type, obj) => this.onApplication(type, obj));
    }
    for (const ns of scopes) {
      for (const c of childKinds) {
        this.addInformer(`${c.kind}${ns ? `/${ns}` : ''}`, collectionPath(c.apiVersion, c.kind, ns), `${LABEL_MANAGED_BY}=${MANAGED_BY}`, (type, obj) => this.onChild(c.kind, type, obj));
      }
    }
    // Applications first, so children events can be matched to a known Application.
    const appInformers = this.informers.filter((i) => i.name.startsWith('applications'));
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
    const informer = makeInformer<Obj>(this.opts.kc, path, () => this.kube.list<Obj>(path, labelSelector), labelSelector);
    const entry: (typeof this.informers)[number] = { name, informer, started: false, backoffMs: 1000 };
    informer.on('add', (o) => { entry.backoffMs = 1000; handler('add', o); });
    informer.on('update', (o) => { entry.backoffMs = 1000; handler('update', o); });
    informer.on('delete', (o) => { entry.backoffMs = 1000; handler('delete', o); });
    informer.on('error', (err: unknown) => {
      if (this.stopped) return;
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
      // start() resolves even when its list fails (the error goes to the 'error' handler above).
      await entry.informer.start();
      entry.started = true;
    } catch (err) {
      this.opts.log.warn({ informer: entry.name, err: errMessage(err) }, 'informer failed to start');
    }
  }

  private onApplication(type: 'add' | 'update' | 'delete', obj: Obj): void {
    const key = keyOf(obj);
    const meta = obj.metadata ?? {};
    if (type === 'delete') {
      this.apps.delete(key);
      // With our finalizer the workflow itself finished the deletion; without it a running workflow must learn the app is gone.
      if (!(meta.finalizers ?? []).includes(FINALIZER)) this.enqueue(key, 'deleted', undefined, { signalOnly: true });
      return;
    }
    const now: Seen = { generation: meta.generation, deleting: Boolean(meta.deletionTimestamp), statusHash: '' };
    const before = this.apps.get(key);
    this.apps.set(key, now);
    if (!before) {
      this.enqueue(key, this.initialSync ? 'resync' : 'spec');
    } else if (now.deleting && !before.deleting) {
      this.enqueue(key, 'deleted');
    } else if (now.generation !== before.generation) {
      this.enqueue(key, 'spec');
    }
    // Anything else (our own status writes, labels) is not a reason to reconcile.
  }

  private onChild(kind: string, type: 'add' | 'update' | 'delete', obj: Obj): void {
    const owner = obj.metadata?.ownerReferences?.find((o) => o.kind === KIND && o.apiVersion === API_VERSION);
    if (!owner || !obj.metadata?.namespace) return;
    const appKey = `${obj.metadata.namespace}/${owner.name}`;
    const childKey = `${kind}/${keyOf(obj)}`;
    const app = this.apps.get(appKey);
    const now: Seen = { generation: obj.metadata.generation, deleting: Boolean(obj.metadata.deletionTimestamp), statusHash: JSON.stringify(obj.status ?? null) };
    const before = this.children.get(childKey);
    if (type === 'delete') this.children.delete(childKey);
    else this.children.set(childKey, now);
    // Children of an app being deleted (or already gone) are the finalizer's business.
    if (!app || app.deleting) return;
    const object = `${kind}/${obj.metadata.name}`;
    if (type === 'delete') {
      this.enqueue(appKey, 'child', object);
    } else if (type === 'update' && before) {
      if (now.generation !== before.generation) this.enqueue(appKey, 'child', object);
      else if (kind === 'Deployment' && now.statusHash !== before.statusHash) this.enqueue(appKey, 'child-status', object);
    } else if (type === 'add' && kind === 'Deployment' && !this.initialSync && before === undefined && now.statusHash !== 'null') {
      // A relist (after a 410) can show a Deployment whose status moved while we were not watching.
      this.enqueue(appKey, 'child-status', object);
    }
  }

  private enqueue(key: string, reason: ChangeReason, object?: string, opts: { signalOnly?: boolean } = {}): void {
    if (this.stopped) return;
    const p = this.pending.get(key);
    if (p) {
      if (strength[reason] > strength[p.reason]) {
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
    const [namespace, name] = key.split('/') as [string, string];
    const workflowId = applicationWorkflowId(namespace, name);
    const signalArgs = [{ reason: p.reason, ...(p.object ? { object: p.object } : {}) }] as const;
    // Taken off the map before the call so events that arrive meanwhile queue a new signal.
    this.pending.delete(key);
    const signalOnly = this.signalOnly.delete(key);
    try {
      if (signalOnly) {
        await this.opts.temporal.workflow.getHandle(workflowId).signal(changedSignal, ...signalArgs).catch((err: unknown) => {
          if (!(err instanceof Error && err.name === 'WorkflowNotFoundError')) throw err;
        });
      } else {
        await this.opts.temporal.workflow.signalWithStart('applicationWorkflow', {
          workflowId,
          taskQueue: this.opts.taskQueue,
          args: [{ namespace, name, ...(this.opts.loopOptions ? { options: this.opts.loopOptions } : {}) }],
          signal: changedSignal,
          signalArgs: [...signalArgs],
          typedSearchAttributes: [{ key: appNamespaceKey, value: namespace }, { key: appNameKey, value: name }],
          staticSummary: `Application ${namespace}/${name}`,
          staticDetails: `Reconciles the children and status of Application ${namespace}/${name}; canary rollouts run here too.`,
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
        if (strength[p.reason] > strength[newer.reason]) newer.reason = p.reason;
        newer.attempts = attempts;
      } else {
        const again: Pending = { ...p, attempts };
        this.pending.set(key, again);
        again.timer = setTimeout(() => this.markReady(key, signalOnly), delay);
      }
    }
  }
}

function keyOf(obj: KubernetesObject): string {
  return `${obj.metadata?.namespace ?? ''}/${obj.metadata?.name ?? ''}`;
}

function errMessage(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}
