// A canary rollout as an entity: its state and the operations the workflow's story is told with (start, a step,
// a hold, promote, compensate), the control requests it accepts, and how it publishes itself. Decisions are the
// pure functions of decide.ts; the cluster is reached only through activities. Everything it knows is one
// serializable object (RolloutCarry), so that it can continue as new at any wait and be taken up exactly there.
import {
  CancellationScope, continueAsNew, getExternalWorkflowHandle, isCancellation, log, patched, proxyActivities, proxyLocalActivities, setCurrentDetails, workflowInfo,
} from '@temporalio/workflow';
import { FailureType, Reason, RolloutPhase, isTerminal } from '../../api/constants.ts';
import type { Activities } from '../../activities/index.ts';
import type { AnalysisVerdict, CanaryRef, CheckVerdict } from '../../activities/types.ts';
import { noCanaryRoute, reachesCanary, routeAtStep, sameRoute, withStep, type CanaryRoute } from '../../routing/route.ts';
import {
  applicationWorkflowId, rolloutEndedSignal,
  type ControlAction, type ControlRequest, type RecoveredRollout, type RolloutCarry, type RolloutInput, type RolloutPosition, type RolloutResult,
  type RolloutState, type UndoKind,
} from '../contract.ts';
import { judge, keepPerMetric, lastVerdicts, tally, type AnalysisDecision } from './analysis.ts';
import { describeExtras, describeRoute, gateStep, interruption, type Interruption } from './decide.ts';
import { describeStep, type PlanStep, type RolloutPlan } from '../../reconcile/plan.ts';
import { describeFailure, failureType, persist } from '../kit/persist.ts';
import { historyFull } from '../kit/rollover.ts';
import { WrittenStatus } from '../kit/status.ts';
import { UndoStack } from '../kit/undo.ts';
import { duration, run, waitFor, type Summarizable } from '../summary.ts';
import { notificationEvent, notificationId, receiversOf } from '../../reconcile/notify.ts';
import { startNotification, type NotificationInput } from '../notify.ts';
import type { canaryRolloutWorkflow } from './workflow.ts';

/** Failures no retry can fix: the rollout acts on them at once. */
export const fatalFailures: string[] = [FailureType.CanaryNotReady, FailureType.ApplicationGone, FailureType.InvalidSpec, FailureType.ApplyRejected, FailureType.Superseded, FailureType.CheckNotAllowed];


// A few quick attempts per call (a worker killed mid-activity is noticed in 20 s); past them the rollout says in
// status that the step keeps failing and tries again with a growing delay (Rollout.persist).
const acts = proxyActivities<Activities>({
  startToCloseTimeout: '20s',
  retry: { initialInterval: '200ms', backoffCoefficient: 2, maximumInterval: '5s', maximumAttempts: 5, nonRetryableErrorTypes: fatalFailures },
});

// What a waiting rollout does every interval (a gate check, an analysis, a status write) runs as a local activity,
// in the worker that runs the workflow task: one marker event each, where an activity costs three events and a
// workflow task more. A rollout that waits for days then costs about six events per gate interval.
const checks = proxyLocalActivities<Activities>({
  startToCloseTimeout: '15s',
  retry: { initialInterval: '200ms', backoffCoefficient: 2, maximumInterval: '2s', maximumAttempts: 3, nonRetryableErrorTypes: fatalFailures },
});

// One attempt, for status written while something else is failing.
const quiet = proxyLocalActivities<Activities>({ startToCloseTimeout: '10s', retry: { maximumAttempts: 1 } });
/** The markers of rollout levels 1 to 4 (contract.ts `rolloutPatchLevel`). */
const rolloutLevel1Patch = 'rollout-level-1';
const rolloutLevel2Patch = 'rollout-level-2';
const rolloutLevel3Patch = 'rollout-level-3';
const rolloutLevel4Patch = 'rollout-level-4';

/** Unwinds the story into compensation: an abort, failed gates or the deadline. */
export class Unwind extends Error {
  readonly interruption: Interruption;
  constructor(i: Interruption) {
    super(i.message);
    this.interruption = i;
  }
}

type EventReason = (typeof Reason)[keyof typeof Reason];
type Memory = Omit<RolloutCarry, 'state'>;

export class Rollout {
  readonly state: RolloutState;
  private readonly input: RolloutInput;
  private readonly plan: RolloutPlan;
  private readonly ref: CanaryRef;
  /** Everything else the rollout knows: carried whole to the next run (with the undo stack). */
  private readonly m: Memory;
  /** Compensations, registered right after the step they undo succeeded; run last first. */
  private readonly undos: UndoStack<UndoKind>;
  /** Set when this run takes up a rollout whose workflow Temporal lost: its start says so. */
  private readonly recovered: RecoveredRollout | undefined;
  /** Bumped by every accepted control request and recheck, so a waiting rollout wakes up and looks. */
  private requests = 0;
  /** A child the rollout owns changed: check at once rather than at the next interval. */
  private recheck = false;
  /** The canary's pods as the last gate check of this run saw them, and when. */
  private lastPods?: { at: number; ready: number; desired: number };
  /** Set while promote() waits for the stable Deployment; its status changing ends the wait at once. */
  private awaitingStable = false;
  /** The promote has seen the stable Deployment run the new image: from here on an abort would undo nothing (level 4 refuses it). */
  private stableRunsNew = false;
  /** Whether status last said a person's pause holds the rollout. */
  private holdShown = false;
  private stableChanged = false;
  /** The phase and message status last said, so a mere refresh is told apart from news. */
  private readonly published: WrittenStatus;
  /** What this rollout does that rollouts started before did not (contract.ts `rolloutPatchLevel`). */
  private readonly level: number;
  /** Notifications handed to Temporal in this run whose workflow is not known to be started yet, by id. */
  private readonly starting = new Map<string, { input: NotificationInput; started: Promise<void> }>();

  constructor(input: RolloutInput) {
    const { namespace, name, plan } = input;
    this.input = input;
    // Asked for by the starter and recorded here, first thing, a marker per level: a worker of a release before a
    // level that runs this rollout live ignores it and records no marker for it, so every later replay stays below it.
    const asked = input.patchLevel ?? 0;
    const levels = [rolloutLevel1Patch, rolloutLevel2Patch, rolloutLevel3Patch, rolloutLevel4Patch];
    let level = 0;
    while (level < levels.length && asked > level && patched(levels[level]!)) level++;
    this.level = level;
    this.published = new WrittenStatus();
    if (input.carried) this.published.wrote({ phase: input.carried.state.phase, message: input.carried.state.message });
    this.plan = plan;
    this.ref = { namespace, name };
    if (input.carried) {
      const { state, ...memory } = input.carried;
      this.state = state;
      this.m = { ...memory, run: memory.run + 1 };
      this.undos = new UndoStack(memory.undos);
      this.recovered = undefined;
      this.holdShown = state.pausedByUser;
      return;
    }
    this.undos = new UndoStack();
    const now = Date.now();
    const deadline = now + plan.progressDeadlineMs;
    this.state = {
      namespace, name, key: plan.key, phase: RolloutPhase.Progressing, step: 0, totalSteps: plan.steps.length, weight: 0,
      message: 'starting', startedAt: new Date(now).toISOString(), pausedByUser: false,
      deadlineAt: new Date(deadline).toISOString(), gates: [], consecutiveFailures: 0,
      ...(plan.analysis ? { analysis: { verdicts: [], passed: false } } : {}),
    };
    this.m = {
      position: { at: 'start' }, target: noCanaryRoute, route: noCanaryRoute, tallies: {},
      lastAnalysisAt: 0, lastGateAt: 0, lastCountedAt: 0, createdAt: 0, deadline, undos: [], run: 1,
    };
    this.recovered = input.recovered;
    // A rollout taken up again numbers its notifications afresh: ids of its own, apart from those of the lost run.
    if (input.recovered) this.m.notified = { seq: 0, epoch: now };
    if (input.recovered) this.takeUp(input.recovered);
  }

