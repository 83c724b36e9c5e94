// A Release as an entity: its state, the control requests it accepts, and the operations its story is told with
// (claim, start a wave, follow it, hold between waves, and on a failure or an abort stop the wave and roll the
// earlier ones back, last first). Decisions are the pure functions of decide.ts; the cluster is reached only
// through activities, by changing Applications' specs.
import {
  ActivityFailure, ApplicationFailure, CancellationScope, TimeoutFailure, condition, continueAsNew, getExternalWorkflowHandle, log, patched, proxyActivities, proxyLocalActivities,
  setCurrentDetails, workflowInfo,
} from '@temporalio/workflow';
import { duration, run, waitFor } from '../summary.ts';
import { historyFull } from '../kit/rollover.ts';
import { WrittenStatus } from '../kit/status.ts';
import { FailureType, ReleaseAppPhase, ReleasePhase, isTerminal, releaseAppKey } from '../../api/constants.ts';
import type { Activities } from '../../activities/index.ts';
import type { AppObservation } from '../../activities/release.ts';
import {
  controlSignals, rolloutWorkflowId, type ControlAction, type ControlRequest, type ReleaseAppState, type ReleaseCarry, type ReleasePosition, type ReleaseState,
  type ReleaseWorkflowInput,
} from '../contract.ts';
import { appPhase, appWords, changedSince, promoted, reverted, rollbackOrder, stopped, waveLabel, waveOutcome, type Want } from './decide.ts';
import type { ReleasePlan, WavePlan } from '../../reconcile/wave-plan.ts';
import type { releaseWorkflow } from './workflow.ts';

const acts = proxyActivities<Activities>({
  startToCloseTimeout: '30s',
  retry: { initialInterval: '200ms', backoffCoefficient: 2, maximumInterval: '10s', nonRetryableErrorTypes: ['ReleaseConflict', 'ApplicationGone'] },
});

// A release looks at its Applications on every poll while its waves wait: a local activity, one marker event.
const looks = proxyLocalActivities<Activities>({
  startToCloseTimeout: '30s',
  retry: { initialInterval: '200ms', backoffCoefficient: 2, maximumInterval: '10s' },
});

// A member cluster's work: tried twice, then the release holds (visibly) and tries again, instead of retrying out of sight.
const memberRetry = { initialInterval: '500ms', backoffCoefficient: 2, maximumInterval: '5s', maximumAttempts: 2, nonRetryableErrorTypes: ['ReleaseConflict', 'ApplicationGone', 'ClusterUnreachable'] };
const memberActs = proxyActivities<Activities>({ startToCloseTimeout: '40s', retry: memberRetry });
const memberLooks = proxyLocalActivities<Activities>({ startToCloseTimeout: '40s', retry: memberRetry });

/** Why a member cluster's work could not be done (the release holds and tries again), or undefined for any other failure. */
function unreachable(err: unknown): string | undefined {
  // An activity's failure comes wrapped in an ActivityFailure; a local activity's, as its ApplicationFailure itself.
  const cause = err instanceof ActivityFailure ? err.cause : err;
  if (cause instanceof ApplicationFailure) {
    if (cause.type === FailureType.ReleaseConflict || cause.type === FailureType.ApplicationGone) return undefined;
    return cause.type === FailureType.ClusterUnreachable ? cause.message : `${cause.type ?? 'error'}: ${cause.message}`;
  }
  if (cause instanceof TimeoutFailure) return 'no answer in time';
  return err instanceof ActivityFailure ? err.cause?.message ?? err.message : undefined;
}

/** A release's Applications grouped by cluster (the operator's own first, then members as first named). */
function byCluster<T extends { cluster?: string | undefined }>(items: T[]): [string | undefined, T[]][] {
  const groups = new Map<string | undefined, T[]>();
  for (const item of items) {
    const g = groups.get(item.cluster);
    if (g) g.push(item);
    else groups.set(item.cluster, [item]);
  }
  return [...groups].sort(([a], [b]) => (a === undefined ? -1 : b === undefined ? 1 : 0));
}

const inCluster = (cluster: string | undefined) => (cluster ? { cluster } : {});
/** The activities for a cluster: the operator's own with their retries, a member's tried twice before the release holds. */
const actsIn = (cluster: string | undefined) => (cluster ? memberActs : acts);

