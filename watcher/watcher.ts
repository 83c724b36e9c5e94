import { SpanKind, SpanStatusCode } from '@opentelemetry/api';
import { WorkflowExecutionAlreadyStartedError, type Client } from '@temporalio/client';
import {
  API_VERSION, FINALIZER, KIND, finalizerRelease, LABEL_MANAGED_BY, LABEL_NAME, LABEL_VERSION, MANAGED_BY, RELEASE_ANNOTATION, RELEASE_KIND, rolloutInFlight, STABLE_VERSION, terminalReleasePhases,
} from '../api/constants.ts';
import type { Kube, KubeObject } from '../kube/client.ts';
import { Reflector } from '../kube/reflector.ts';
import type { RecentObjects } from '../kube/recent.ts';
import type { ObjectRef } from '../kube/resources.ts';
import { tracer } from '../lib/trace.ts';
import { collectionPath } from '../kube/resources.ts';
import type { Logger } from '../operator/log.ts';
import { childKinds, kinds, type ChildKind } from '../render/children.ts';
import { deploymentSignature, podSignature, routeAcceptedCondition, routeSignature, type ObservedDeployment, type ObservedPod, type ObservedRoute } from '../reconcile/status.ts';
import type { applicationWorkflow } from '../workflows/application.ts';
import type { releaseWorkflow } from '../workflows/release/workflow.ts';
import {
  applicationPatchLevel, applicationWorkflowId, applicationWorkflowType, changedSignal, releaseWorkflowId, releaseWorkflowType,
  type ChangeReason, type ChangeSignal, type LoopOptions, type ReleaseWorkflowInput,
} from '../workflows/contract.ts';
import { appNameKey, appNamespaceKey, appPhaseKey } from '../workflows/search-attributes.ts';
import { changeReason, childLabel, podChangeReason, reasonStrength, routeVerdict, settledRecord, startupDrift, statusMatters, type Observation, type SettledRecord, type StartOutcome, type WatchEvent } from './change.ts';
import { ourNewestWrite, type ManagedFieldsEntry } from '../kube/managed-fields.ts';
import { Sweeper, workflowObject, type SweepFindings } from './sweep.ts';

export interface WatcherOptions {
  kube: Kube;
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
  /** How often to check Temporal's side (workflows lost, rollouts closed without finishing); 0 turns it off. */
  sweepSeconds?: number;
  /** Called with what each sweep found (for metrics). */
  onSweep?: (found: SweepFindings) => void;
  /**
   * Objects in hand that reconcile passes in this process read instead of a GET: the watcher keeps the whole
   * Applications and Deployments its watches deliver there, and says which resourceVersion is current.
   */
  recent?: RecentObjects;
  /**
   * A worker of this process polls the task queue over the client's own connection (a NativeConnection): a new
   * Application's workflow is then started with a plain start that asks Temporal to hand its first workflow task
   * back in the answer (eager start), instead of a signal-with-start whose task goes through Temporal's matching.
   */
  eagerStart?: boolean;
  /** Called after each plain start of a new Application's workflow (for metrics): how its first task came. */
  onStart?: (how: StartOutcome) => void;
}

interface Pending {
  reason: ChangeReason;
  object?: string;
  /** Every child an event of this burst said was edited or deleted (the signal's reason keeps only the strongest). */
  drifted?: Set<string>;
  /** The Application's namespace is being deleted (a deletion signal says so: its children go with the namespace). */
  namespaceGoing?: boolean;
  timer?: NodeJS.Timeout;
  attempts: number;
}

/** One collection's reflector and, while it fails, what went wrong (for /readyz). */
interface Informer {
  name: string;
  reflector: Reflector;
  failing?: FailingSince;
}

/** A run of failed list or watch attempts: the last error and when it came, since when it fails, and how often. */
export interface FailingSince {
  error: string;
  at: Date;
  since: Date;
  attempts: number;
}

type Obj = KubeObject & {
  metadata: KubeObject['metadata'] & {
    annotations?: Record<string, string>; labels?: Record<string, string>; deletionTimestamp?: string; finalizers?: string[];
    ownerReferences?: { apiVersion: string; kind: string; name: string }[]; managedFields?: ManagedFieldsEntry[];
  };
  status?: unknown;
};

/**
 * Translates Kubernetes events into workflow messages: one signal-with-start per Application per burst of events.
 * Its one write: the finalizer of an Application in a namespace being deleted and no rollout in flight, which has
 * nothing left to do (releaseAhead, releaseWithNamespace). Each collection is listed and watched by a Reflector, which resumes from its last
 * resourceVersion after an error (and relists when that expired), so no event is lost across a restart.
 */
