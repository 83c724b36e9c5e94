// Leader election over a coordination.k8s.io/v1 Lease, as client-go's leaderelection does it: every replica runs a
// worker, and only the replica holding the Lease runs the watcher, so events are translated into signals once.
import { hostname } from 'node:os';
import { setTimeout as sleep } from 'node:timers/promises';
import { LABEL_MANAGED_BY, MANAGED_BY } from '../api/constants.ts';
import { KubeError, type Kube, type KubeObject } from '../kube/client.ts';
import { collectionPath, objectPath, type ObjectRef } from '../kube/resources.ts';
import type { OperatorConfig } from './config.ts';
import type { Logger } from './log.ts';

const LEASE_API_VERSION = 'coordination.k8s.io/v1';
const LEASE_KIND = 'Lease';

/** The fields of a Lease's spec that leader election reads and writes. */
export interface LeaseSpec {
  holderIdentity?: string | null;
  leaseDurationSeconds?: number | null;
  acquireTime?: string | null;
  renewTime?: string | null;
  leaseTransitions?: number | null;
}

type Lease = KubeObject & { spec?: LeaseSpec };

/** What a candidate remembers of the Lease: the version it last saw, and when (by its own clock) that version appeared. */
export interface Observation {
  resourceVersion: string;
  observedAt: number;
}

/** What a candidate may do with the Lease as it stands. */
export type LeaseDecision =
  | { action: 'renew' }
  | { action: 'acquire'; why: 'released' | 'expired'; previousHolder: string }
  | { action: 'wait'; holder: string; expiresInMs: number };

/** The observation after reading the Lease at `now`: unchanged while the Lease is unchanged, restarted when it moved. */
export function observe(previous: Observation | undefined, resourceVersion: string, now: number): Observation {
  return previous?.resourceVersion === resourceVersion ? previous : { resourceVersion, observedAt: now };
}

/**
 * Decides whether `identity` holds, may take, or must wait for the Lease. Expiry is measured on the candidate's own
 * clock from the moment it saw the Lease last change, never from the holder's renewTime, so replicas whose clocks
 * disagree cannot both believe they lead (client-go does the same).
 */
export function decideLease(spec: LeaseSpec, observation: Observation, identity: string, now: number, defaultDurationSeconds: number): LeaseDecision {
  const holder = spec.holderIdentity ?? '';
  if (holder === identity) return { action: 'renew' };
  if (holder === '') return { action: 'acquire', why: 'released', previousHolder: '' };
  const durationMs = (spec.leaseDurationSeconds ?? defaultDurationSeconds) * 1000;
  const expiresInMs = observation.observedAt + durationMs - now;
  if (expiresInMs <= 0) return { action: 'acquire', why: 'expired', previousHolder: holder };
  return { action: 'wait', holder, expiresInMs };
}

/** The Lease spec to write when `identity` takes or renews it. */
export function nextLeaseSpec(current: LeaseSpec | null, decision: Exclude<LeaseDecision, { action: 'wait' }>, identity: string, durationSeconds: number, now: number): LeaseSpec {
  const at = microTime(now);
  const transitions = current?.leaseTransitions ?? 0;
  return {
    holderIdentity: identity,
    leaseDurationSeconds: durationSeconds,
    acquireTime: decision.action === 'renew' ? (current?.acquireTime ?? at) : at,
    renewTime: at,
    // Creating the Lease is not a transition; any later change of holder is (as client-go counts them).
    leaseTransitions: decision.action === 'acquire' && current !== null ? transitions + 1 : transitions,
  };
}

/** metav1.MicroTime wants exactly six fractional digits. */
export function microTime(ms: number): string {
  return new Date(ms).toISOString().replace(/\.(\d{3})Z$/, '.$1000Z');
}

export interface LeaderElectorOptions {
  kube: Kube;
  namespace: string;
  name: string;
  identity: string;
  /** How long a Lease stays valid without renewal (client-go: 15 s). */
  leaseDurationSeconds: number;
  /** The leader stops leading when it could not renew for this long; shorter than the lease duration (client-go: 10 s). */
  renewDeadlineSeconds: number;
  /** How often to try to acquire or renew (client-go: 2 s). */
  retryPeriodSeconds: number;
  log: Logger;
  /** The clock; tests pass their own. */
  now?: () => number;
}

export interface LeaderCallbacks {
  /** Called when this replica starts leading; not awaited, so renewals go on while the work starts. */
  onStartedLeading: () => void;
  /** Called when leading ends; awaited before the Lease is released, so two leaders never overlap on purpose. */
  onStoppedLeading: () => Promise<void> | void;
}

type Attempt = 'held' | 'other' | 'error';