/** Why a release stops short of its end: an abort, a failed canary, a deleted Application, or the Release being deleted. */
class Stop extends Error {
  readonly phase: typeof ReleasePhase.Aborted | typeof ReleasePhase.RolledBack;
  readonly app: string | undefined;
  constructor(phase: typeof ReleasePhase.Aborted | typeof ReleasePhase.RolledBack, message: string, app?: string) {
    super(message);
    this.phase = phase;
    this.app = app;
  }
}

type EventType = 'Normal' | 'Warning';

/** A nap is woken by a request that came while the release was looking, not only during the nap. */
const napSincePatch = 'release-nap-since-look';


export class ReleaseEntity {
  readonly state: ReleaseState;
  readonly pollMs: number;
  private readonly input: ReleaseWorkflowInput;
  private abortRequest: ControlRequest | undefined;
  private promoteRequest: ControlRequest | undefined;
  /** Bumped by every control request and every change signal, so a waiting release wakes up and looks. */
  private wakes = 0;
  /** Signals of the watcher (any reason), and of those the ones that change the Release itself (not an Application's status). */
  private changes = 0;
  releaseChanges = 0;
  deleting = false;
  /** What status last said, so it is written only when it changes. */
  private written = new WrittenStatus();
  /** The last control request, passed on with what it asked for to the wave's canaries. */
  private lastRequest: ControlRequest = {};
  /** What the release last told each running canary (promote, pause, resume), so each is told once. */
  private told = new Map<string, 'promote' | 'pause' | 'resume'>();
  /** Where the story is, and the plan of the generation in progress: what a new run takes up. */
  private position: ReleasePosition = { at: 'claim' };
  private plan: ReleasePlan | undefined;

  /**
   * Decided once, at the run's first activation (a patch asked after a local activity in the same workflow task
   * cannot be replayed in place): whether this run naps by napSincePatch's rule.
   */
  private readonly napSinceLook = patched(napSincePatch);

  constructor(input: ReleaseWorkflowInput) {
    this.input = input;
    this.pollMs = (input.options?.pollSeconds ?? 30) * 1000;
    const c = input.carried;
    this.state = c?.state ?? {
      namespace: input.namespace, name: input.name, phase: ReleasePhase.Pending, wave: 0, waves: 0,
      message: 'reading the Release', pausedByUser: false, applications: [],
    };
    if (c) {
      this.plan = c.plan;
      this.position = c.position;
      this.abortRequest = c.abortRequest;
      this.promoteRequest = c.promoteRequest;
      this.deleting = c.deleting;
      this.written = new WrittenStatus(c.written);
      this.lastRequest = c.lastRequest;
      this.told = new Map(c.told);
    }
  }

  /** The plan of a generation a previous run was in the middle of. */
  get carriedPlan(): ReleasePlan | undefined {
    return this.input.carried?.plan;
  }

  // ---- signals, control and the query ----

  changed(reason: string): void {
    if (reason === 'deleted') this.deleting = true;
    this.changes++;
    if (reason !== 'child-status') this.releaseChanges++;
    this.wakes++;
  }

  /** Throws, with the message the caller sees, when `action` cannot be taken now. */
  validate(action: ControlAction): void {
    const { phase, pausedByUser } = this.state;
    const running = phase === ReleasePhase.Progressing || phase === ReleasePhase.Paused;
    if (action === 'abort') {
      if (!running) throw new Error(`the release is ${phase}: nothing to abort`);
      if (this.abortRequest) throw new Error('the release is already being aborted');
    } else if (!running) {
      throw new Error(`the release is ${phase}`);
    } else if (this.abortRequest) {
      throw new Error('the release is being aborted');
    } else if (action === 'pause' && pausedByUser) {
      throw new Error('the release is already paused');
    } else if (action === 'resume' && !pausedByUser) {
      // A wait for a promote between waves is an approval: resume lifts only a pause by request.
      throw new Error(this.waitingForPromote ? 'the release is not paused by request: it waits for a promote to start its next wave' : 'the release is not paused');
    }
  }

  /** Takes a validated request; control of the wave's running canaries is passed on to them. Returns the state after it. */
  accept(action: ControlAction, request: ControlRequest = {}): ReleaseState {
    const by = request.by ? ` by ${request.by}` : '';
    log.info(`release ${action} requested`, { ...request });
    if (action === 'abort') {
      this.abortRequest = request;
      this.state.message = `abort requested${by}${request.reason ? `: ${request.reason}` : ''}`;
    } else if (action === 'promote') {
      // Go on: the running canaries promote, a hold between waves ends, a pause is lifted.
      this.promoteRequest = request;
      this.state.pausedByUser = false;
    } else if (action === 'pause') {
      this.state.pausedByUser = true;
    } else {
      this.state.pausedByUser = false;
    }
    this.lastRequest = request;
    this.wakes++;
    return this.snapshot();
  }