export class Watcher {
  private readonly opts: Required<Omit<WatcherOptions, 'onSignal' | 'onStart' | 'onSweep' | 'loopOptions' | 'releaseOptions' | 'recent'>> & Pick<WatcherOptions, 'onSignal' | 'onStart' | 'onSweep' | 'loopOptions' | 'releaseOptions' | 'recent'>;
  private readonly informers: Informer[] = [];
  private readonly apps = new Map<string, Observation>();
  /** namespace/name -> metricsView of the Application (the reflectors keep no whole objects). */
  private readonly appViews = new Map<string, unknown>();
  private readonly releases = new Map<string, Observation>();
  private readonly children = new Map<string, Observation>();
  /** namespace/name -> the problem of a stable pod that cannot run (podSignature); pods without one are not kept. */
  private readonly podProblems = new Map<string, string>();
  /** Namespaces being deleted: the namespace controller deletes everything in them, so what it deletes is no drift. */
  private readonly namespacesGoing = new Set<string>();
  /** Finalizers to release: of an Application deleted with its namespace, or (ahead) of one whose namespace goes. */
  private readonly releasing = new Map<string, { obj: Obj; ahead: boolean }>();
  /** Applications whose finalizer the watcher released and whose DELETED event has not arrived yet. */
  private readonly released = new Set<string>();
  private releasesInFlight = 0;
  private readonly pending = new Map<string, Pending>();
  private readonly ready: string[] = [];
  private inFlight = 0;
  private stopped = false;
  private initialSync = true;
  /**
   * While the watcher starts (a restart, a new leadership): the settled Applications (change.ts settledRecord) it has
   * not signalled, to check against their children once every collection is listed (settleStartup); then undefined.
   */
  private startup: Map<string, SettledRecord> | undefined = new Map();
  /** While starting: namespace/name of an Application -> the verdict its HTTPRoute's reports make (change.ts routeVerdict). */
  private startupRoutes = new Map<string, string>();
  /** What the start found of the settled Applications: unchanged (left alone) and changed while away (resynced). */
  startupSummary: { unchanged: number; changed: number } | undefined;
  /** When each Application and Release was first seen: the sweep expects a workflow only of those seen a sweep ago. */
  private readonly firstSeen = new Map<string, number>();
  private sweepTimer: NodeJS.Timeout | undefined;
  /** Child kinds the cluster did not serve when last asked (at start, then at each sweep). */
  private unserved: ChildKind[] = [];
  private sweeping: Promise<void> | undefined;

  constructor(opts: WatcherOptions) {
    this.opts = { coalesceMs: 300, maxInFlight: 20, sweepSeconds: 30, eagerStart: false, ...opts };
  }

  /** True once every collection has been listed once: the watcher has seen every Application. */
  get synced(): boolean {
    return this.informers.length > 0 && this.informers.every((i) => i.reflector.synced);
  }

  /** Why the watcher has not synced yet (the collections not listed, the last error listing them); undefined once synced. */
  unsynced(): string | undefined {
    return unsyncedReport(this.informers.map((i) => ({ name: i.name, synced: i.reflector.synced, ...(i.failing ? { failing: i.failing } : {}) })));
  }

  /** The Applications as last seen, cut down to what the metrics read (operator/metrics.ts: phases, failures, rollouts). */
  applications(): unknown[] {
    return [...this.appViews.values()];
  }

  /** Signals waiting to be sent (for metrics and tests). */
  get backlog(): number {
    return this.pending.size;
  }

  /** Starts the informers; resolves once the Applications have been listed (children follow in the background). */
  async start(): Promise<void> {
    this.opts.recent?.follow((ref) => this.latestVersion(ref), (ref) => this.present(ref));
    const scopes = this.opts.namespaces.length ? this.opts.namespaces : [undefined];
    for (const ns of scopes) {
      this.addInformer(`applications${ns ? `/${ns}` : ''}`, collectionPath({ apiVersion: API_VERSION, kind: KIND, namespace: ns }), undefined, (type, obj) => this.onApplication(type, obj));
      this.addInformer(`releases${ns ? `/${ns}` : ''}`, collectionPath({ apiVersion: API_VERSION, kind: RELEASE_KIND, namespace: ns }), undefined, (type, obj) => this.onRelease(type, obj));
    }
    // A router's kinds exist only where its CRDs are installed (Istio's, the Gateway API's, Traefik's): the others are
    // not watched, and what is in hand knows none of them exists (a pass does not read them back).
    const served = await this.askServed(childKinds, true);
    for (const { k } of served.filter((x) => !x.ok && x.k.watched)) {
      this.opts.log.info({ kind: k.kind, apiVersion: k.apiVersion }, `not watching ${k.kind}: this cluster does not serve ${k.apiVersion} ${k.plural} (an Application routed through it is told so in its status)`);
    }
    this.unserved = served.filter((x) => !x.ok).map((x) => x.k);
    this.opts.recent?.notServed(this.unserved);
    const watchedKinds = served.filter((x) => x.ok && x.k.watched).map((x) => x.k);
    for (const ns of scopes) {
      for (const c of watchedKinds) {
        const path = collectionPath({ apiVersion: c.apiVersion, kind: c.kind, namespace: ns });
        // Only a Deployment's and an HTTPRoute's status wake anything; of the other children the metadata is all the watcher reads.
        this.addInformer(`${c.kind}${ns ? `/${ns}` : ''}`, path, `${LABEL_MANAGED_BY}=${MANAGED_BY}`, (type, obj) => this.onChild(c.kind, type, obj), !statusMatters(c.kind));
      }
      // Stable pods, for what keeps one from running: nothing in its Deployment's status changes when it cannot start.
      this.addInformer(`Pod${ns ? `/${ns}` : ''}`, collectionPath({ apiVersion: 'v1', kind: 'Pod', namespace: ns }),
        `${LABEL_MANAGED_BY}=${MANAGED_BY},${LABEL_VERSION}=${STABLE_VERSION}`, (type, obj) => this.onStablePod(type, obj));
    }
    // Which namespaces are being deleted (metadata only: the deletionTimestamp is all it reads). Listed with the
    // Applications, so that a namespace already going is known before its Applications' events.
    this.addInformer('namespaces', collectionPath({ apiVersion: 'v1', kind: 'Namespace' }), undefined, (type, obj) => this.onNamespace(type, obj), true);
    // Applications (and Releases) first, so children events can be matched to a known Application.
    const appInformers = this.informers.filter((i) => i.name.startsWith('applications') || i.name.startsWith('releases') || i.name === 'namespaces');
    await Promise.all(appInformers.map((i) => i.reflector.start()));
    this.initialSync = false;
    await Promise.all(this.informers.filter((i) => !appInformers.includes(i)).map((i) => i.reflector.start()));
    this.settleStartup(new Set(watchedKinds.map((k) => k.kind)));
    if (this.opts.sweepSeconds > 0 && !this.stopped) {
      const sweeper = new Sweeper(this.opts.temporal, this.opts.taskQueue);
      this.sweepTimer = setInterval(() => {
        this.sweeping ??= this.sweep(sweeper).finally(() => { this.sweeping = undefined; });
      }, this.opts.sweepSeconds * 1000);
    }
  }