  /**
   * Where the Application's status says a lost rollout was: its step and weight, a timed pause's end, a user's
   * pause. What status does not keep (analysis streaks, the start-up grace, the deadline) starts over, and traffic
   * moves up again only after a fresh passing gate (and analysis).
   */
  private takeUp(r: RecoveredRollout): void {
    const step = Math.min(Math.max(0, r.step), this.plan.steps.length);
    this.state.step = step;
    if (r.startedAt) this.state.startedAt = r.startedAt;
    if (r.pausedBy) {
      this.state.pausedByUser = true;
      this.state.pausedBy = r.pausedBy;
    }
    const target = routeAtStep(this.plan.steps, step);
    this.m.target = target;
    this.m.route = { ...target, weight: Math.min(target.weight, r.weight) };
    this.state.weight = this.m.route.weight;
    this.undos.push('removeCanary');
    if (r.phase === RolloutPhase.Aborting) {
      this.m.position = {
        at: 'compensate',
        stop: r.abortedBy
          ? { phase: RolloutPhase.Aborted, reason: Reason.CanaryAborted, message: r.message ?? 'aborted', by: r.abortedBy }
          : { phase: RolloutPhase.RolledBack, reason: r.reason ?? Reason.RolloutRecovered, message: r.message ?? 'rolling back' },
      };
    } else if (r.phase === RolloutPhase.Promoting) {
      this.m.position = { at: 'promote', stableUpdated: false };
    } else {
      // A timed pause still running keeps its end; one that ended while nobody watched ends now.
      if (r.pauseEndsAt && this.plan.steps[step]?.kind === 'pause') this.state.pauseEndsAt = r.pauseEndsAt;
      this.m.position = { at: 'steps', step, done: false };
    }
  }

  get position(): RolloutPosition {
    return this.m.position;
  }

  // ---- control: the same rules for updates (validated, answered) and signals (fire and forget) ----

  /** Throws, with the message the caller sees, when `action` cannot be accepted now. */
  validate(action: ControlAction): void {
    const { phase, pausedByUser } = this.state;
    const version = this.plan.version;
    if (action === 'promote' || action === 'abort') {
      if (isTerminal(phase)) throw new Error(`the rollout of ${version} is already ${phase}`);
      if (phase === RolloutPhase.Aborting || this.m.abortRequest) throw new Error(`the rollout of ${version} is ${action === 'abort' ? 'already ' : ''}being aborted`);
      if (action === 'promote' && (phase === RolloutPhase.Promoting || this.m.promoteRequest)) throw new Error(`the rollout of ${version} is already being promoted`);
      // Until the stable Deployment runs the new image an abort puts the old one back; after, the promote only moves
      // traffic off the canary and removes it, which an abort would not undo (before level 4 it was accepted, then ignored).
      if (action === 'abort' && this.stableRunsNew && this.level >= 4) {
        throw new Error(`the rollout of ${version} is being promoted: the stable Deployment already runs ${this.plan.image}, too late to abort (once it is Promoted, set spec.image back to roll back)`);
      }
    } else if (action === 'pause') {
      if (phase !== RolloutPhase.Progressing && phase !== RolloutPhase.Paused) throw new Error(`cannot pause a rollout that is ${phase}`);
      if (pausedByUser) throw new Error(`the rollout is already paused${this.state.pausedBy ? ` (by ${this.state.pausedBy})` : ''}`);
    } else if (!pausedByUser && !this.state.analysis?.blind) {
      // A pause step is an approval: only a promote passes it. Resume undoes a pause by request, or an analysis hold.
      if (phase === RolloutPhase.Paused) {
        throw new Error(`the rollout of ${version} is not paused by request: it waits at ${describeStep(this.plan.steps[this.state.step], this.state.step, this.plan.steps.length)}; promote to go on`);
      }
      throw new Error('the rollout is not paused');
    }
  }

  /** Takes a validated control request; returns the state after it (an accepted abort already says Aborting). */
  accept(action: ControlAction, request: ControlRequest = {}): RolloutState {
    const by = request.by ? ` by ${request.by}` : '';
    if (action === 'promote') {
      this.m.promoteRequest = request;
      this.state.message = `promote requested${by}${request.reason ? `: ${request.reason}` : ''}`;
    } else if (action === 'abort') {
      this.m.abortRequest = request;
      this.state.phase = RolloutPhase.Aborting;
      this.state.message = `abort requested${by}${request.reason ? `: ${request.reason}` : ''}`;
    } else if (action === 'pause') {
      this.state.pausedByUser = true;
      this.state.pausedBy = request.by ?? 'unknown';
    } else {
      this.state.pausedByUser = false;
      this.state.pausedBy = undefined;
      // A person who resumes a rollout held by an inconclusive analysis takes that call: the counts start over.
      if (this.state.analysis?.blind) {
        this.state.analysis.blind = undefined;
        this.m.tallies = Object.fromEntries(Object.entries(this.m.tallies).map(([k, t]) => [k, { ...t, inconclusive: 0 }]));
      }
    }
    this.requests++;
    log.info(`${action} requested`, { ...request });
    return this.snapshot();
  }

  /**
   * A child the rollout owns changed: look now. The stable Deployment's status matters only while a promotion waits
   * for it to roll out; it needs no gate check.
   */
  recheckNow(object?: string): void {
    if (object === `Deployment/${this.ref.name}`) {
      if (!this.awaitingStable) return;
      this.stableChanged = true;
    } else {
      log.info('a child of the rollout changed: checking now', { object });
      this.recheck = true;
    }
    this.requests++;
  }

  /** The state as the query answers it. */
  snapshot(): RolloutState {
    return { ...this.state, gates: [...this.state.gates], ...(this.state.analysis ? { analysis: { ...this.state.analysis, verdicts: [...this.state.analysis.verdicts] } } : {}) };
  }

  get ended(): boolean {
    return isTerminal(this.state.phase);
  }

  get promoteRequested(): boolean {
    return this.m.promoteRequest !== undefined;
  }

  // ---- the story ----