/** Campaigns for a Lease; the holder renews it every retry period and releases it when stopped. */
export class LeaderElector {
  readonly identity: string;
  private readonly opts: LeaderElectorOptions;
  private readonly ref: ObjectRef;
  private readonly now: () => number;
  private observation: Observation | undefined;
  private current: Lease | null = null;
  private lastRenew = 0;
  private isLeading = false;
  private resignRequested = false;
  /** After resigning, stand aside this long so another replica can take the Lease. */
  private standAsideUntil = 0;
  private readonly abort = new AbortController();
  private loop: Promise<void> | undefined;

  constructor(opts: LeaderElectorOptions) {
    if (!(opts.retryPeriodSeconds < opts.renewDeadlineSeconds && opts.renewDeadlineSeconds < opts.leaseDurationSeconds)) {
      throw new Error('leader election needs retry period < renew deadline < lease duration');
    }
    this.opts = opts;
    this.identity = opts.identity;
    this.ref = { apiVersion: LEASE_API_VERSION, kind: LEASE_KIND, namespace: opts.namespace, name: opts.name };
    this.now = opts.now ?? Date.now;
  }

  /** True while this replica holds the Lease. */
  get leading(): boolean {
    return this.isLeading;
  }

  /** Starts campaigning in the background; the callbacks fire as leadership comes and goes. */
  start(callbacks: LeaderCallbacks): void {
    this.loop ??= this.campaign(callbacks).catch((err: unknown) => {
      this.opts.log.error({ err: errMessage(err), lease: this.leaseName() }, 'leader election stopped unexpectedly');
    });
  }

  /** Gives up leadership (releasing the Lease), stands aside for a lease duration, then campaigns again; used when leading could not start. */
  resign(): void {
    this.resignRequested = true;
  }

  /** Stops campaigning and, when leading, stops the leader's work and releases the Lease so another replica takes over at once. */
  async stop(): Promise<void> {
    this.abort.abort();
    await this.loop;
  }

  private leaseName(): string {
    return `${this.opts.namespace}/${this.opts.name}`;
  }

  private async campaign(callbacks: LeaderCallbacks): Promise<void> {
    const { log, retryPeriodSeconds, renewDeadlineSeconds } = this.opts;
    log.info({ lease: this.leaseName(), identity: this.identity }, 'campaigning for leadership');
    while (!this.abort.signal.aborted) {
      if (this.resignRequested && this.isLeading) {
        await this.stopLeading(callbacks, 'resigned');
        await this.release();
        this.standAsideUntil = this.now() + this.opts.leaseDurationSeconds * 1000;
      }
      this.resignRequested = false;
      const attempt = this.now() < this.standAsideUntil ? 'other' : await this.tryAcquireOrRenew();
      if (attempt === 'held') {
        this.lastRenew = this.now();
        if (!this.isLeading) {
          this.isLeading = true;
          log.info({ lease: this.leaseName(), identity: this.identity }, 'started leading');
          callbacks.onStartedLeading();
        }
      } else if (this.isLeading && (attempt === 'other' || this.now() - this.lastRenew >= renewDeadlineSeconds * 1000)) {
        // Another replica holds it, or ours may have expired in their eyes: stop before two leaders overlap.
        await this.stopLeading(callbacks, attempt === 'other' ? 'another replica holds the lease' : 'could not renew within the renew deadline');
      }
      // Candidates spread their attempts (client-go's jitter) so they do not hit the API server in step.
      const waitMs = retryPeriodSeconds * 1000 * (this.isLeading ? 1 : 1 + Math.random() * 0.2);
      await sleep(waitMs, undefined, { signal: this.abort.signal }).catch(() => undefined);
    }
    if (this.isLeading) {
      await this.stopLeading(callbacks, 'stopping');
      await this.release();
    }
  }

  private async stopLeading(callbacks: LeaderCallbacks, why: string): Promise<void> {
    this.isLeading = false;
    this.opts.log[why === 'stopping' ? 'info' : 'warn']({ lease: this.leaseName(), identity: this.identity, why }, 'stopped leading');
    await callbacks.onStoppedLeading();
  }