  /**
   * Asks Temporal whether every Application and Release the watcher knows has its workflow, starts the missing ones
   * (a full pass each: a rollout in flight is taken up from status), signals the workflows whose object is gone (it
   * was deleted while no watcher watched: the pass finds it gone, a rollout in flight is aborted, the workflow ends),
   * and tells Application workflows about rollouts whose workflow closed without finishing.
   */
  private async sweep(sweeper: Sweeper): Promise<void> {
    await this.recheckServed();
    const settled = Date.now() - this.opts.sweepSeconds * 1000;
    const expect = (map: Map<string, Observation>, prefix: 'app' | 'release') => [...map.entries()]
      .filter(([key, o]) => (!o.deleting || o.finalizer) && (this.firstSeen.get(`${prefix}:${key}`) ?? Infinity) <= settled && !this.pending.has(`${prefix}:${key}`))
      .map(([key]) => key);
    const apps = expect(this.apps, 'app');
    // A Release whose generation is over has no workflow running, and needs none until it changes.
    const releases = expect(this.releases, 'release').filter((key) => this.releases.get(key)?.status !== SETTLED);
    // Orphans only once every Application and Release has been listed: before that, unknown is not gone.
    const listed = this.informers.filter((i) => i.name.startsWith('applications') || i.name.startsWith('releases')).every((i) => i.reflector.synced);
    try {
      const found = await sweeper.sweep({
        applications: { ids: apps.map((k) => applicationWorkflowId(...(k.split('/') as [string, string]))), known: this.apps.size },
        releases: { ids: releases.map((k) => releaseWorkflowId(...(k.split('/') as [string, string]))), known: this.releases.size },
      }, listed ? (id) => this.knowsWorkflow(id) : undefined);
      for (const id of found.missing) {
        const o = workflowObject(id);
        if (!o) continue;
        this.opts.log.warn({ workflowId: id }, `no workflow runs for ${o.kind} ${o.namespace}/${o.name} (Temporal lost it, or it was terminated): starting it`);
        this.enqueue(`${o.target}:${o.namespace}/${o.name}`, 'resync');
      }
      for (const id of found.orphans) {
        const o = workflowObject(id);
        if (!o) continue;
        this.opts.log.warn({ workflowId: id }, `a workflow runs for ${o.kind} ${o.namespace}/${o.name}, which no longer exists (deleted while no watcher watched): telling it, so that it ends`);
        this.enqueue(`${o.target}:${o.namespace}/${o.name}`, 'deleted', undefined, { signalOnly: true });
      }
      if (found.endedRollouts) this.opts.log.warn({ count: found.endedRollouts }, 'told Application workflows of rollouts whose workflow closed without finishing');
      this.opts.onSweep?.(found);
    } catch (err) {
      if (!this.stopped) this.opts.log.warn({ err: errMessage(err) }, 'sweep of Temporal\'s workflows failed; trying again at the next one');
    }
  }

  /** Whether the cluster serves each of `kinds` (`unknown`: what to take when discovery does not answer). */
  private askServed(kinds: readonly ChildKind[], unknown: boolean): Promise<{ k: ChildKind; ok: boolean }[]> {
    return Promise.all(kinds.map(async (k) => ({ k, ok: await this.opts.kube.serves(k.apiVersion, k.plural).catch(() => unknown) })));
  }