  /** Waits for the next signal of the watcher (how runs from before releaseEndsPatch wait once their generation is over). */
  async waitForChange(): Promise<void> {
    const seen = this.changes;
    await condition(() => this.changes !== seen);
  }

  snapshot(): ReleaseState {
    return { ...this.state, applications: this.state.applications.map((a) => ({ ...a })) };
  }

  // ---- the story ----

  /**
   * Runs one generation of the Release to its end: claims the Applications, runs the waves in order, and on a
   * failure, an abort or a deletion stops the current wave and rolls the earlier ones back, last first.
   */
  async run(plan: ReleasePlan): Promise<void> {
    this.plan = plan;
    if (this.position.at === 'claim') {
      this.abortRequest = undefined;
      this.promoteRequest = undefined;
      this.state.generation = plan.generation;
      this.state.waves = plan.waves.length;
      this.state.wave = 0;
      this.state.failedApplication = undefined;
      this.state.applications = plan.waves.flatMap((w, i) => w.apps.map((a) => ({ name: a.name, ...inCluster(a.cluster), wave: i + 1, phase: ReleaseAppPhase.Waiting, canaryVersion: a.canaryVersion })));
      this.state.heldByCluster = undefined;
      await this.publish(ReleasePhase.Progressing, `claiming ${this.state.applications.length} Application(s)`);

      // Cluster by cluster (one claim each, all or none within it); a refusal in one lets go of the clusters before it.
      const claimed: (string | undefined)[] = [];
      // Each with its wave's steps, which the claim checks its spec can take (a header step needs a proxy).
      for (const [cluster, apps] of byCluster(plan.waves.flatMap((w) => w.apps.map((a) => ({ ...a, ...(w.steps ? { steps: w.steps } : {}) }))))) {
        const where = cluster ? ` in cluster ${cluster}` : '';
        let claim;
        try {
          claim = await this.reach(cluster, 'claiming its Applications', () => run(actsIn(cluster).claimApplications,
            `claim ${apps.map((a) => a.name).join(', ')}${where}`, { namespace: this.state.namespace, release: this.state.name, ...inCluster(cluster), apps: apps.map(({ cluster: _c, ...a }) => a) }), true);
        } catch (err) {
          if (!(err instanceof Stop)) throw err;
          // Aborted (or deleted) while a cluster held the claim: nothing ran yet; what was claimed is let go.
          for (const c of claimed) await this.letGo(c);
          this.state.heldByCluster = undefined;
          for (const a of this.state.applications) a.message = 'not claimed: the Release was stopped before its first wave';
          await this.publish(err.phase, `${err.message} before the first wave (cluster ${cluster} could not be reached to claim its Applications); nothing was rolled out`,
            { reason: err.phase === ReleasePhase.Aborted ? 'ReleaseAborted' : 'ReleaseRolledBack', type: 'Warning' });
          this.position = { at: 'claim' };
          return;
        }
        if (!claim.ok) {
          for (const c of claimed) await this.letGo(c);
          // Nothing was claimed: each Application says why the Release could not take it (or that another's problem stopped it).
          for (const a of this.state.applications) {
            a.phase = ReleaseAppPhase.Refused;
            a.message = (a.cluster === cluster ? claim.refused.find((r) => r.name === a.name)?.message : undefined) ?? 'not claimed: the Release was refused for another Application';
          }
          await this.publish(ReleasePhase.Failed, `refused: ${claim.message}`, { reason: 'ReleaseRefused', type: 'Warning' });
          return;
        }
        claimed.push(cluster);
        for (const c of claim.apps) {
          Object.assign(this.app(releaseAppKey({ name: c.name, cluster })), {
            image: c.image, previousImage: c.previousImage, ...(c.previousDeploymentImage ? { previousDeploymentImage: c.previousDeploymentImage } : {}),
          });
        }
      }
      this.position = { at: 'wave', wave: 0, stage: 'hold' };
    }

    try {
      if (this.position.at === 'compensate') {
        const { stop } = this.position;
        throw new Stop(stop.phase === 'Aborted' ? ReleasePhase.Aborted : ReleasePhase.RolledBack, stop.message, stop.app);
      }
      const from = this.position.at === 'wave' ? this.position : { wave: 0, stage: 'hold' as const };
      for (let i = from.wave; i < plan.waves.length; i++) {
        const wave = plan.waves[i]!;
        const stage = i === from.wave ? from.stage : 'hold';
        if (stage === 'hold') {
          this.position = { at: 'wave', wave: i, stage: 'hold' };
          await this.holdWhilePaused(waveLabel(i, wave));
          this.throwIfStopped();
          await this.startWave(i, wave);
        }
        if (stage !== 'between') {
          this.position = { at: 'wave', wave: i, stage: 'follow' };
          await this.followWave(i, wave);
        }
        if (i < plan.waves.length - 1) await this.pauseBetweenWaves(i, plan.pauseBetweenWavesMs);
      }
      await this.letGoAll();
      await this.publish(ReleasePhase.Promoted, `all ${plan.waves.length} wave(s) promoted`, { reason: 'ReleasePromoted', type: 'Normal' });
    } catch (err) {
      if (!(err instanceof Stop)) throw err;
      const resumed = this.position.at === 'compensate';
      this.position = { at: 'compensate', stop: { phase: err.phase === ReleasePhase.Aborted ? 'Aborted' : 'RolledBack', message: err.message, ...(err.app ? { app: err.app } : {}) } };
      await CancellationScope.nonCancellable(() => this.compensate(err, resumed));
    }
    this.position = { at: 'claim' };
  }