  /**
   * Creates the canary at 0% and checks it once; or announces that this run takes up a rollout Temporal lost, from
   * where status says it was (at the steps, the canary is applied again, idempotently). A run that continued as new
   * has nothing to do here.
   */
  async start(): Promise<void> {
    // Notifications the last run handed over without word that they started: started again (a duplicate is refused).
    const unstarted = this.m.unstarted ?? [];
    this.m.unstarted = undefined;
    for (const n of unstarted) this.launch(n);
    const at = this.m.position;
    if (this.recovered) {
      const r = this.recovered;
      const phase = at.at === 'compensate' ? RolloutPhase.Aborting : at.at === 'promote' ? RolloutPhase.Promoting
        : this.state.pausedByUser || this.plan.steps[this.state.step]?.kind === 'pause' ? RolloutPhase.Paused : RolloutPhase.Progressing;
      const where = at.at === 'steps' ? `at ${describeStep(this.plan.steps[this.state.step], this.state.step, this.plan.steps.length)}` : at.at === 'promote' ? 'promoting' : 'undoing';
      await this.publish(phase,
        `taken up again ${where} (${r.phase}, ${r.weight}%), as the Application's status said: Temporal had no record of this rollout's workflow (lost or replaced); analysis streaks and the start-up grace start over`,
        Reason.RolloutRecovered, 'Warning');
      if (at.at !== 'steps') return;
    } else if (at.at === 'start') {
      // beforeStart checks: a failure ends the rollout before anything is created.
      for (const name of this.plan.checks?.beforeStart ?? []) await this.runCheck(name, 'beforeStart', true);
      await this.publish(RolloutPhase.Progressing, `creating ${this.plan.strategy === 'blueGreen' ? `the preview of ${this.plan.version} (${this.plan.image}, reachable through the Service ${this.ref.name}-preview)` : `canary ${this.plan.version} (${this.plan.image})`}`, Reason.CanaryStarted);
    } else {
      return;
    }
    // A new canary starts with its route at 0%, set with it: the routes the Application's last pass applied have no
    // canary yet. A canary taken up again keeps the routes it has.
    await this.call(`create canary ${this.plan.version} (${this.plan.image}) at ${describeRoute(this.m.route)}`, acts.prepareCanary, {
      ...this.ref, plan: this.plan, ...(this.recovered ? {} : { route: noCanaryRoute }),
    });
    this.m.createdAt = Date.now();
    this.undos.push('removeCanary');
    if (this.m.position.at === 'start') this.m.position = { at: 'steps', step: 0, done: false };
    await this.checkGate();
  }

  /**
   * Runs one step. A route step (weight, header route, mirror) moves traffic once the gate passes, and moving the
   * weight up once an analysis has passed at the current weight too; a pause waits for its time or a promote.
   */
  async runStep(index: number, step: PlanStep): Promise<void> {
    this.state.step = index;
    this.m.position = { at: 'steps', step: index, done: false };
    this.throwIfInterrupted(false);
    await this.holdWhileBlind();
    const text = describeStep(step, index, this.plan.steps.length);
    if (step.kind === 'pause') {
      // A pause taken up again (a new run, a recovered rollout) keeps the end it had.
      const until = step.ms === null ? undefined : this.state.pauseEndsAt ? Date.parse(this.state.pauseEndsAt) : Date.now() + step.ms;
      this.state.pauseEndsAt = until === undefined ? undefined : new Date(until).toISOString();
      if (this.state.phase !== RolloutPhase.Paused || this.state.message !== text) await this.publish(RolloutPhase.Paused, text, Reason.CanaryPaused);
      await this.watch({ pause: true, ...(until !== undefined ? { until } : {}), done: () => this.promoteRequested });
      this.state.pauseEndsAt = undefined;
      this.m.position = { at: 'steps', step: index, done: true };
      // An approval is passed by the promote (which it uses up); the steps after it go on.
      if (step.approval) {
        const by = this.m.promoteRequest ? `promoted by ${this.m.promoteRequest.by ?? 'request'}` : 'its time came (autoPromotionSeconds)';
        this.m.promoteRequest = undefined;
        await this.publish(RolloutPhase.Progressing, `step ${index + 1}/${this.plan.steps.length}: ${step.approval}: ${by}`, Reason.CanaryResumed);
        return;
      }
      // Held by an inconclusive analysis, the rollout stays Paused and says why (holdWhileBlind), not Progressing
      // for a moment between the pause and the hold.
      if (!this.promoteRequested && !this.state.analysis?.blind) await this.publish(RolloutPhase.Progressing, `${text}: done`, Reason.CanaryResumed);
      return;
    }
    if (step.kind === 'analysis' || step.kind === 'wait') {
      await this.timedStep(index, step, text);
      return;
    }
    if (step.kind === 'check') {
      await this.runCheck(step.check, step.phase ?? 'step', true);
      this.m.position = { at: 'steps', step: index, done: true };
      await this.publish(RolloutPhase.Progressing, `${text}: passed`, Reason.CanaryStepCompleted);
      return;
    }
    const next = withStep(this.m.target, step);
    if (reachesCanary(next)) {
      const up = step.kind === 'weight' && step.weight > this.m.route.weight && this.needsAnalysis();
      // A promote goes now: it does not wait for the step's gate (or analysis) first.
      const mayGo = () => this.promoteRequested || (this.gateOk() && (!up || this.state.analysis?.passed === true));
      // From level 1 a step that may go at once (the gate passed during the pause before it) says nothing of waiting.
      if (this.level < 1 || !mayGo()) {
        await this.publish(RolloutPhase.Progressing, `${text}: waiting for ${this.plan.gates.minReadyReplicas} ready canary replica(s)${up ? ' and a passing analysis at the current weight' : ''}`);
      }
      await this.watch({ done: mayGo });
      if (this.promoteRequested) return;
    }
    // The target moves only now: until the step may go, a gate check keeps traffic where it is.
    this.m.target = next;
    if (!sameRoute(this.m.route, next)) await this.routeTo(next);
    // From level 3, a weight by pod counts is reached once the pods it scaled are ready, not once they are asked for:
    // a pause after it bakes at the share it names. Also when the route is set already: a run that continued as new
    // (or a rollout taken up again) in this wait takes it up here.
    if (this.level >= 3 && step.kind === 'weight' && this.plan.router === 'replicas' && next.weight > 0 && next.weight < 100) await this.awaitCanaryPods(text);
    this.m.position = { at: 'steps', step: index, done: true };
    await this.publish(RolloutPhase.Progressing, text, Reason.CanaryStepCompleted);
  }

  /**
   * Waits until a gate check after now finds every pod of the canary Deployment ready (health gates, analysis and
   * control requests go on meanwhile; a promote goes past it; pods that never get ready fail the gates as anywhere).
   */
  private async awaitCanaryPods(text: string): Promise<void> {
    const since = Date.now();
    const seen = () => this.lastPods !== undefined && this.lastPods.at >= since;
    const ready = () => seen() && this.lastPods!.ready >= this.lastPods!.desired;
    // A gate check at once; status says so only when the pods are not all ready by then.
    this.recheck = true;
    await this.watch({ done: () => this.promoteRequested || seen() });
    if (this.promoteRequested || ready()) return;
    await this.publish(RolloutPhase.Progressing, `${text}: waiting for the canary's pods to be ready (${this.lastPods?.ready ?? 0}/${this.lastPods?.desired ?? '?'})`);
    await this.watch({ done: () => this.promoteRequested || ready() });
  }