  /**
   * Asks again whether the kinds the cluster did not serve at start are served now (their CRDs installed since):
   * what is in hand stops ruling their objects out (another process may have made some). Watching them takes a
   * restart, as the start-up log says.
   */
  private async recheckServed(): Promise<void> {
    if (!this.unserved.length) return;
    const now = await this.askServed(this.unserved, false);
    const installed = now.filter((x) => x.ok).map((x) => x.k);
    if (!installed.length) return;
    this.opts.log.info({ kinds: installed.map((k) => `${k.kind}.${k.apiVersion}`) }, 'the cluster serves kinds it did not when the watcher started: read from the API server from now on (restart the operator to watch them)');
    this.unserved = now.filter((x) => !x.ok).map((x) => x.k);
    this.opts.recent?.notServed(this.unserved);
  }

  /**
   * Whether a running workflow's object is one the watcher knows (or is not its to judge: another namespace than it
   * watches, an id of another shape): an unknown one is an orphan candidate for the sweep.
   */
  private knowsWorkflow(workflowId: string): boolean {
    const o = workflowObject(workflowId);
    if (!o) return true;
    if (this.opts.namespaces.length > 0 && !this.opts.namespaces.includes(o.namespace)) return true;
    const key = `${o.namespace}/${o.name}`;
    return (o.target === 'app' ? this.apps : this.releases).has(key) || this.pending.has(`${o.target}:${key}`);
  }

  /**
   * Ends the start. A settled Application whose children are as its status recorded them (none missing, added or
   * edited while no watcher was watching) and whose stable Deployment says what its status says needs no pass: its
   * workflow waits in Temporal, and the sweep starts it again if Temporal lost it. The others get their resync now,
   * as do all of them when a collection could not be listed.
   */
  private settleStartup(watchedKinds: ReadonlySet<string>): void {
    const waiting = this.startup;
    const routes = this.startupRoutes;
    this.startup = undefined;
    this.startupRoutes = new Map();
    if (!waiting || this.stopped) return;
    const listed = new Map<string, string[]>();
    const deployments = new Map<string, string>();
    for (const [key, c] of this.children) {
      if (!c.owner || !waiting.has(c.owner)) continue;
      const name = key.slice(key.lastIndexOf('/') + 1);
      const of = listed.get(c.owner) ?? [];
      of.push(childLabel({ kind: c.kind, name, generation: c.generation }));
      listed.set(c.owner, of);
      if (c.kind === kinds.deployment.kind && c.owner.endsWith(`/${name}`)) deployments.set(c.owner, c.status);
    }
    const unlisted = this.informers.filter((i) => !i.reflector.synced).map((i) => i.name);
    let resynced = 0;
    for (const [key, record] of waiting) {
      const drift = unlisted.length ? `not listed: ${unlisted.join(', ')}` : startupDrift(record, listed.get(key) ?? [], watchedKinds, deployments.get(key), routes.get(key));
      if (!drift) continue;
      resynced++;
      this.opts.log.info({ application: key, drift }, 'settled Application changed while away: resyncing it');
      this.enqueue(`app:${key}`, 'resync');
    }
    this.startupSummary = { unchanged: waiting.size - resynced, changed: resynced };
    this.opts.log.info(this.startupSummary, `started: ${waiting.size - resynced} settled Applications unchanged since their last pass (not signalled), ${resynced} changed while away (resynced)`);
  }

  /** Stops the informers and drops pending signals (another replica, or the next start, checks every app again). */
  async stop(): Promise<void> {
    this.stopped = true;
    this.opts.recent?.follow(undefined);
    clearInterval(this.sweepTimer);
    await this.sweeping;
    await Promise.all(this.informers.map((i) => i.reflector.stop()));
    for (const p of this.pending.values()) clearTimeout(p.timer);
  }

  /** The resourceVersion the watches last delivered of an Application or a watched child (undefined: not watched, or gone). */
  latestVersion(ref: ObjectRef): string | undefined {
    const key = `${ref.namespace ?? ''}/${ref.name}`;
    if (ref.apiVersion === API_VERSION && ref.kind === KIND) return this.apps.get(key)?.resourceVersion;
    const child = this.children.get(`${ref.kind}/${key}`);
    return child && childKinds.some((k) => k.kind === ref.kind && k.apiVersion === ref.apiVersion) ? child.resourceVersion : undefined;
  }

  /**
   * Whether the watch sees an Application or a watched child (labelled as ours, owned by an Application), once that
   * collection is listed; undefined when it is not watched here (another kind, another namespace) or not listed yet.
   */
  present(ref: ObjectRef): boolean | undefined {
    const key = `${ref.namespace ?? ''}/${ref.name}`;
    const app = ref.apiVersion === API_VERSION && ref.kind === KIND;
    if (!app && !childKinds.some((k) => k.watched && k.kind === ref.kind && k.apiVersion === ref.apiVersion)) return undefined;
    const collection = app ? 'applications' : ref.kind;
    const informer = this.informers.find((i) => i.name === collection || i.name === `${collection}/${ref.namespace ?? ''}`);
    if (!informer?.reflector.synced) return undefined;
    return app ? this.apps.has(key) : this.children.has(`${ref.kind}/${key}`);
  }