  /**
   * Continues as new, carrying everything, once the history has grown past its limit or the server suggests it.
   * Called right after a wait ends, before any local activity resolves in the new workflow task, for the reason
   * Rollout.rollOverIfDue gives.
   */
  private async rollOverIfDue(): Promise<void> {
    if (!this.plan || !historyFull(this.input.options?.maxHistoryEvents)) return;
    const info = workflowInfo();
    log.info('continuing as new', { historyLength: info.historyLength, position: this.position.at });
    const carried: ReleaseCarry = {
      plan: this.plan, state: this.state, position: this.position, deleting: this.deleting, written: this.written.carried, lastRequest: this.lastRequest,
      told: [...this.told.entries()], ...(this.abortRequest ? { abortRequest: this.abortRequest } : {}), ...(this.promoteRequest ? { promoteRequest: this.promoteRequest } : {}),
    };
    const { carried: _c, ...input } = this.input;
    await continueAsNew<typeof releaseWorkflow>({ ...input, carried });
  }

  private async startWave(i: number, wave: WavePlan): Promise<void> {
    this.state.wave = i + 1;
    this.promoteRequest = undefined;
    this.told.clear();
    await this.publish(ReleasePhase.Progressing, `${waveLabel(i, wave)}: starting the canaries of ${wave.apps.map(appWords).join(', ')}`,
      { reason: 'ReleaseWaveStarted', type: 'Normal' });
    for (const a of wave.apps) {
      const input = {
        namespace: this.state.namespace, release: this.state.name, app: a.name, ...inCluster(a.cluster), canaryVersion: a.canaryVersion,
        ...(a.image ? { image: a.image } : {}), ...(wave.steps ? { steps: wave.steps } : {}), ...(wave.analysis ? { analysis: wave.analysis } : {}),
      };
      await this.reach(a.cluster, `starting the canary of ${a.name}`, () => run(actsIn(a.cluster).startCanary, `wave ${i + 1}: start canary ${a.canaryVersion} of ${appWords(a)}`, input), true);
      this.app(releaseAppKey(a)).phase = ReleaseAppPhase.Progressing;
    }
  }

  /** Follows a wave's canaries until all are promoted; a failed canary or a deleted Application stops the release. */
  private async followWave(i: number, wave: WavePlan): Promise<void> {
    const wants = this.wants(wave);
    for (;;) {
      // A request or change from here on wakes the nap below, even one that came while this look was under way.
      const woken = this.wakes;
      const seen = await this.observe(wants, true);
      for (const w of wants) this.track(w, seen);
      await this.steerCanaries(wants, seen);
      const outcome = waveOutcome(wants, seen);
      if (outcome.kind === 'promoted') {
        await this.publish(ReleasePhase.Progressing, `${waveLabel(i, wave)} promoted`, { reason: 'ReleaseWavePromoted', type: 'Normal' });
        return;
      }
      if (outcome.kind === 'failed') throw new Stop(ReleasePhase.RolledBack, outcome.message, outcome.app);
      this.throwIfStopped();
      await this.publish(this.state.pausedByUser ? ReleasePhase.Paused : ReleasePhase.Progressing, this.waveMessage(i, wave));
      await this.nap(this.pollMs, `wave ${i + 1}: look again`, woken);
    }
  }

