// A canary rollout as an entity: its state and the operations the workflow's story is told with (start, a step,
// a hold, promote, compensate), the control requests it accepts, and how it publishes itself. Decisions are the
// pure functions of decide.ts; the cluster is reached only through activities.
import { ActivityFailure, ApplicationFailure, CancellationScope, condition, isCancellation, log, setCurrentDetails } from '@temporalio/workflow';
import { Reason, RolloutPhase, isTerminal } from '../../api/constants.ts';
import type { Activities } from '../../activities/index.ts';
import type { CanaryRef } from '../../activities/types.ts';
import type { ControlAction, ControlRequest, RolloutInput, RolloutResult, RolloutState } from '../contract.ts';
import { gateVerdict, interruption, weightAfterGate, type Interruption } from './decide.ts';
import { describeStep, type PlanStep, type RolloutPlan } from './plan.ts';

/** The activities a rollout calls. */
export type RolloutActivities = Pick<Activities,
  'prepareCanary' | 'canaryHealth' | 'setCanaryWeight' | 'removeCanary' | 'promoteStable' | 'stableRolledOut'
  | 'restoreStableImage' | 'finishCanarySpec' | 'writeCanaryStatus'>;

/** Unwinds the story into compensation: an abort, failed gates or the deadline. */
export class Unwind extends Error {
  readonly interruption: Interruption;
  constructor(i: Interruption) {
    super(i.reason);
    this.interruption = i;
  }
}

interface Undo {
  what: string;
  run: () => Promise<unknown>;
}

type EventReason = (typeof Reason)[keyof typeof Reason];

export class Rollout {
  readonly state: RolloutState;
  private readonly plan: RolloutPlan;
  private readonly ref: CanaryRef;
  private readonly acts: RolloutActivities;
  private promoteRequest: ControlRequest | undefined;
  private abortRequest: ControlRequest | undefined;
  /** Bumped by every accepted control request, so a waiting rollout wakes up and looks. */
  private requests = 0;
  private resumes = 0;
  /** The weight the steps ask for; the routed weight (state.weight) is 0 while the canary has no ready replica. */
  private targetWeight = 0;
  private lastGateAt = 0;
  private deadline: number;
  /** Compensations, registered right after the step they undo succeeded; run in reverse. */
  private readonly undos: Undo[] = [];

  constructor(input: RolloutInput, acts: RolloutActivities) {
    const { namespace, name, plan } = input;
    this.plan = plan;
    this.ref = { namespace, name };
    this.acts = acts;
    const now = Date.now();
    this.deadline = now + plan.progressDeadlineMs;
    this.state = {
      namespace, name, key: plan.key, phase: RolloutPhase.Progressing, step: 0, totalSteps: plan.steps.length, weight: 0,
      message: 'starting', startedAt: new Date(now).toISOString(), pausedByUser: false,
      deadlineAt: new Date(this.deadline).toISOString(), gates: [], consecutiveFailures: 0,
    };
  }

  // ---- control: the same rules for updates (validated, answered) and signals (fire and forget) ----

  /** Throws, with the message the caller sees, when `action` cannot be accepted now. */
  validate(action: ControlAction): void {
    const { phase, pausedByUser } = this.state;
    const version = this.plan.version;
    if (action === 'promote' || action === 'abort') {
      if (isTerminal(phase)) throw new Error(`the rollout of ${version} is already ${phase}`);
      if (phase === RolloutPhase.Aborting || this.abortRequest) throw new Error(`the rollout of ${version} is ${action === 'abort' ? 'already ' : ''}being aborted`);
      if (action === 'promote' && (phase === RolloutPhase.Promoting || this.promoteRequest)) throw new Error(`the rollout of ${version} is already being promoted`);
    } else if (action === 'pause') {
      if (phase !== RolloutPhase.Progressing && phase !== RolloutPhase.Paused) throw new Error(`cannot pause a rollout that is ${phase}`);
      if (pausedByUser) throw new Error('the rollout is already paused');
    } else if (!pausedByUser && phase !== RolloutPhase.Paused) {
      throw new Error('the rollout is not paused');
    }
  }