  /**
   * A step that takes a while without moving traffic: an analysis window (the analysis runs at every interval,
   * whatever reaches the new version, and the step ends once the window is over and an analysis passed), or a wait
   * (a blue-green switch-back window; the analysis runs as it does anywhere traffic reaches the new version). A
   * promote ends either at once; an abort or a failed analysis unwinds as anywhere else.
   */
  private async timedStep(index: number, step: Extract<PlanStep, { kind: 'analysis' | 'wait' }>, text: string): Promise<void> {
    const judge = step.kind === 'analysis' && this.plan.analysis !== undefined;
    // Carried across runs so that a window taken up again keeps its end.
    const until = this.m.stepEndsAt ?? Date.now() + step.ms;
    this.m.stepEndsAt = until;
    if (judge && this.state.analysis) this.state.analysis.passed = false;
    await this.publish(RolloutPhase.Progressing, `${text} (until ${new Date(until).toISOString()})`);
    await this.watch({ until, judge, done: () => this.promoteRequested });
    if (judge && !this.promoteRequested && this.state.analysis?.passed !== true) {
      await this.publish(RolloutPhase.Progressing, `${text}: window over, waiting for a passing analysis`);
      await this.watch({ judge, done: () => this.promoteRequested || this.state.analysis?.passed === true });
    }
    this.m.stepEndsAt = undefined;
    this.m.position = { at: 'steps', step: index, done: true };
    if (!this.promoteRequested) await this.publish(RolloutPhase.Progressing, `${text}: done`, Reason.CanaryStepCompleted);
  }

  /**
   * Runs one check and records its verdict (status, an Event, the history): an HTTP check (its activity makes the
   * attempts), waiting paused while a confirm check is not yet confirmed (a promote confirms it); or a Job check,
   * watched until its Job ends (health gates and control requests go on meanwhile), then deleted. A failure of a
   * `fatal` check unwinds the rollout (reason CheckFailed, or CheckNotAllowed for a host the operator refuses).
   */
  private async runCheck(name: string, phase: string, fatal: boolean): Promise<CheckVerdict> {
    const c = this.plan.checks?.all.find((x) => x.name === name);
    if (!c) throw new Unwind({ phase: RolloutPhase.RolledBack, reason: Reason.CheckFailed, message: `check ${name} is not among the rollout's checks` });
    const context = {
      application: this.ref.name, namespace: this.ref.namespace, version: this.plan.version, image: this.plan.image,
      phase: phase as 'step', ...(phase === 'step' ? { step: this.state.step } : {}), weight: this.state.weight,
    };
    let outcome: { result: 'pass' | 'fail'; message: string; reason?: string };
    if (c.kind === 'http') {
      const http = proxyActivities<Activities>({
        startToCloseTimeout: c.maxMs + 10_000, heartbeatTimeout: '30s',
        retry: { initialInterval: '1s', maximumAttempts: 3, nonRetryableErrorTypes: fatalFailures },
      });
      let waited = false;
      for (;;) {
        const r = await this.call(`${phase} check ${name}: ${c.spec.http?.method ?? 'POST'} ${c.spec.http?.url ?? ''}`, http.runHttpCheck, { ...this.ref, check: c.spec, context });
        if (r.verdict !== 'waiting') {
          outcome = { result: r.verdict, message: r.detail, ...(r.reason ? { reason: r.reason } : {}) };
          break;
        }
        if (this.promoteRequested) {
          outcome = { result: 'pass', message: `confirmed by the promote of ${this.m.promoteRequest?.by ?? 'a request'} (the endpoint said: ${r.detail})` };
          break;
        }
        if (!waited) {
          waited = true;
          this.recordCheck({ name, phase, result: 'waiting', message: r.detail, at: new Date().toISOString() });
          await this.publish(RolloutPhase.Paused, `waiting for check ${name} to confirm (asking ${c.spec.http?.url ?? ''} every ${Math.round(c.intervalMs / 1000)} s; a promote confirms too): ${r.detail}`, Reason.CheckWaiting);
        }
        await this.watch({ pause: true, until: Date.now() + c.intervalMs, done: () => this.promoteRequested });
      }
    } else {
      const { jobName } = await this.call(`${phase} check ${name}: start its Job`, acts.startJobCheck, { ...this.ref, check: c.spec, context });
      this.m.checkJob = jobName;
      await this.publish(this.state.phase === RolloutPhase.Paused ? RolloutPhase.Progressing : this.state.phase, `${phase} check ${name}: Job ${jobName} running`);
      const giveUpAt = Date.now() + c.timeoutMs + 60_000;
      for (;;) {
        const o = await this.call(`${phase} check ${name}: look at Job ${jobName}`, checks.observeJobCheck, { namespace: this.ref.namespace, jobName });
        if (o.state !== 'running') {
          outcome = { result: o.state === 'succeeded' ? 'pass' : 'fail', message: o.message };
          break;
        }
        if (Date.now() >= giveUpAt) {
          outcome = { result: 'fail', message: `Job ${jobName} still runs ${Math.round((c.timeoutMs + 60_000) / 1000)} s after it was made: ${o.message}` };
          break;
        }
        await this.watch({ until: Date.now() + Math.min(5000, this.plan.gates.intervalMs) });
      }
      await this.call(`delete Job ${jobName}`, acts.deleteJobCheck, { namespace: this.ref.namespace, jobName });
      this.m.checkJob = undefined;
    }
    const verdict: CheckVerdict = { name, phase, result: outcome.result, message: outcome.message, at: new Date().toISOString() };
    this.recordCheck(verdict);
    const line = `${phase} check ${name} ${outcome.result === 'pass' ? 'passed' : 'failed'}: ${outcome.message}`;
    log.info(line, { check: name, phase, result: outcome.result });
    if (outcome.result === 'fail' && fatal) {
      throw new Unwind({ phase: RolloutPhase.RolledBack, reason: outcome.reason ?? Reason.CheckFailed, message: line });
    }
    if (!isTerminal(this.state.phase)) {
      await this.publish(this.state.phase === RolloutPhase.Paused ? RolloutPhase.Progressing : this.state.phase, line, outcome.result === 'pass' ? Reason.CheckPassed : Reason.CheckFailed, outcome.result === 'pass' ? 'Normal' : 'Warning');
    }
    return verdict;
  }

  private recordCheck(v: CheckVerdict): void {
    this.state.checks = [...(this.state.checks ?? []), v].slice(-10);
  }

  /**
   * A person's pause or resume that came while a step waits (a timed pause, a weight's gates), in status at once
   * (level 4; before, only once the step was over): so status tells the truth meanwhile, and a rollout Temporal lost
   * takes the hold up again from it. The step runs on; the hold begins when it is over (holdWhilePaused).
   */
  private async showHold(): Promise<void> {
    if (this.state.pausedByUser) {
      this.m.unheld = { phase: this.state.phase, message: this.m.steady ?? this.state.message };
      const step = describeStep(this.plan.steps[this.state.step], this.state.step, this.plan.steps.length);
      await this.publish(RolloutPhase.Paused, `${this.pausedByRequest} during ${step}: it holds once this step is over`, Reason.CanaryPaused);
    } else if (this.m.unheld) {
      const { phase, message } = this.m.unheld;
      this.m.unheld = undefined;
      await this.publish(phase, message, Reason.CanaryResumed);
    } else {
      // A hold that began at a step's end (holdWhilePaused said it): the step that follows says what is true now.
      this.holdShown = false;
    }
  }

  /** "paused by request of ann": a person's pause in status. */
  private get pausedByRequest(): string {
    return `paused by request${this.state.pausedBy ? ` of ${this.state.pausedBy}` : ''}`;
  }