  /** Between waves: a timed wait, a wait for a promote of the Release, or none. */
  private async pauseBetweenWaves(i: number, ms: number | null | undefined): Promise<void> {
    if (ms === undefined) return;
    const next = `wave ${i + 2}`;
    const at = this.position;
    const taken = at.at === 'wave' && at.stage === 'between' && at.wave === i;
    if (ms === null) {
      if (!taken) {
        this.promoteRequest = undefined;
        this.position = { at: 'wave', wave: i, stage: 'between', until: null };
        await this.publish(ReleasePhase.Paused, `waiting for a promote to start ${next}`, { reason: 'ReleasePaused', type: 'Normal' });
      }
      await this.until(() => this.promoteRequest !== undefined);
      return;
    }
    const until = taken && typeof at.until === 'number' ? at.until : Date.now() + ms;
    if (!taken) {
      this.position = { at: 'wave', wave: i, stage: 'between', until };
      await this.publish(ReleasePhase.Paused, `pausing ${Math.round(ms / 1000)} s before ${next} (a promote starts it now)`, { reason: 'ReleasePaused', type: 'Normal' });
    }
    await this.until(() => Date.now() >= until || this.promoteRequest !== undefined, { at: until, why: `pause ${duration(ms)} before ${next}` });
  }

  private get waitingForPromote(): boolean {
    return this.state.phase === ReleasePhase.Paused && !this.state.pausedByUser;
  }

  /** A person's pause holds the release before its next wave. */
  private async holdWhilePaused(what: string): Promise<void> {
    if (!this.state.pausedByUser) return;
    const text = `paused by request before ${what}`;
    if (this.state.phase !== ReleasePhase.Paused || this.state.message !== text) await this.publish(ReleasePhase.Paused, text, { reason: 'ReleasePaused', type: 'Normal' });
    await this.until(() => !this.state.pausedByUser);
  }