  private addInformer(name: string, path: string, labelSelector: string | undefined, handler: (type: 'add' | 'update' | 'delete', obj: Obj) => void, metadataOnly = false): void {
    const informer: Informer = {
      name,
      reflector: new Reflector({
        kube: this.opts.kube, path, labelSelector, metadataOnly,
        onEvent: (type, obj) => {
          delete informer.failing;
          handler(type, obj);
        },
        onError: (err, retryInMs) => {
          if (this.stopped) return;
          const now = new Date();
          informer.failing = { error: err.message, at: now, since: informer.failing?.since ?? now, attempts: (informer.failing?.attempts ?? 0) + 1 };
          this.opts.log.warn({ informer: name, err: err.message, retryInMs }, 'informer stopped; restarting');
        },
      }),
    };
    this.informers.push(informer);
  }

  private onApplication(type: WatchEvent['type'], obj: Obj): void {
    const key = keyOf(obj);
    const now = observe(KIND, obj);
    const before = this.apps.get(key);
    if (type === 'delete') {
      this.opts.recent?.forget({ apiVersion: API_VERSION, kind: KIND, namespace: obj.metadata.namespace ?? '', name: obj.metadata.name });
      this.apps.delete(key);
      this.appViews.delete(key);
      this.firstSeen.delete(`app:${key}`);
    } else {
      if (!this.apps.has(key)) this.firstSeen.set(`app:${key}`, Date.now());
      this.apps.set(key, now);
      this.opts.recent?.remember(obj);
      this.appViews.set(key, metricsView(obj));
    }
    // A DELETED event carries the object as last stored (etcd's previous value), our finalizer included when the
    // watcher's own release let it go: for one it released, the deletion is news its workflow has yet to hear.
    const reason = type === 'delete' && this.released.delete(key) ? 'deleted' : changeReason(before, now, { type, initialSync: this.initialSync });
    // At start, a settled Application waits for its children to be listed (settleStartup) instead of a pass.
    const settled = reason === 'resync' && this.startup ? settledRecord(obj as Parameters<typeof settledRecord>[0]) : null;
    if (settled) this.startup!.set(key, settled);
    // A deleted object has nothing to start: its workflow, if it still runs, only needs to hear about it.
    else if (reason) {
      const namespaceGoing = reason === 'deleted' && this.namespacesGoing.has(obj.metadata.namespace ?? '');
      // Released here, the Application goes at once, and the workflow is signalled once that is done: the releases of
      // a namespace's worth do not queue behind as many workflow tasks. A release that fails signals it all the same.
      if (namespaceGoing && type !== 'delete' && now.finalizer && !rolloutInFlight(obj.status)) this.releaseWithNamespace(key, obj);
      else this.enqueue(`app:${key}`, reason, undefined, { signalOnly: type === 'delete', ...(namespaceGoing ? { namespaceGoing } : {}) });
    }
    // A Release follows the Applications it claimed: it hears when their rollouts move (or they go).
    const release = obj.metadata?.annotations?.[RELEASE_ANNOTATION];
    if (release && (type === 'delete' || now.status !== before?.status || now.generation !== before?.generation)) {
      this.enqueue(`release:${obj.metadata?.namespace ?? ''}/${release}`, 'child-status', `Application/${obj.metadata?.name ?? ''}`, { signalOnly: true });
    }
  }

  /**
   * Releases the finalizer of an Application deleted with its namespace when no rollout is in flight: there is
   * nothing for the finalizer to do (the namespace controller deletes its children), and a namespace of thousands
   * would otherwise wait for a workflow task per Application. The only write the watcher makes. Its workflow is
   * signalled by the deletion the release lets through: its pass finds the Application gone in what the watch saw,
   * without a read, and ends, saying so. A release that
   * fails (the Application changed meanwhile: a 409) is left to the workflow, signalled all the same, which
   * finalizes as it always does (and, told the namespace goes, leaves the children to it).
   */
  private releaseWithNamespace(key: string, obj: Obj): void {
    this.releasing.set(key, { obj, ahead: false });
    this.pumpReleases();
  }

  /**
   * A namespace is being deleted: its Applications will be, and none can be created in it again. The finalizers of
   * those with no rollout in flight are released now, while the namespace controller deletes pods, ReplicaSets and
   * Deployments first, instead of one by one once it reaches the Applications (a namespace of 1,000 waited 24 s more
   * for that). Only those whose whole object is in hand and current; the others are released as before, when their
   * deletion arrives. A pass that runs meanwhile (a spec change) puts the finalizer back, and then that path
   * releases it; a release refused because the Application changed (a 409) leaves it to that path too.
   */
  private releaseAhead(namespace: string): void {
    const recent = this.opts.recent;
    if (!recent) return;
    for (const [key, app] of this.apps) {
      if (!key.startsWith(`${namespace}/`) || !app.finalizer || app.deleting || this.releasing.has(key)) continue;
      const obj = recent.current<Obj>({ apiVersion: API_VERSION, kind: KIND, namespace, name: key.slice(namespace.length + 1) });
      if (!obj || rolloutInFlight(obj.status)) continue;
      this.releasing.set(key, { obj, ahead: true });
    }
    this.pumpReleases();
  }