  private async tryAcquireOrRenew(): Promise<Attempt> {
    const { kube, log, leaseDurationSeconds } = this.opts;
    const now = this.now();
    // A hung request must not outlast the renew deadline; half of it leaves room for one more try. A stop does not
    // wait for it at all.
    const timeoutMs = Math.max(1000, (this.opts.renewDeadlineSeconds * 1000) / 2);
    const signal = this.abort.signal;
    try {
      const lease = await kube.request<Lease>('GET', objectPath(this.ref), { allowNotFound: true, timeoutMs, signal });
      if (!lease) {
        const fresh: Lease = {
          apiVersion: LEASE_API_VERSION, kind: LEASE_KIND,
          metadata: { name: this.opts.name, namespace: this.opts.namespace, labels: { [LABEL_MANAGED_BY]: MANAGED_BY } },
          spec: nextLeaseSpec(null, { action: 'acquire', why: 'released', previousHolder: '' }, this.identity, leaseDurationSeconds, now),
        };
        this.remember(await kube.request<Lease>('POST', collectionPath({ apiVersion: LEASE_API_VERSION, kind: LEASE_KIND, namespace: this.opts.namespace }), { body: fresh, timeoutMs, signal }), now);
        return 'held';
      }
      this.observation = observe(this.observation, lease.metadata.resourceVersion ?? '', now);
      this.current = lease;
      const decision = decideLease(lease.spec ?? {}, this.observation, this.identity, now, leaseDurationSeconds);
      if (decision.action === 'wait') return 'other';
      if (decision.action === 'acquire') log.info({ lease: this.leaseName(), why: decision.why, previousHolder: decision.previousHolder }, 'taking the lease');
      // PUT with the resourceVersion just read: if anyone wrote the Lease meanwhile, the API server answers 409.
      const updated = await kube.request<Lease>('PUT', objectPath(this.ref), {
        body: { ...lease, spec: nextLeaseSpec(lease.spec ?? null, decision, this.identity, leaseDurationSeconds, now) },
        timeoutMs, signal,
      });
      this.remember(updated, now);
      return 'held';
    } catch (err) {
      if (err instanceof KubeError && err.status === 409) {
        log.debug({ lease: this.leaseName() }, 'lost a race for the lease');
        return 'error';
      }
      if (!signal.aborted) log.warn({ lease: this.leaseName(), err: errMessage(err) }, 'could not acquire or renew the lease');
      return 'error';
    }
  }

  private remember(lease: Lease | null, now: number): void {
    this.current = lease;
    if (lease?.metadata.resourceVersion) this.observation = { resourceVersion: lease.metadata.resourceVersion, observedAt: now };
  }

  /**
   * Hands the Lease back (empty holder) so a waiting replica need not wait for it to expire. Our copy may be stale: a
   * renewal cut off by stop() can still have landed on the server. On a conflict the Lease is read again and released
   * if it still names us.
   */
  private async release(): Promise<void> {
    const { kube, log } = this.opts;
    let lease = this.current;
    for (let attempt = 1; ; attempt++) {
      if (!lease || lease.spec?.holderIdentity !== this.identity) return;
      try {
        await kube.request<Lease>('PUT', objectPath(this.ref), {
          body: { ...lease, spec: { ...lease.spec, holderIdentity: null, leaseDurationSeconds: 1, renewTime: microTime(this.now()) } },
          timeoutMs: 5_000,
        });
        log.info({ lease: this.leaseName() }, 'released the lease');
        return;
      } catch (err) {
        if (err instanceof KubeError && err.status === 409 && attempt < 3) {
          lease = await kube.request<Lease>('GET', objectPath(this.ref), { allowNotFound: true, timeoutMs: 5_000 }).catch(() => lease);
          continue;
        }
        // It will expire on its own after leaseDurationSeconds.
        log.warn({ lease: this.leaseName(), err: errMessage(err) }, 'could not release the lease');
        return;
      }
    }
  }
}

/** The identity this process campaigns as: the pod's name in a cluster, else host and pid. */
export function defaultIdentity(): string {
  return process.env['POD_NAME'] || `${hostname()}_${process.pid}`;
}

/** A LeaderElector configured from the operator's flags. */
export function electorFor(cfg: OperatorConfig, kube: Kube, log: Logger): LeaderElector {
  return new LeaderElector({
    kube, log,
    namespace: cfg.leaseNamespace,
    name: cfg.leaseName,
    identity: defaultIdentity(),
    leaseDurationSeconds: cfg.leaseDurationSeconds,
    renewDeadlineSeconds: cfg.leaseRenewDeadlineSeconds,
    retryPeriodSeconds: cfg.leaseRetryPeriodSeconds,
  });
}

/**
 * Runs `start` whenever this replica becomes leader and the stop function it returns when leadership ends, one
 * transition at a time. If `start` fails, the replica resigns so another can lead. `stop()` ends the campaign,
 * stops what is running and releases the Lease.
 */
export function runWhileLeader(elector: LeaderElector, start: () => Promise<() => Promise<void>>, log: Logger): { stop: () => Promise<void> } {
  let chain = Promise.resolve();
  let stopRunning: (() => Promise<void>) | undefined;
  const stopCurrent = async () => {
    const s = stopRunning;
    stopRunning = undefined;
    await s?.().catch((err: unknown) => log.error({ err: errMessage(err) }, 'stopping the leader-only work failed'));
  };
  elector.start({
    onStartedLeading: () => {
      chain = chain.then(async () => {
        try {
          stopRunning = await start();
          // Leadership may have ended while starting.
          if (!elector.leading) await stopCurrent();
        } catch (err) {
          log.error({ err: errMessage(err) }, 'could not start the leader-only work; resigning');
          elector.resign();
        }
      });
    },
    onStoppedLeading: () => {
      chain = chain.then(stopCurrent);
      return chain;
    },
  });
  return {
    stop: async () => {
      await elector.stop();
      await chain;
      await stopCurrent();
    },
  };
}

function errMessage(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}