  /**
   * The saga's undo: stop the running canaries of the current wave (their rollouts compensate), then put back the
   * previous image of every Application this release promoted, last first, each verified (its stable Deployment
   * runs the old image again and it is Running); then let the Applications go and say what happened.
   */
  private async compensate(stop: Stop, resumed: boolean): Promise<void> {
    const aborted = stop.phase === ReleasePhase.Aborted;
    if (stop.app) {
      this.state.failedApplication = stop.app;
      this.app(stop.app).phase = ReleaseAppPhase.Failed;
    }
    // Whatever held the release gave way to the stop; a cluster still out of reach holds the undo as it comes to it.
    this.state.heldByCluster = undefined;
    const undoing = aborted ? ReleasePhase.Aborting : ReleasePhase.RollingBack;
    // Taken up by a new run: what is done stays done (the Applications' phases say what is left).
    if (!resumed) {
      await this.publish(undoing, `${aborted ? 'aborting' : 'rolling back'}: ${stop.message}`,
        { reason: aborted ? 'ReleaseAborting' : 'ReleaseRollingBack', type: 'Warning' });
    }
    const running = this.state.applications.filter((a) => a.phase === ReleaseAppPhase.Progressing);
    // The running canaries are aborted by the Release, so their rollouts say who stopped them and why (switching the
    // canary off in the spec, below, would read as an abort "by spec").
    const by = `Release ${this.state.name}${aborted && this.abortRequest?.by ? ` (abort by ${this.abortRequest.by})` : ''}`;
    for (const a of running) {
      if (a.cluster) {
        await this.reach(a.cluster, `aborting the canary of ${a.name}`, () => run(memberActs.signalCanary, `abort the canary of ${appWords(a)}`,
          { cluster: a.cluster!, namespace: this.state.namespace, app: a.name, workflowId: rolloutWorkflowId(this.state.namespace, a.name), signal: 'abort', request: { by, reason: stop.message } }), false);
        continue;
      }
      await getExternalWorkflowHandle(rolloutWorkflowId(this.state.namespace, a.name)).signal(controlSignals.abort, { by, reason: stop.message })
        .catch((err: unknown) => log.info(`the canary of ${a.name} takes no abort (its rollout is over or not started): its spec stops it`, { err: String(err) }));
    }
    // The failed canary is switched off too, so every Application's spec says what runs once the release is over.
    const failed = this.state.applications.filter((a) => a.phase === ReleaseAppPhase.Failed);
    for (const a of [...running, ...failed]) {
      await this.reach(a.cluster, `stopping the canary of ${a.name}`, () => run(actsIn(a.cluster).stopCanary, `stop canary ${a.canaryVersion} of ${appWords(a)}`,
        { namespace: this.state.namespace, app: a.name, ...inCluster(a.cluster), canaryVersion: a.canaryVersion }), false);
    }
    await this.waitFor('the stopped canaries to end', running, (o) => {
      const a = this.app(releaseAppKey(o));
      if (!stopped(o, a.canaryVersion)) return false;
      // One that made it to its promotion meanwhile is promoted: the rollback below puts it back too.
      a.phase = promoted(o, { name: a.name, canaryVersion: a.canaryVersion, image: a.image ?? '' }) ? ReleaseAppPhase.Promoted : ReleaseAppPhase.Stopped;
      return true;
    });
    const left: string[] = [];
    for (const a of rollbackOrder(this.state.applications)) {
      if (!a.image || !a.previousImage) continue;
      await this.publish(undoing, `${aborted ? 'aborting' : 'rolling back'}: ${appWords(a)} back to ${a.previousImage}`);
      await this.reach(a.cluster, `putting ${a.name} back`, () => run(actsIn(a.cluster).revertApplication, `revert ${appWords(a)} to ${a.previousImage}`, {
        namespace: this.state.namespace, app: a.name, ...inCluster(a.cluster), image: a.image!, previousImage: a.previousImage!, release: this.state.name,
        why: aborted ? `the Release was aborted${this.abortRequest?.by ? ` by ${this.abortRequest.by}` : ''}${stop.message === 'aborted' ? '' : `: ${stop.message}`}` : stop.message,
      }), false);
      // Someone changed its image since the Release promoted it (a hotfix, a revert by hand): the revert wrote nothing,
      // and their image stands. (Runs from before waited here for ever.)
      let changed: string | undefined;
      await this.waitFor(`${appWords(a)} to run ${a.previousImage} again`, [a], (o) => {
        if (reverted(o, a.previousImage!, a.previousDeploymentImage)) return true;
        changed = changedSince(o, a.image!, a.previousImage!);
        return changed !== undefined;
      });
      if (changed !== undefined) {
        left.push(`${appWords(a)} (${changed})`);
        a.message = `left at ${changed}: its image was changed after the Release promoted ${a.image}`;
        continue;
      }
      a.phase = ReleaseAppPhase.Reverted;
      a.message = `back to ${a.previousImage}`;
    }
    await this.letGoAll();
    const who = aborted && this.abortRequest?.by ? ` by ${this.abortRequest.by}` : '';
    const leftWords = left.length ? `; left as changed after its promotion: ${left.join(', ')}` : '';
    // A rollback's cause already says what failed ("the canary v2 of b was rolled back: ..."); an abort says who.
    await this.publish(stop.phase, `${aborted ? `aborted${who}: ` : ''}${stop.message}; every Application this release promoted runs its previous image again${leftWords}`,
      { reason: aborted ? 'ReleaseAborted' : 'ReleaseRolledBack', type: 'Warning' });
  }

  // ---- operations ----

  /** An Application of the release by its key (its name, or cluster/name in a member cluster). */
  private app(key: string): ReleaseAppState {
    const a = this.state.applications.find((x) => releaseAppKey(x) === key);
    if (!a) throw new Error(`no Application ${key} in the release`);
    return a;
  }

  private wants(wave: WavePlan): Want[] {
    return wave.apps.map((a) => ({ name: a.name, ...inCluster(a.cluster), canaryVersion: a.canaryVersion, image: this.app(releaseAppKey(a)).image ?? '' }));
  }

  /**
   * Looks at Applications, cluster by cluster (one look each). A member cluster that cannot be reached holds the
   * release until it answers (an abort or a deletion ends the hold when `abortable`).
   */
  private async observe(apps: { name: string; cluster?: string | undefined }[], abortable: boolean): Promise<AppObservation[]> {
    const out: AppObservation[] = [];
    for (const [cluster, group] of byCluster(apps)) {
      const names = group.map((a) => a.name);
      out.push(...await this.reach(cluster, `looking at ${names.join(', ')}`, () => (cluster
        ? run(memberLooks.observeApplications, `observe ${names.join(', ')} in cluster ${cluster}`, { namespace: this.state.namespace, cluster, apps: names })
        : run(looks.observeApplications, `observe ${names.join(', ')}`, { namespace: this.state.namespace, apps: names })), abortable));
    }
    return out;
  }