  private pumpReleases(): void {
    while (this.releasesInFlight < this.opts.maxInFlight && this.releasing.size > 0 && !this.stopped) {
      const [key, { obj, ahead }] = this.releasing.entries().next().value as [string, { obj: Obj; ahead: boolean }];
      this.releasing.delete(key);
      this.releasesInFlight++;
      const ref = { apiVersion: API_VERSION, kind: KIND, namespace: obj.metadata.namespace ?? '', name: obj.metadata.name };
      const log = this.opts.log.child({ namespace: ref.namespace, name: ref.name });
      this.opts.kube.mergePatch(ref, finalizerRelease(obj.metadata))
        .then(
          // Its workflow is signalled by the deletion this release lets through (onApplication), by which time the
          // watch has seen it go: the pass finds it gone without a read. If the watch delivered it first, now.
          () => {
            log.info('released the finalizer: the namespace is being deleted, and its controller deletes the children');
            if (ahead) return; // not deleted yet: its DELETED event, without our finalizer, signals the workflow
            if (this.apps.has(key)) this.released.add(key);
            else this.enqueue(`app:${key}`, 'deleted', undefined, { signalOnly: true, namespaceGoing: true });
          },
          (err: unknown) => {
            if (ahead) {
              log.debug({ err: errMessage(err) }, 'could not release the finalizer ahead of the namespace controller; it is released when the Application\'s deletion arrives');
              return;
            }
            log.info({ err: errMessage(err) }, 'could not release the finalizer of an Application deleted with its namespace; its workflow will');
            this.enqueue(`app:${key}`, 'deleted', undefined, { namespaceGoing: true });
          },
        )
        .finally(() => {
          this.releasesInFlight--;
          this.pumpReleases();
        });
    }
  }

  private onNamespace(type: WatchEvent['type'], obj: Obj): void {
    const name = obj.metadata.name;
    if (type !== 'delete' && obj.metadata.deletionTimestamp) {
      if (this.namespacesGoing.has(name)) return;
      this.namespacesGoing.add(name);
      this.releaseAhead(name);
    } else this.namespacesGoing.delete(name);
  }

  private onRelease(type: WatchEvent['type'], obj: Obj): void {
    const key = keyOf(obj);
    const now = observe(RELEASE_KIND, obj);
    const before = this.releases.get(key);
    if (type === 'delete') {
      this.releases.delete(key);
      this.firstSeen.delete(`release:${key}`);
    } else {
      if (!this.releases.has(key)) this.firstSeen.set(`release:${key}`, Date.now());
      this.releases.set(key, now);
    }
    const reason = changeReason(before, now, { type, initialSync: this.initialSync });
    // A resync of a Release whose generation is over (every one, after a restart) would start a run only to end it.
    if (reason === 'resync' && now.status === SETTLED) return;
    if (reason) this.enqueue(`release:${key}`, reason, undefined, { signalOnly: type === 'delete' });
  }

  private onChild(kind: string, type: WatchEvent['type'], obj: Obj): void {
    const owner = obj.metadata.ownerReferences?.find((o) => o.kind === KIND && o.apiVersion === API_VERSION);
    if (!owner || !obj.metadata.namespace) return;
    const appKey = `${obj.metadata.namespace}/${owner.name}`;
    const childKey = `${kind}/${keyOf(obj)}`;
    const now: Observation = { ...observe(kind, obj), owner: appKey };
    const before = this.children.get(childKey);
    if (type === 'delete') this.children.delete(childKey);
    else this.children.set(childKey, now);
    // Only a whole object is worth keeping (the metadata-only watches bring no spec).
    if (statusMatters(kind) && type !== 'delete') this.opts.recent?.remember(obj);
    // Children of an app being deleted (or already gone) are the finalizer's business, and those of a namespace being
    // deleted the namespace controller's (it deletes pods and children before the Applications: no pass puts them back).
    const app = this.apps.get(appKey);
    if (!app || app.deleting || this.namespacesGoing.has(obj.metadata.namespace)) return;
    // A settled Application's children, as first listed, are compared all at once when the start ends.
    if (type === 'add' && !before && this.startup?.has(appKey)) {
      if (kind === kinds.httpRoute.kind && obj.metadata.name === owner.name) this.startupRoutes.set(appKey, routeVerdict(routeAcceptedCondition(obj as unknown as ObservedRoute, undefined)));
      return;
    }
    const reason = changeReason(before, now, { type, initialSync: this.initialSync });
    if (reason) this.enqueue(`app:${appKey}`, reason, `${kind}/${obj.metadata.name}`);
  }

  private onStablePod(type: WatchEvent['type'], obj: Obj): void {
    const app = obj.metadata.labels?.[LABEL_NAME];
    if (!app || !obj.metadata.namespace) return;
    const podKey = keyOf(obj);
    const before = this.podProblems.get(podKey);
    const now = type === 'delete' ? '' : podSignature(obj as unknown as ObservedPod);
    if (now) this.podProblems.set(podKey, now);
    else this.podProblems.delete(podKey);
    const appKey = `${obj.metadata.namespace}/${app}`;
    const known = this.apps.get(appKey);
    if (!known || known.deleting || this.namespacesGoing.has(obj.metadata.namespace)) return;
    const reason = podChangeReason(before, now);
    if (reason) this.enqueue(`app:${appKey}`, reason, `Pod/${obj.metadata.name}`);
  }