  /** A user's pause holds the rollout before step `next` until resumed or promoted; gates keep running. */
  async holdWhilePaused(next: number): Promise<void> {
    if (!this.state.pausedByUser) return;
    // What status said before a pause in the middle of the step just over is no longer true once it is over.
    this.m.unheld = undefined;
    const text = `${this.pausedByRequest} at ${describeStep(this.plan.steps[next], next, this.plan.steps.length)}`;
    if (this.state.phase !== RolloutPhase.Paused || this.state.message !== text) await this.publish(RolloutPhase.Paused, text, Reason.CanaryPaused);
    await this.watch({ pause: true, done: () => !this.state.pausedByUser || this.promoteRequested });
  }

  /**
   * An analysis that cannot see holds the rollout until a metric answers again, or a resume, promote or abort. The
   * canary keeps its share of traffic meanwhile (with none, no metric could ever answer), health gates keep running,
   * and the hold counts against the progress deadline: an unjudged canary never carries traffic for longer.
   */
  private async holdWhileBlind(): Promise<void> {
    if (!this.state.analysis?.blind || this.promoteRequested) return;
    const text = `analysis inconclusive, holding: ${this.state.analysis.blind}; the rollout goes on when the metric answers again, or on resume, promote or abort`;
    if (this.state.message !== text) await this.publish(RolloutPhase.Paused, text);
    await this.watch({ done: () => !this.state.analysis?.blind || this.promoteRequested });
  }

  /** Traffic may not move up (nor the last step promote) until an analysis passed at the current route. */
  private needsAnalysis(): boolean {
    return this.plan.analysis !== undefined && reachesCanary(this.m.route) && this.state.analysis?.passed !== true;
  }

  private gateOk(): boolean {
    return this.state.consecutiveFailures === 0 && this.state.gates.at(-1)?.ok === true;
  }

  /** Stable takes the canary's image and must be available before traffic leaves the canary; then the canary goes. */
  async promote(): Promise<RolloutResult> {
    this.throwIfInterrupted(false);
    this.state.step = this.plan.steps.length;
    const request = this.m.promoteRequest;
    const by = `${request?.by ? ` by ${request.by}` : ''}${request?.reason ? ` (${request.reason})` : ''}`;
    if (this.m.position.at !== 'promote') {
      // The last step promotes on its own only after a passing analysis at the last weight; a person's promote decides.
      if (!this.promoteRequested) {
        await this.holdWhileBlind();
        if (this.needsAnalysis()) {
          await this.publish(RolloutPhase.Progressing, `all ${this.plan.steps.length} steps done: waiting for a passing analysis before promoting`);
          await this.watch({ done: () => this.promoteRequested || this.state.analysis?.passed === true });
        }
      }
      this.m.position = { at: 'promote', stableUpdated: false };
      await this.publish(RolloutPhase.Promoting, `promoting${by}: stable Deployment takes ${this.plan.image}`, Reason.CanaryPromoting);
    }
    if (!this.m.position.stableUpdated) {
      // Histories from before promoteStable said what was stored have none (undefined).
      const stored: { image?: string } | undefined = await this.call(`promote: the stable Deployment takes ${this.plan.image}`, acts.promoteStable, { ...this.ref, plan: this.plan });
      this.undos.push('restoreStableImage');
      this.m.position = { at: 'promote', stableUpdated: true, ...(stored?.image !== undefined && stored.image !== this.plan.image ? { stableImage: stored.image } : {}) };
    }
    const stored = this.m.position.stableImage;
    this.awaitingStable = true;
    for (;;) {
      this.stableChanged = false;
      const stable = await this.call(`check that stable runs ${this.plan.image}`, checks.stableRolledOut, { ...this.ref, image: this.plan.image, ...(stored ? { stored } : {}) });
      if (stable.done) break;
      this.state.message = stable.message;
      // Between polls gates keep running and an abort is still honoured; the stable Deployment's status changing
      // (its Application's workflow forwards it) ends the wait at once.
      await this.watch({ until: Date.now() + Math.min(this.plan.gates.intervalMs, 2000), done: () => this.stableChanged });
    }
    this.awaitingStable = false;
    this.stableRunsNew = true;
    await this.routeTo(noCanaryRoute);
    // Proxies take a route change a moment after it is written (Envoy, a Gateway's controller, kube-proxy): the new
    // version's pods keep serving until they have, then go. Plans from before canaryDrainMs drained only here, and
    // only when routing by Service selector.
    const drainMs = this.plan.canaryDrainMs ?? this.plan.drainMs;
    if (drainMs) await waitFor(() => false, drainMs, `let proxies follow the switch back for ${duration(drainMs)}`);
    await this.call('remove the canary', acts.removeCanary, this.canary);
    await this.call('switch the spec\'s canary off', acts.finishCanarySpec, { ...this.ref, plan: this.plan });
    this.undos.clear();
    this.state.reason = Reason.CanaryPromoted;
    const promoted = `stable runs ${this.plan.image}; all traffic on stable, canary removed${by}`;
    await this.publish(RolloutPhase.Promoted, promoted, Reason.CanaryPromoted);
    // postPromotion checks of a canary: reported (status, Event, history); a promotion done is not undone.
    for (const name of this.plan.checks?.afterPromotion ?? []) {
      const v = await this.runCheck(name, 'postPromotion', false);
      await this.publish(RolloutPhase.Promoted, `${promoted}; postPromotion check ${name}: ${v.result}: ${v.message}`, v.result === 'pass' ? Reason.CheckPassed : Reason.CheckFailed, v.result === 'pass' ? 'Normal' : 'Warning');
    }
    return this.result();
  }

  /**
   * Runs the registered undos in reverse, shielded from cancellation, and says why. An undo that keeps failing is
   * retried until it succeeds, and status says so meanwhile. Without `err`, takes up a compensation that a
   * previous run (or a lost workflow) had begun.
   */
  async compensate(err?: unknown): Promise<RolloutResult> {
    const begin = err !== undefined || this.m.position.at !== 'compensate';
    const stop: Interruption = this.m.position.at === 'compensate' && err === undefined ? this.m.position.stop
      : err instanceof Unwind ? err.interruption
        : isCancellation(err) ? { phase: RolloutPhase.RolledBack, reason: Reason.RolloutCancelled, message: 'the rollout was cancelled' }
          : { phase: RolloutPhase.RolledBack, reason: failureType(err) ?? Reason.RolloutError, message: describeFailure(err) };
    const aborted = stop.phase === RolloutPhase.Aborted;
    this.m.position = { at: 'compensate', stop };
    if (stop.by) this.state.abortedBy = stop.by;
    this.state.reason = stop.reason;
    this.state.pauseEndsAt = undefined;
    await CancellationScope.nonCancellable(async () => {
      if (begin || this.recovered) {
        await this.publish(RolloutPhase.Aborting, `${aborted ? 'aborting' : 'rolling back'}: ${stop.message}`, aborted ? Reason.CanaryAborting : Reason.CanaryRollingBack, 'Warning');
      }
      // Each undo leaves the stack only once it succeeded: a new run mid-way starts with what is left.
      await this.undos.unwind(async (kind) => {
        const undo = this.undo(kind);
        log.info(`compensation: ${undo.what}`);
        await this.persist(undo.what, undo.run, { undo: true });
      });
      this.state.weight = 0;
      this.state.routing = undefined;
      this.m.route = noCanaryRoute;
      // A Job check cut short by the unwinding goes with it.
      if (this.m.checkJob) {
        const job = this.m.checkJob;
        await this.persist(`delete Job ${job}`, () => run(acts.deleteJobCheck, `delete Job ${job}`, { namespace: this.ref.namespace, jobName: job }), { undo: true });
        this.m.checkJob = undefined;
      }
      // onRollback checks: told what happened, reported; nothing they say stops the rollback.
      for (const name of this.plan.checks?.onRollback ?? []) {
        try {
          await this.runCheck(name, 'onRollback', false);
        } catch (e) {
          log.warn(`onRollback check ${name} could not run`, { err: String(e) });
        }
      }
      const who = aborted && this.state.abortedBy ? ` by ${this.state.abortedBy}` : '';
      await this.publish(stop.phase, `${aborted ? 'aborted' : 'rolled back'}${who}: ${stop.message}; all traffic on stable, canary removed`,
        aborted ? Reason.CanaryAborted : Reason.CanaryRolledBack, 'Warning');
    });
    return this.result();
  }