  /**
   * Runs `call` on a cluster; when it is a member that cannot be reached, the release says so (status.heldByCluster,
   * the message, an Event) and tries again at every wake or poll until it answers. With `abortable`, an abort or a
   * deletion ends the wait (the undo then reaches what it can, holding again where it must).
   */
  private async reach<T>(cluster: string | undefined, what: string, call: () => Promise<T>, abortable: boolean): Promise<T> {
    for (;;) {
      const woken = this.wakes;
      try {
        const out = await call();
        if (cluster && this.state.heldByCluster === cluster) {
          this.state.heldByCluster = undefined;
          await this.publish(this.state.phase, `cluster ${cluster} answers again: ${what}`, { reason: 'ClusterReachable', type: 'Normal' });
        }
        return out;
      } catch (err) {
        const why = cluster ? unreachable(err) : undefined;
        if (why === undefined) throw err;
        const first = this.state.heldByCluster !== cluster;
        this.state.heldByCluster = cluster;
        const text = `held: cluster ${cluster} cannot be reached (${what}): ${why}; the release goes on when it answers${abortable ? ', or rolls back on abort' : ''}`;
        log.warn(text);
        await this.publish(this.state.phase, text, first ? { reason: 'ClusterUnreachable', type: 'Warning' } : undefined);
        // At most every 5 s, at least every second: a member down for hours costs a handful of events a minute.
        await this.nap(Math.max(1000, Math.min(this.pollMs, 5000)), `cluster ${cluster} unreachable: try again`, woken);
        if (abortable) this.throwIfStopped();
      }
    }
  }

  /** Keeps an Application's phase and message as its canary reports them. */
  private track(want: Want, seen: AppObservation[]): void {
    const o = seen.find((x) => releaseAppKey(x) === releaseAppKey(want));
    if (!o) return;
    const a = this.app(releaseAppKey(want));
    // Its image changed after the claim and before its promotion (a hotfix of what runs): a rollback puts that back.
    const hotfix = a.previousImage && !promoted(o, want) ? changedSince(o, want.image, a.previousImage) : undefined;
    if (hotfix !== undefined) {
      log.info('the image an Application runs changed after the claim: a rollback puts it back', { app: releaseAppKey(want), from: a.previousImage, to: hotfix });
      a.previousImage = hotfix;
      delete a.previousDeploymentImage;
    }
    a.phase = appPhase(o, want);
    a.message = !o.exists ? 'deleted' : o.canary?.version === want.canaryVersion ? `${o.canary.phase ?? 'starting'}: ${o.canary.message ?? ''}` : 'starting its canary';
  }

  private waveMessage(i: number, wave: WavePlan): string {
    const apps = this.state.applications.filter((a) => a.wave === i + 1);
    const done = apps.filter((a) => a.phase === ReleaseAppPhase.Promoted).length;
    return `${waveLabel(i, wave)}: ${done}/${apps.length} promoted${this.state.pausedByUser ? ', paused by request' : ''}`;
  }

  /** Waits (durably) until every named Application satisfies `done`, looking again at every wake or poll. */
  private async waitFor(what: string, apps: { name: string; cluster?: string | undefined }[], done: (o: AppObservation) => boolean): Promise<void> {
    let left = apps;
    while (left.length) {
      const woken = this.wakes;
      const seen = await this.observe(left, false);
      left = seen.filter((o) => !done(o));
      if (!left.length) return;
      log.info(`waiting for ${what}`, { left: left.map(releaseAppKey) });
      await this.nap(Math.min(this.pollMs, 5000), `waiting for ${what}: look again`, woken);
    }
  }

  /** Waits until `ok()`, honouring an abort or a deletion, and waking at `timer.at` when given (its timer says why). */
  private async until(ok: () => boolean, timer?: { at: number; why: string }): Promise<void> {
    for (;;) {
      this.throwIfStopped();
      if (ok()) return;
      const seen = this.wakes;
      if (timer === undefined) await condition(() => this.wakes !== seen || ok());
      else await waitFor(() => this.wakes !== seen || ok(), Math.max(1, timer.at - Date.now()), timer.why);
      await this.rollOverIfDue();
    }
  }