  /**
   * Queues a signal for `key`. The first event after a quiet spell goes out at once (a lone change should not wait);
   * events within `coalesceMs` of the last signal become one more signal at the end of that window, the strongest
   * reason winning, so a burst costs at most two.
   */
  private enqueue(key: string, reason: ChangeReason, object?: string, opts: { signalOnly?: boolean; namespaceGoing?: boolean } = {}): void {
    if (this.stopped) return;
    // Signalled anyway: nothing left to check for it when the start ends.
    if (key.startsWith('app:')) this.startup?.delete(key.slice(4));
    const p = this.pending.get(key);
    if (p) {
      if (reasonStrength[reason] > reasonStrength[p.reason]) {
        p.reason = reason;
        if (object) p.object = object;
      }
      if (reason === 'child' && object) (p.drifted ??= new Set()).add(object);
      if (opts.namespaceGoing) p.namespaceGoing = true;
      return;
    }
    const entry: Pending = {
      reason, attempts: 0, ...(object ? { object } : {}), ...(reason === 'child' && object ? { drifted: new Set([object]) } : {}), ...(opts.namespaceGoing ? { namespaceGoing: true } : {}),
    };
    this.pending.set(key, entry);
    const sinceLast = Date.now() - (this.lastSent.get(key) ?? 0);
    entry.timer = setTimeout(() => this.markReady(key, opts.signalOnly ?? false), Math.max(0, this.opts.coalesceMs - sinceLast));
  }