  /**
   * Tells the Application's workflow that this rollout ended: it follows the rollout by this signal once it has
   * continued as new itself (a new run gets no word of a child its previous run started). Best effort: an
   * Application workflow that is gone reads the outcome from status when it starts again.
   */
  async report(result: RolloutResult): Promise<void> {
    try {
      await getExternalWorkflowHandle(applicationWorkflowId(this.ref.namespace, this.ref.name)).signal(rolloutEndedSignal, result);
    } catch (err) {
      log.info('could not tell the Application\'s workflow that the rollout ended', { err: String(err) });
    }
  }

  // ---- operations the story is made of ----

  private result(): RolloutResult {
    return { key: this.plan.key, phase: this.state.phase, message: this.state.message };
  }

  /** The undo an entry of the stack names. */
  private undo(kind: UndoKind): { what: string; run: () => Promise<unknown> } {
    if (kind === 'removeCanary') {
      const what = 'remove the canary: all traffic to stable, subset and Deployment removed';
      // Traffic first, then the pods after the drain, as a promotion does: a proxy that has not taken the switch back
      // yet still reaches a pod. A canary no request could reach has nothing to drain; rollouts planned before
      // canaryDrainMs removed it in one step (their histories replay unchanged).
      const drainMs = this.plan.canaryDrainMs ?? 0;
      if (drainMs <= 0 || !reachesCanary(this.m.route)) return { what, run: () => run(acts.removeCanary, what, this.canary) };
      const stop = this.m.position.at === 'compensate' ? this.m.position.stop : undefined;
      const draining = stop ? `${stop.phase === RolloutPhase.Aborted ? 'aborting' : 'rolling back'}: ${stop.message}` : this.state.message;
      return {
        what,
        run: async () => {
          await run(acts.removeCanary, 'all traffic to stable; the canary keeps serving while proxies follow', { ...this.canary, routeOnly: true });
          // Status says where traffic is now (never a weight the routes no longer have) while the pods drain.
          this.state.weight = 0;
          this.state.routing = undefined;
          this.m.route = noCanaryRoute;
          await this.publish(this.state.phase, `${draining}: all traffic on stable; the canary's pods go in ${duration(drainMs)}, once proxies have followed`);
          await waitFor(() => false, drainMs, `let proxies follow the switch back for ${duration(drainMs)}`);
          await run(acts.removeCanary, what, this.canary);
        },
      };
    }
    const what = `restore the stable image ${this.plan.stableImage}`;
    return { what, run: () => run(acts.restoreStableImage, what, { ...this.ref, plan: this.plan }) };
  }

  /**
   * The canary the activities that route act on: its Application, version and the router the rollout started with
   * (older plans have none: the spec's).
   */
  private get canary() {
    return { ...this.ref, version: this.plan.version, ...(this.plan.router ? { router: this.plan.router } : {}) };
  }

  /** One activity call whose history event reads `summary`, retried through persist() while it fails. */
  private call<A extends unknown[], R>(summary: string, activity: Summarizable<A, R>, ...args: A): Promise<R> {
    return this.persist(summary, () => run(activity, summary, ...args));
  }

  /** Routes `r` to the canary (read back by the activity); a new route needs a new passing analysis. */
  private async routeTo(r: CanaryRoute): Promise<void> {
    const routed = await this.call(`set canary weight ${describeRoute(r)}`, acts.setCanaryRoute, { ...this.canary, route: r, ...(this.traceId ? { traceId: this.traceId } : {}) });
    this.m.route = r;
    this.state.weight = r.weight;
    // What the router says of how it splits (a canary by pods: approximately), beside a header route or a mirror.
    const how = [r.weight > 0 && r.weight < 100 ? routed.note : undefined, describeExtras(r)].filter(Boolean).join(', ');
    this.state.routing = how || undefined;
    if (this.state.analysis) {
      this.state.analysis.passed = false;
      // The next analysis covers a whole interval of the new route.
      this.m.lastAnalysisAt = Date.now();
    }
  }

  /**
   * One health gate check. Records the verdict (a failure during the start-up grace is recorded, not counted), puts
   * back what a hand edit or deletion took (the canary Deployment, what it is routed to) and makes the routes route
   * what the routing rule says, read back: status never claims a weight the mesh does not have.
   */
  private async checkGate(): Promise<void> {
    this.m.lastGateAt = Date.now();
    this.recheck = false;
    const seen = await this.call(`gate check at ${describeRoute(this.m.route)}`, checks.observeCanary, { ...this.canary, image: this.plan.image, route: this.m.route });
    // Below level 2 a resized or re-imaged canary is judged as it runs, as the rollout's history recorded it.
    const { drift, ...observed } = seen;
    this.lastPods = { at: this.m.lastGateAt, ready: observed.health.readyReplicas, desired: observed.health.desiredReplicas };
    const g = gateStep({
      seen: this.level >= 2 && drift ? { ...observed, drift } : observed, gates: this.plan.gates, now: this.m.lastGateAt, createdAt: this.m.createdAt, readySince: this.state.readySince, lastCountedAt: this.m.lastCountedAt,
      consecutiveFailures: this.state.consecutiveFailures, route: this.m.route, target: this.m.target,
    });
    this.state.gates = [...this.state.gates.slice(-9), g.record];
    this.state.readySince = g.readySince;
    if (g.counted) this.m.lastCountedAt = this.m.lastGateAt;
    this.state.consecutiveFailures = g.consecutiveFailures;
    // A canary not ready yet in its start-up grace is how every rollout begins: said, not warned of.
    if (!g.record.ok && g.record.grace) log.info(`health gate not passing yet (start-up grace, not counted): ${g.record.reason}`);
    else if (!g.record.ok) log.warn(`health gate failed (${g.consecutiveFailures}/${this.plan.gates.failureThreshold}): ${g.record.reason}`);
    if (g.reroute) {
      log.warn(g.reroute.why);
      await this.routeTo(g.reroute.route);
      // Status follows the routes at once: it never claims a route the router does not have. A repair says so in an
      // Event; the message describes the present again at the next clean check.
      await this.publish(this.state.phase, g.reroute.why, g.reroute.repair ? Reason.CanaryRepaired : undefined, 'Warning', { passing: true });
    }
    if (g.recreate) {
      // Where its traffic is meanwhile, as the routes now say (a canary resized by hand keeps what its ready pods earn).
      const meanwhile = reachesCanary(this.m.route) ? `it keeps ${describeRoute(this.m.route)}` : 'traffic stays on stable';
      await this.publish(this.state.phase, `${g.recreate}: ${meanwhile} while it is put back`, Reason.CanaryRepaired, 'Warning', { passing: true });
      await this.call('put the canary back', acts.prepareCanary, { ...this.ref, plan: this.plan });
      // A new canary starts again: its start-up grace and failure count start over.
      this.m.createdAt = Date.now();
      this.state.readySince = undefined;
      this.state.consecutiveFailures = 0;
    } else if (g.clean && this.m.steady && (this.level >= 1 ? this.published.isNew({ phase: this.state.phase, message: this.m.steady }) : this.state.message !== this.m.steady)) {
      // All is as it should be again: the message says what the rollout does, not what it repaired a while ago.
      // From level 1 judged on what status last said, not on the message in hand: a promote waiting for the stable
      // Deployment shows its progress in the message without writing it, and rewrote its status at every gate check.
      await this.publish(this.state.phase, this.m.steady);
    }
  }