  /** Takes a validated control request; returns the state after it. */
  accept(action: ControlAction, request: ControlRequest = {}): RolloutState {
    if (action === 'promote') this.promoteRequest = request;
    else if (action === 'abort') this.abortRequest = request;
    else if (action === 'pause') this.state.pausedByUser = true;
    else {
      this.state.pausedByUser = false;
      this.resumes++;
    }
    this.requests++;
    log.info(`${action} requested`, { ...request });
    return this.snapshot();
  }

  /** The state as the query answers it, with the time left in a timed pause. */
  snapshot(): RolloutState {
    const ends = this.state.pauseEndsAt ? Date.parse(this.state.pauseEndsAt) : undefined;
    return { ...this.state, gates: [...this.state.gates], ...(ends !== undefined ? { pauseRemainingMs: Math.max(0, ends - Date.now()) } : {}) };
  }

  get promoteRequested(): boolean {
    return this.promoteRequest !== undefined;
  }

  // ---- the story ----

  /** Creates the canary at 0% and checks it once. */
  async start(): Promise<void> {
    await this.publish(RolloutPhase.Progressing, `creating canary ${this.plan.version} (${this.plan.image})`, Reason.CanaryStarted);
    await this.acts.prepareCanary({ ...this.ref, plan: this.plan });
    this.onUndo('remove the canary (100% stable, subset and Deployment removed)', () => this.acts.removeCanary(this.ref));
    await this.checkGate();
  }

  /** Runs one step: a weight moves traffic once the gates pass; a pause waits for its time, a resume or a promote. */
  async runStep(index: number, step: PlanStep): Promise<void> {
    this.state.step = index;
    this.throwIfInterrupted(false);
    const text = describeStep(step, index, this.plan.steps.length);
    if (step.kind === 'weight') {
      this.targetWeight = step.weight;
      if (step.weight > 0) {
        await this.publish(RolloutPhase.Progressing, `${text}: waiting for ${this.plan.gates.minReadyReplicas} ready canary replica(s)`);
        await this.watch({ done: () => this.state.consecutiveFailures === 0 && this.state.gates.at(-1)?.ok === true });
      }
      if (this.state.weight !== step.weight) await this.route(step.weight);
      await this.publish(RolloutPhase.Progressing, text, Reason.CanaryStepCompleted);
      return;
    }
    const resumesAtStart = this.resumes;
    const until = step.ms === null ? undefined : Date.now() + step.ms;
    this.state.pauseEndsAt = until === undefined ? undefined : new Date(until).toISOString();
    await this.publish(RolloutPhase.Paused, text, Reason.CanaryPaused);
    await this.watch({ pause: true, ...(until !== undefined ? { until } : {}), done: () => this.promoteRequested || this.resumes !== resumesAtStart });
    this.state.pauseEndsAt = undefined;
    if (!this.promoteRequested) await this.publish(RolloutPhase.Progressing, `${text}: done`, Reason.CanaryResumed);
  }

  /** A user's pause holds the rollout before step `next` until resumed or promoted; gates keep running. */
  async holdWhilePaused(next: number): Promise<void> {
    if (!this.state.pausedByUser) return;
    await this.publish(RolloutPhase.Paused, `paused by request at ${describeStep(this.plan.steps[next], next, this.plan.steps.length)}`, Reason.CanaryPaused);
    await this.watch({ pause: true, done: () => !this.state.pausedByUser || this.promoteRequested });
  }