  /** When the last signal for each key went out (for coalescing); forgotten once the window has passed. */
  private readonly lastSent = new Map<string, number>();

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
    const signal: ChangeSignal = {
      reason: p.reason, ...(p.object ? { object: p.object } : {}), ...(p.drifted?.size ? { drifted: [...p.drifted] } : {}), ...(p.namespaceGoing ? { namespaceGoing: true } : {}),
    };
    // Taken off the map before the call so events that arrive meanwhile queue a new signal.
    this.pending.delete(key);
    this.lastSent.set(key, Date.now());
    setTimeout(() => {
      if (Date.now() - (this.lastSent.get(key) ?? 0) >= this.opts.coalesceMs) this.lastSent.delete(key);
    }, this.opts.coalesceMs).unref();
    const signalOnly = this.signalOnly.delete(key);
    // A workflow this starts begins with the phase status names (Pending for a new Application) as its AppPhase: its
    // first pass, which finds that phase, upserts nothing (an event and a visibility write fewer per create).
    const view = target === 'app' ? this.appViews.get(ref) as { status?: { phase?: string } } | undefined : undefined;
    const phase = target === 'app' ? (view?.status?.phase ?? 'Pending') : undefined;
    // Listed and never given a phase: an Application no pass has reached yet. Only for the Application's own
    // events: a child's comes after a pass created it (with its status write on the way), so a workflow runs.
    const fresh = view !== undefined && view.status?.phase === undefined && (p.reason === 'spec' || p.reason === 'resync');
    const searchAttributes = [{ key: appNamespaceKey, value: namespace }, { key: appNameKey, value: name }];
    const appSearchAttributes = phase ? [...searchAttributes, { key: appPhaseKey, value: phase }] : searchAttributes;
    const input = { namespace, name, patchLevel: applicationPatchLevel, ...(this.opts.loopOptions ? { options: this.opts.loopOptions } : {}) };
    const appStart = {
      workflowId,
      taskQueue: this.opts.taskQueue,
      typedSearchAttributes: appSearchAttributes,
      staticSummary: `Application ${namespace}/${name}`,
      staticDetails: `Reconciles the children and status of Application ${namespace}/${name}; canary rollouts run here too.`,
    };
    const signalApp = () => this.opts.temporal.workflow.getHandle(workflowId).signal(changedSignal, signal);
    const send = async () => {
      if (signalOnly) {
        await signalApp().catch((err: unknown) => {
          if (!(err instanceof Error && err.name === 'WorkflowNotFoundError')) throw err;
        });
      } else if (this.opts.eagerStart && fresh) {
        // A new Application (no status yet): most likely no workflow either. Started with the change in its input;
        // when one runs already (a second event before the first status), it is signalled instead.
        const how = await this.opts.temporal.workflow.start<typeof applicationWorkflow>(applicationWorkflowType, { ...appStart, args: [{ ...input, change: signal }], requestEagerStart: true })
          .then((h): StartOutcome => (h.eagerlyStarted ? 'eager' : 'queued'), async (err: unknown): Promise<StartOutcome> => {
            if (!(err instanceof WorkflowExecutionAlreadyStartedError)) throw err;
            await signalApp();
            return 'running';
          });
        this.opts.onStart?.(how);
      } else if (target === 'app') {
        await this.opts.temporal.workflow.signalWithStart<typeof applicationWorkflow, [ChangeSignal]>(applicationWorkflowType, {
          ...appStart, args: [input], signal: changedSignal, signalArgs: [signal],
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
    };
    try {
      // With tracing on, each signal starts a trace: the workflow's pass it wakes, its activities and their requests
      // to the API server are its spans (the client interceptor carries the context in the signal's headers).
      await tracer().startActiveSpan(`signal ${p.reason}: ${target === 'app' ? 'Application' : 'Release'} ${namespace}/${name}`, {
        root: true, kind: SpanKind.PRODUCER,
        attributes: { 'app.namespace': namespace, 'app.name': name, 'change.reason': p.reason, ...(p.object ? { 'change.object': p.object } : {}) },
      }, async (span) => {
        try {
          await send();
        } catch (err) {
          span.setStatus({ code: SpanStatusCode.ERROR, message: errMessage(err) });
          throw err;
        } finally {
          span.end();
        }
      });
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
        for (const o of p.drifted ?? []) (newer.drifted ??= new Set()).add(o);
        if (p.namespaceGoing) newer.namespaceGoing = true;
        newer.attempts = attempts;
      } else {
        const again: Pending = { ...p, attempts };
        this.pending.set(key, again);
        again.timer = setTimeout(() => this.markReady(key, signalOnly), delay);
      }
    }
  }
}

/**
 * What /readyz says while collections are not listed yet: how many and which, and the most recent error of those
 * failing, with since when and how many attempts (an API server that refuses or hangs shows here, not only in logs).
 */
export function unsyncedReport(informers: { name: string; synced: boolean; failing?: FailingSince }[]): string | undefined {
  const waiting = informers.filter((i) => !i.synced);
  if (waiting.length === 0) return undefined;
  const names = waiting.slice(0, 3).map((i) => i.name).join(', ') + (waiting.length > 3 ? ', ...' : '');
  const listed = `${waiting.length} of ${informers.length} collections not listed yet (${names})`;
  const failing = waiting.flatMap((i) => (i.failing ? [i.failing] : []));
  if (failing.length === 0) return `${listed}; listing`;
  const first = new Date(Math.min(...failing.map((f) => f.since.getTime())));
  const latest = failing.reduce((a, b) => (b.at > a.at ? b : a));
  const attempts = failing.reduce((n, f) => n + f.attempts, 0);
  return `${listed}; failing since ${first.toISOString().replace(/\.\d+Z$/, 'Z')} (${attempts} failed attempts), last: ${latest.error}`;
}

function observe(kind: string, obj: Obj): Observation {
  const meta = obj.metadata ?? {};
  const oursAt = kind !== KIND && kind !== RELEASE_KIND ? ourNewestWrite(meta.managedFields) : undefined;
  return {
    kind, generation: meta.generation, deleting: Boolean(meta.deletionTimestamp),
    status: statusOf(kind, obj), finalizer: (meta.finalizers ?? []).includes(FINALIZER),
    ...(meta.resourceVersion ? { resourceVersion: meta.resourceVersion } : {}),
    ...(oursAt ? { oursAt } : {}),
  };
}

/**
 * What of an object's status the watcher compares: of a Deployment, what decides the Application's phase; of an
 * HTTPRoute, what its Gateways report; for an Application in a Release, what its rollout says (the Release follows
 * it); nothing for the rest (our own status writes wake nobody, and no other child's status decides anything).
 */
function statusOf(kind: string, obj: Obj): string {
  if (kind === kinds.deployment.kind) return deploymentSignature(obj as unknown as ObservedDeployment);
  if (kind === kinds.httpRoute.kind) return routeSignature(obj as unknown as ObservedRoute);
  if (kind === RELEASE_KIND) return releaseSettled(obj) ? SETTLED : '';
  if (kind !== KIND) return '';
  if (!obj.metadata?.annotations?.[RELEASE_ANNOTATION]) return '';
  const s = obj.status as { phase?: string; observedGeneration?: number; canary?: { phase?: string; version?: string; step?: number } } | undefined;
  return JSON.stringify([s?.phase, s?.observedGeneration, s?.canary?.phase, s?.canary?.version, s?.canary?.step]);
}

/** A Release's status that says its current generation is over (its workflow has ended; only a change starts another). */
const SETTLED = 'settled';

function releaseSettled(obj: Obj): boolean {
  const s = obj.status as { phase?: string; observedGeneration?: number } | undefined;
  return !obj.metadata?.deletionTimestamp && s?.observedGeneration === obj.metadata?.generation && terminalReleasePhases.has(s?.phase ?? '');
}

function keyOf(obj: Obj): string {
  return `${obj.metadata.namespace ?? ''}/${obj.metadata.name}`;
}

function errMessage(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}

/**
 * What the metrics need of an Application: its name, phase and conditions, and the whole object only while a
 * rollout runs (its deadline is in the spec). A few hundred bytes per Application instead of the object.
 */
export function metricsView(obj: Obj): unknown {
  const status = (obj.status ?? {}) as { phase?: string; conditions?: { type: string; status: string; reason?: string }[]; canary?: { phase?: string } };
  if (rolloutInFlight(status)) return obj;
  return {
    metadata: { name: obj.metadata.name, namespace: obj.metadata.namespace },
    status: { phase: status.phase, conditions: status.conditions?.filter((c) => c.status === 'True').map((c) => ({ type: c.type, status: c.status, reason: c.reason })) },
  };
}