  private throwIfInterrupted(pausing: boolean): void {
    const stop = interruption({
      abort: this.m.abortRequest, analysisFailed: this.m.analysisFailed, consecutiveFailures: this.state.consecutiveFailures, lastGate: this.state.gates.at(-1),
      gates: this.plan.gates, now: Date.now(), deadline: this.m.deadline, pausing, progressDeadlineMs: this.plan.progressDeadlineMs,
      message: this.state.message,
    });
    if (stop) throw new Unwind(stop);
  }

  /**
   * Continues as new, carrying everything, once the history has grown past its limit or the server suggests it.
   * Called only right after a wait ends, so the next run takes the wait up where this one left it. Right after, and
   * not later: it is then the first thing the new workflow task does, before any local activity resolves in it. The
   * history length a run reads after a local activity depends on which workflow task the activity's result arrived
   * in (a slow one arrives in a later task), which a replay cannot reproduce.
   */
  private async rollOverIfDue(): Promise<void> {
    if (!historyFull(this.input.maxHistoryEvents)) return;
    const info = workflowInfo();
    log.info('continuing as new', { historyLength: info.historyLength, suggested: info.continueAsNewSuggested, run: this.m.run, position: this.m.position.at });
    const { carried: _c, recovered: _r, ...input } = this.input;
    const unstarted = [...this.starting.values()].map((n) => n.input);
    await continueAsNew<typeof canaryRolloutWorkflow>({ ...input, carried: { state: this.state, ...this.m, undos: this.undos.carried, ...(unstarted.length ? { unstarted } : {}) } });
  }

  /**
   * Waits until `done()` or `until`, running a health gate every interval (and at once on a recheck) and the analysis
   * every analysis interval (in the same wake when both are near), and waking on any control request; throws Unwind
   * when the rollout must stop. Time in a pause does not count against the progress deadline.
   */
  private async watch(opts: { until?: number; pause?: boolean; judge?: boolean; done?: () => boolean }): Promise<void> {
    const gateEvery = this.plan.gates.intervalMs;
    const analysisEvery = this.plan.analysis?.intervalMs ?? Infinity;
    // A check due this soon after another is made in the same wake: one timer and one workflow task for both.
    const soon = Math.min(gateEvery, analysisEvery) / 2;
    for (;;) {
      const pausing = opts.pause === true || this.state.pausedByUser;
      this.throwIfInterrupted(pausing);
      if (opts.done?.() || (opts.until !== undefined && Date.now() >= opts.until)) return;
      const started = Date.now();
      // Analysis runs while requests reach the canary (with none, there is nothing to judge), or where a step asks.
      const judging = opts.judge === true || reachesCanary(this.m.route);
      const analysisAt = judging ? this.m.lastAnalysisAt + analysisEvery : Infinity;
      const gateAt = this.m.lastGateAt + gateEvery;
      const wakes: [string, number][] = [
        ['gate check', gateAt], ['analysis', analysisAt],
        [opts.pause ? 'pause ends' : 'next look', opts.until ?? Infinity], ['progress deadline', pausing ? Infinity : this.m.deadline],
      ];
      const [what, wakeAt] = wakes.reduce((a, b) => (b[1] < a[1] ? b : a));
      const seen = this.requests;
      const ms = Math.max(1, wakeAt - started);
      const why = `${pausing ? 'paused' : 'waiting'} at step ${Math.min(this.state.step + 1, this.state.totalSteps)}/${this.state.totalSteps}: ${what} in ${duration(ms)}`;
      if (!this.recheck) {
        await waitFor(() => this.requests !== seen, ms, why);
        await this.rollOverIfDue();
      }
      if (this.level >= 4 && this.state.pausedByUser !== this.holdShown) await this.showHold();
      const now = Date.now();
      if (this.recheck || now + soon >= gateAt) await this.checkGate();
      if (judging && now + soon >= this.m.lastAnalysisAt + analysisEvery) await this.analyse();
      // All of a paused iteration, checks included, is pause time.
      if (pausing) {
        this.m.deadline += Date.now() - started;
        this.state.deadlineAt = new Date(this.m.deadline).toISOString();
      }
    }
  }

  /**
   * One analysis: asks Prometheus for every metric, judges each answer against its range, records the verdicts
   * (history, status, the query) and decides: a failure streak rolls back, an inconclusive streak holds the
   * rollout, a run where every deciding metric passed lets traffic move up.
   */
  private async analyse(): Promise<void> {
    const plan = this.plan.analysis;
    const analysis = this.state.analysis;
    if (!plan || !analysis) return;
    this.m.lastAnalysisAt = Date.now();
    const answers = await this.call(`analysis at ${describeRoute(this.m.route)}: ${plan.metrics.map((m) => m.name).join(', ')}`, checks.queryMetrics, {
      ...this.ref, ...(plan.prometheusAddress ? { address: plan.prometheusAddress } : {}), queries: plan.metrics.map((m) => ({ name: m.name, query: m.query })),
    });
    const at = new Date(this.m.lastAnalysisAt).toISOString();
    const verdicts: AnalysisVerdict[] = plan.metrics.map((m) => judge(m, answers.find((a) => a.name === m.name) ?? { name: m.name, value: null, error: 'no answer' }, at, this.m.route.weight));
    for (const v of verdicts) log.info(`analysis: ${v.metric}${v.dryRun ? ' (dry run)' : ''}: ${v.result}: ${v.message}`, { query: v.query, weight: v.weight });
    const { tallies, decision } = tally(this.m.tallies, verdicts, plan.metrics);
    this.m.tallies = tallies;
    analysis.verdicts = keepPerMetric([...analysis.verdicts, ...verdicts]);
    await this.decideOnAnalysis(decision);
  }