  /**
   * Sleeps up to ms, woken early by any request or change since `since` (the wake count when the caller last looked:
   * one that came while it was looking must not wait for the next poll); the timer reads `why` and when.
   */
  private async nap(ms: number, why: string, since: number): Promise<void> {
    // Runs from before this counted only the wakes during the nap itself (and so started its timer regardless).
    const from = this.napSinceLook ? since : this.wakes;
    if (this.wakes === from) await waitFor(() => this.wakes !== from, ms, `${why} in ${duration(ms)}`);
    await this.rollOverIfDue();
  }

  private throwIfStopped(): void {
    if (this.deleting) throw new Stop(ReleasePhase.Aborted, 'the Release is being deleted');
    if (this.abortRequest) throw new Stop(ReleasePhase.Aborted, this.abortRequest.reason ?? 'aborted');
  }

  /**
   * Tells each running canary of the wave what the release was asked (promote, pause, resume), once each, as soon
   * as its rollout exists: a request that came before a rollout started reaches it when it does.
   */
  private async steerCanaries(wants: Want[], seen: AppObservation[]): Promise<void> {
    const wanted = this.promoteRequest ? 'promote' : this.state.pausedByUser ? 'pause' : 'resume';
    for (const want of wants) {
      const key = releaseAppKey(want);
      const o = seen.find((x) => releaseAppKey(x) === key);
      const rolling = o?.exists && o.canary?.version === want.canaryVersion && o.canary.phase !== undefined && !isTerminal(o.canary.phase);
      const told = this.told.get(key);
      if (!rolling || told === wanted || (wanted === 'resume' && told === undefined)) continue;
      try {
        const workflowId = rolloutWorkflowId(this.state.namespace, want.name);
        // A member's rollout runs in its own operator's Temporal namespace: an activity signals it there.
        if (want.cluster) {
          const sent = await run(memberActs.signalCanary, `${wanted} the canary of ${appWords(want)}`, { cluster: want.cluster, namespace: this.state.namespace, app: want.name, workflowId, signal: wanted, request: this.lastRequest });
          if (!sent) continue;
        } else {
          await getExternalWorkflowHandle(workflowId).signal(controlSignals[wanted], this.lastRequest);
        }
        this.told.set(key, wanted);
      } catch (err) {
        log.warn(`could not ${wanted} the canary of ${appWords(want)}; trying again`, { err: String(err) });
      }
    }
  }

  /** Lets go of the release's Applications, cluster by cluster. */
  private async letGoAll(): Promise<void> {
    for (const [cluster] of byCluster(this.state.applications)) await this.letGo(cluster);
  }

  private async letGo(cluster: string | undefined): Promise<void> {
    const apps = this.state.applications.filter((a) => a.cluster === cluster).map((a) => a.name);
    if (!cluster) {
      await run(acts.releaseClaims, 'let the Applications go', { namespace: this.state.namespace, release: this.state.name, apps });
      return;
    }
    await this.reach(cluster, 'letting its Applications go', () => run(memberActs.releaseClaims, `let the Applications of cluster ${cluster} go`,
      { namespace: this.state.namespace, release: this.state.name, cluster, apps }), false);
  }

  /** Status everywhere: the Release's status (only when it changed) and an Event, the UI's current details, the log. */
  async publish(phase: string, message: string, event?: { reason: string; type: EventType }): Promise<void> {
    this.state.phase = phase;
    this.state.message = message;
    const s = this.state;
    setCurrentDetails([
      `**Release ${s.namespace}/${s.name}** — ${phase}`,
      s.waves ? `wave ${s.wave}/${s.waves}` : '',
      message,
      ...s.applications.map((a) => `- wave ${a.wave}: ${appWords(a)} ${a.canaryVersion}: ${a.phase}${a.message ? ` — ${a.message}` : ''}`),
    ].filter(Boolean).join('\n\n'));
    const status = {
      phase, wave: s.wave || null, waves: s.waves, message, observedGeneration: s.generation ?? null, failedApplication: s.failedApplication ?? null, heldByCluster: s.heldByCluster ?? null,
      applications: s.applications.map((a) => ({ ...a })),
    };
    if (!this.written.isNew(status) && !event) return;
    log.info(`${phase}: ${message}`);
    await run(acts.writeReleaseStatus, `status: ${phase}: ${message}`, { namespace: s.namespace, name: s.name, status, ...(event ? { event: { ...event, message } } : {}) });
    this.written.wrote(status);
  }
}