  /** Stable takes the canary's image and must be available before traffic leaves the canary; then the canary goes. */
  async promote(): Promise<RolloutResult> {
    this.throwIfInterrupted(false);
    this.state.step = this.plan.steps.length;
    const by = this.promoteRequest?.by ? ` by ${this.promoteRequest.by}` : '';
    await this.publish(RolloutPhase.Promoting, `promoting${by}: stable Deployment takes ${this.plan.image}`, Reason.CanaryPromoting);
    await this.acts.promoteStable({ ...this.ref, plan: this.plan });
    this.onUndo(`restore the stable image ${this.plan.stableImage}`, () => this.acts.restoreStableImage({ ...this.ref, plan: this.plan }));
    for (;;) {
      const stable = await this.acts.stableRolledOut({ ...this.ref, image: this.plan.image });
      if (stable.done) break;
      this.state.message = stable.message;
      // Between polls gates keep running and an abort is still honoured.
      await this.watch({ until: Date.now() + Math.min(this.plan.gates.intervalMs, 2000) });
    }
    await this.route(0);
    await this.acts.removeCanary(this.ref);
    await this.acts.finishCanarySpec({ ...this.ref, plan: this.plan });
    this.undos.length = 0;
    await this.publish(RolloutPhase.Promoted, `stable runs ${this.plan.image}; all traffic on stable, canary removed${by}`, Reason.CanaryPromoted);
    return this.result();
  }

  /**
   * Runs the registered undos in reverse, shielded from cancellation, and says why. A cancelled rollout (its
   * Application's workflow ended) is compensated, then the cancellation goes on.
   */
  async compensate(err: unknown): Promise<RolloutResult> {
    const cancelled = isCancellation(err);
    const stop: Interruption = err instanceof Unwind
      ? err.interruption
      : { phase: RolloutPhase.RolledBack, reason: cancelled ? 'the rollout was cancelled' : describeFailure(err) };
    const aborted = stop.phase === RolloutPhase.Aborted;
    if (stop.by) this.state.abortedBy = stop.by;
    this.state.reason = stop.reason;
    this.state.pauseEndsAt = undefined;
    await CancellationScope.nonCancellable(async () => {
      await this.publish(RolloutPhase.Aborting, `${aborted ? 'aborting' : 'rolling back'}: ${stop.reason}`, aborted ? Reason.CanaryAborting : Reason.CanaryRollingBack, 'Warning');
      for (const undo of this.undos.reverse()) {
        log.info(`compensation: ${undo.what}`);
        await undo.run();
      }
      this.state.weight = 0;
      const who = aborted && this.state.abortedBy ? ` by ${this.state.abortedBy}` : '';
      await this.publish(stop.phase, `${aborted ? 'aborted' : 'rolled back'}${who}: ${stop.reason}; all traffic on stable, canary removed`,
        aborted ? Reason.CanaryAborted : Reason.CanaryRolledBack, 'Warning');
    });
    if (cancelled) throw err;
    return this.result();
  }

  // ---- operations the story is made of ----

  private result(): RolloutResult {
    return { key: this.plan.key, phase: this.state.phase, message: this.state.message };
  }

  private onUndo(what: string, run: () => Promise<unknown>): void {
    this.undos.push({ what, run });
  }

  private async route(weight: number): Promise<void> {
    await this.acts.setCanaryWeight({ ...this.ref, weight, version: this.plan.version });
    this.state.weight = weight;
  }

  /** One health gate check: records the verdict and moves traffic as the routing rule says. */
  private async checkGate(): Promise<void> {
    this.lastGateAt = Date.now();
    const health = await this.acts.canaryHealth({ ...this.ref, version: this.plan.version });
    const verdict = gateVerdict(health, this.plan.gates);
    this.state.gates = [...this.state.gates.slice(-9), {
      at: new Date(this.lastGateAt).toISOString(), ok: verdict.ok, readyReplicas: health.readyReplicas, restarts: health.restarts, reason: verdict.reason,
    }];
    this.state.consecutiveFailures = verdict.ok ? 0 : this.state.consecutiveFailures + 1;
    if (!verdict.ok) log.warn(`health gate failed (${this.state.consecutiveFailures}/${this.plan.gates.failureThreshold}): ${verdict.reason}`);
    const weight = weightAfterGate(this.state.weight, this.targetWeight, health, verdict.ok);
    if (weight !== this.state.weight) {
      if (weight === 0) log.warn('canary has no ready replica: traffic moved back to stable', { target: this.targetWeight });
      await this.route(weight);
    }
  }