  private async decideOnAnalysis(decision: AnalysisDecision): Promise<void> {
    const analysis = this.state.analysis!;
    const wasBlind = analysis.blind;
    if (decision.kind === 'pass') analysis.passed = true;
    if (decision.kind === 'fail') {
      this.m.analysisFailed = { metric: decision.verdict.metric, times: decision.times, message: decision.verdict.message };
    }
    if (decision.kind === 'blind' && !wasBlind) {
      analysis.blind = `${decision.verdict.metric} inconclusive ${decision.times} times in a row: ${decision.verdict.message}`;
      await this.publish(RolloutPhase.Paused, `analysis inconclusive, holding: ${analysis.blind}`, Reason.AnalysisInconclusive, 'Warning');
      return;
    }
    if (decision.kind !== 'blind' && wasBlind) {
      analysis.blind = undefined;
      // What the rollout does now: Paused only where a pause step or a person still holds it.
      const step = this.plan.steps[this.state.step];
      const held = this.state.pausedByUser || (step?.kind === 'pause' && this.m.position.at === 'steps' && !this.m.position.done);
      await this.publish(held ? RolloutPhase.Paused : RolloutPhase.Progressing, 'analysis answers again: the rollout goes on', Reason.AnalysisRecovered);
      return;
    }
    // Status shows the last verdicts.
    await this.publish(this.state.phase, this.state.message, undefined, 'Normal', { passing: true });
  }

  /**
   * Runs one activity call; while it keeps failing with a retryable error, says so in status and tries again with a
   * growing delay, so no retry is silent, and once it works again says what is true now. A forward step gives way
   * to an abort (the undos run instead); an undo never gives up. A long run of failures may continue as new.
   */
  private persist<T>(what: string, once: () => Promise<T>, opts: { undo?: boolean; status?: boolean } = {}): Promise<T> {
    const before = this.state.message;
    return persist(what, once, {
      fatal: fatalFailures,
      failing: async (message) => {
        this.state.message = message;
        this.details();
        // Best effort: the API server this step needs may be what is failing.
        await run(quiet.writeCanaryStatus, `status: ${this.state.phase}: "${what}" keeps failing`, this.statusInput(this.state.phase, message)).catch(() => undefined);
      },
      // The message said this step kept failing; it works now, so status says what is true again.
      recovered: () => (opts.status ? Promise.resolve() : this.publish(this.state.phase, before)),
      interrupted: () => this.m.abortRequest !== undefined,
      stopped: () => this.throwIfInterrupted(false),
      waited: () => this.rollOverIfDue(),
      ...(this.input.retryDelay ? { retryDelay: this.input.retryDelay } : {}),
    }, opts);
  }

  /** Status everywhere: the CR's status.canary and an Event (an activity), the UI's current details, the history's log. */
  private async publish(phase: RolloutPhase, message: string, event?: EventReason, type: 'Normal' | 'Warning' = 'Normal', opts: { passing?: boolean } = {}): Promise<void> {
    this.state.phase = phase;
    this.state.message = message;
    this.holdShown = this.state.pausedByUser;
    // What the rollout does; a passing message (a repair) gives way to it again once things are as they should be.
    if (!opts.passing) this.m.steady = message;
    log.info(`${phase}: ${message}`, { step: this.state.step, weight: this.state.weight });
    this.details();
    const input = { ...this.statusInput(phase, message), ...(event ? { event: { reason: event, message: `canary ${this.plan.version}: ${message}`, type } } : {}) };
    const summary = `status: ${phase} at step ${Math.min(this.state.step + 1, this.state.totalSteps)}/${this.state.totalSteps}, ${describeRoute(this.m.route)}: ${message}`;
    // What changed goes through an activity, whose input the history keeps (the history command tells the story
    // from it); a refresh of the same phase and message (new analysis verdicts) is a local activity.
    const news = event !== undefined || this.published.isNew({ phase, message });
    await this.persist(`status ${phase}`, () => run(news ? acts.writeCanaryStatus : checks.writeCanaryStatus, summary, input), { undo: true, status: true });
    this.published.wrote({ phase, message });
    if (event) this.notify(event);
  }

  /**
   * Hands the notification an Event of kind `reason` makes (if any, and if anyone wants it) to a workflow of its own,
   * without waiting: a receiver never holds up nor fails the rollout. Its number is carried across runs, so its id
   * is the same in every replay and after continue-as-new.
   */
  private notify(reason: EventReason): void {
    const event = notificationEvent(reason, this.state.reason);
    const receivers = event ? receiversOf(this.plan.notifications, event) : [];
    if (!event || !receivers.length) return;
    const notified = this.m.notified ?? { seq: 0, epoch: Date.parse(this.state.startedAt) };
    const seq = notified.seq + 1;
    this.m.notified = { ...notified, seq };
    const s = this.state;
    this.launch({
      namespace: this.ref.namespace, receivers,
      message: {
        id: notificationId(workflowInfo().workflowId, this.plan.version, notified.epoch, seq, event), seq,
        application: this.ref.name, namespace: this.ref.namespace, version: this.plan.version, image: this.plan.image,
        event, phase: s.phase, message: s.message, step: s.step, weight: s.weight, at: new Date().toISOString(),
      },
    });
  }

  private launch(input: NotificationInput): void {
    const id = input.message.id;
    const started = startNotification(input).finally(() => this.starting.delete(id));
    this.starting.set(id, { input, started });
  }

  /** Waits until every notification handed over has started (not until it is delivered: its workflow sees to that). */
  async notificationsStarted(): Promise<void> {
    while (this.starting.size) await Promise.all([...this.starting.values()].map((n) => n.started));
  }

  /** The trace of the step in progress (with tracing on), shown in the current details. */
  traceId: string | undefined;

  private details(): void {
    const s = this.state;
    setCurrentDetails([
      ...(this.traceId ? [`trace of this step: ${this.traceId}`] : []),
      `**Canary ${this.plan.version}** (${this.plan.image}) — ${s.phase}`,
      `step ${Math.min(s.step + 1, s.totalSteps)}/${s.totalSteps}, canary weight ${s.weight}%`,
      s.message,
      s.pauseEndsAt ? `pause ends at ${s.pauseEndsAt}` : '',
      s.pausedByUser ? `paused by ${s.pausedBy ?? 'request'}` : '',
      `deadline ${s.deadlineAt}`,
      s.gates.length ? `last gate: ${s.gates.at(-1)!.reason}` : '',
      s.analysis?.verdicts.length ? `analysis:\n${lastVerdicts(s.analysis.verdicts).map((l) => `- ${l}`).join('\n')}` : '',
      s.checks?.length ? `checks:\n${s.checks.map((c) => `- ${c.name} (${c.phase}): ${c.result}: ${c.message}`).join('\n')}` : '',
      this.m.run > 1 ? `run ${this.m.run} of this rollout (it continues as new to keep its history short)` : '',
    ].filter(Boolean).join('\n\n'));
  }

  private statusInput(phase: RolloutPhase, message: string) {
    const s = this.state;
    return {
      ...this.ref,
      status: {
        phase, step: s.step, totalSteps: s.totalSteps, weight: s.weight, message, version: this.plan.version, image: this.plan.image,
        startedAt: s.startedAt,
        ...(s.pauseEndsAt ? { pauseEndsAt: s.pauseEndsAt } : {}),
        ...(s.pausedByUser ? { pausedBy: s.pausedBy ?? 'unknown' } : {}),
        ...(s.abortedBy ? { abortedBy: s.abortedBy } : {}),
        ...(s.reason ? { reason: s.reason } : {}),
        ...(s.routing ? { routing: s.routing } : {}),
        ...(s.analysis ? { analysis: s.analysis.verdicts } : {}),
        ...(s.checks ? { checks: s.checks } : {}),
        ...(this.plan.specDigest ? { specDigest: this.plan.specDigest } : {}),
      },
    };
  }
}