  private throwIfInterrupted(pausing: boolean): void {
    const stop = interruption({
      abort: this.abortRequest, consecutiveFailures: this.state.consecutiveFailures, lastGate: this.state.gates.at(-1),
      gates: this.plan.gates, now: Date.now(), deadline: this.deadline, pausing, progressDeadlineMs: this.plan.progressDeadlineMs,
      message: this.state.message,
    });
    if (stop) throw new Unwind(stop);
  }

  /**
   * Waits until `done()` or `until`, running a health gate every interval and waking on any control request;
   * throws Unwind when the rollout must stop. Time in a pause does not count against the progress deadline.
   */
  private async watch(opts: { until?: number; pause?: boolean; done?: () => boolean }): Promise<void> {
    for (;;) {
      const pausing = opts.pause === true || this.state.pausedByUser;
      this.throwIfInterrupted(pausing);
      if (opts.done?.() || (opts.until !== undefined && Date.now() >= opts.until)) return;
      const started = Date.now();
      const wakeAt = Math.min(this.lastGateAt + this.plan.gates.intervalMs, opts.until ?? Infinity, pausing ? Infinity : this.deadline);
      const seen = this.requests;
      await condition(() => this.requests !== seen, Math.max(1, wakeAt - started));
      if (Date.now() >= this.lastGateAt + this.plan.gates.intervalMs) await this.checkGate();
      // All of a paused iteration, gate check included, is pause time.
      if (pausing) {
        this.deadline += Date.now() - started;
        this.state.deadlineAt = new Date(this.deadline).toISOString();
      }
    }
  }

  /** Status everywhere: the CR's status.canary and an Event (an activity), the UI's current details, the history's log. */
  private async publish(phase: RolloutPhase, message: string, event?: EventReason, type: 'Normal' | 'Warning' = 'Normal'): Promise<void> {
    const s = this.state;
    s.phase = phase;
    s.message = message;
    log.info(`${phase}: ${message}`, { step: s.step, weight: s.weight });
    setCurrentDetails([
      `**Canary ${this.plan.version}** (${this.plan.image}) — ${phase}`,
      `step ${Math.min(s.step + 1, s.totalSteps)}/${s.totalSteps}, canary weight ${s.weight}%`,
      message,
      s.pauseEndsAt ? `pause ends at ${s.pauseEndsAt}` : '',
      `deadline ${s.deadlineAt}`,
      s.gates.length ? `last gate: ${s.gates.at(-1)!.reason}` : '',
    ].filter(Boolean).join('\n\n'));
    await this.acts.writeCanaryStatus({
      ...this.ref,
      status: {
        phase, step: s.step, totalSteps: s.totalSteps, weight: s.weight, message, version: this.plan.version, image: this.plan.image,
        startedAt: s.startedAt,
        ...(s.pauseEndsAt ? { pauseEndsAt: s.pauseEndsAt } : {}),
        ...(s.abortedBy ? { abortedBy: s.abortedBy } : {}),
        ...(s.reason ? { reason: s.reason } : {}),
      },
      ...(event ? { event: { reason: event, message: `canary ${this.plan.version}: ${message}`, type } } : {}),
    });
  }
}

function describeFailure(err: unknown): string {
  if (err instanceof ActivityFailure && err.cause instanceof ApplicationFailure) return `${err.cause.type ?? 'error'}: ${err.cause.message}`;
  if (err instanceof ActivityFailure && err.cause) return err.cause.message;
  return err instanceof Error ? err.message : String(err);
}
