// A canary rollout as an entity: its state and the operations the workflow's story is told with (start, a step,
// a hold, promote, compensate), the control requests it accepts, and how it publishes itself. Decisions are the
// pure functions of decide.ts; the cluster is reached only through activities.
import {
  ActivityFailure, ApplicationFailure, CancellationScope, isCancellation, log, proxyActivities, setCurrentDetails,
} from '@temporalio/workflow';
import { FailureType, Reason, RolloutPhase, isTerminal } from '../../api/constants.ts';
import type { Activities } from '../../activities/index.ts';
import type { AnalysisVerdict, CanaryRef } from '../../activities/types.ts';
import type { CanaryRoute } from '../../render/istio.ts';
import type { ControlAction, ControlRequest, RolloutInput, RolloutResult, RolloutState } from '../contract.ts';
import { judge, keptVerdicts, tally, type AnalysisDecision, type MetricTally } from './analysis.ts';
import { failureCounts, gateVerdict, interruption, noCanaryRoute, reachesCanary, routeAfterGate, sameRoute, type Interruption } from './decide.ts';
import { describeMatch, describeStep, type PlanStep, type RolloutPlan } from './plan.ts';
import { duration, run, waitFor, type Summarizable } from '../summary.ts';

/** Failures no retry can fix: the rollout acts on them at once. */
export const fatalFailures: string[] = [FailureType.CanaryNotReady, FailureType.ApplicationGone, FailureType.InvalidSpec, FailureType.Superseded];

// A few quick attempts per call (a worker killed mid-activity is noticed in 20 s); past them the rollout says in
// status that the step keeps failing and tries again with a growing delay (Rollout.persist).
const acts = proxyActivities<Activities>({
  startToCloseTimeout: '20s',
  retry: { initialInterval: '200ms', backoffCoefficient: 2, maximumInterval: '5s', maximumAttempts: 5, nonRetryableErrorTypes: fatalFailures },
});

/** Unwinds the story into compensation: an abort, failed gates or the deadline. */
export class Unwind extends Error {
  readonly interruption: Interruption;
  constructor(i: Interruption) {
    super(i.message);
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
  private promoteRequest: ControlRequest | undefined;
  private abortRequest: ControlRequest | undefined;
  /** Bumped by every accepted control request and recheck, so a waiting rollout wakes up and looks. */
  private requests = 0;
  private resumes = 0;
  /** A child the rollout owns changed: check at once rather than at the next interval. */
  private recheck = false;
  /** Set while promote() waits for the stable Deployment; its status changing ends the wait at once. */
  private awaitingStable = false;
  private stableChanged = false;
  /** What the steps ask to route to the canary; what is routed (route) is nothing while the canary has no ready replica. */
  private target: CanaryRoute = noCanaryRoute;
  private route: CanaryRoute = noCanaryRoute;
  /** The analysis: consecutive results per metric, when it last ran, and when the route last changed. */
  private tallies: Record<string, MetricTally> = {};
  private lastAnalysisAt = 0;
  private analysisFailed: { metric: string; times: number; message: string } | undefined;
  private lastGateAt = 0;
  /** When a failed check last counted toward failureThreshold. */
  private lastCountedAt = -Infinity;
  private createdAt = 0;
  private deadline: number;
  /** Compensations, registered right after the step they undo succeeded; run in reverse. */
  private readonly undos: Undo[] = [];

  constructor(input: RolloutInput) {
    const { namespace, name, plan } = input;
    this.plan = plan;
    this.ref = { namespace, name };
    const now = Date.now();
    this.deadline = now + plan.progressDeadlineMs;
    this.state = {
      namespace, name, key: plan.key, phase: RolloutPhase.Progressing, step: 0, totalSteps: plan.steps.length, weight: 0,
      message: 'starting', startedAt: new Date(now).toISOString(), pausedByUser: false,
      deadlineAt: new Date(this.deadline).toISOString(), gates: [], consecutiveFailures: 0,
      ...(plan.analysis ? { analysis: { verdicts: [], passed: false } } : {}),
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
    } else if (!pausedByUser && phase !== RolloutPhase.Paused && !this.state.analysis?.blind) {
      throw new Error('the rollout is not paused');
    }
  }

  /** Takes a validated control request; returns the state after it (an accepted abort already says Aborting). */
  accept(action: ControlAction, request: ControlRequest = {}): RolloutState {
    const by = request.by ? ` by ${request.by}` : '';
    if (action === 'promote') {
      this.promoteRequest = request;
      this.state.message = `promote requested${by}`;
    } else if (action === 'abort') {
      this.abortRequest = request;
      this.state.phase = RolloutPhase.Aborting;
      this.state.message = `abort requested${by}${request.reason ? `: ${request.reason}` : ''}`;
    } else if (action === 'pause') {
      this.state.pausedByUser = true;
    } else {
      this.state.pausedByUser = false;
      this.resumes++;
      // A person who resumes a rollout held by an inconclusive analysis takes that call: the counts start over.
      if (this.state.analysis?.blind) {
        this.state.analysis.blind = undefined;
        this.tallies = Object.fromEntries(Object.entries(this.tallies).map(([k, t]) => [k, { ...t, inconclusive: 0 }]));
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

  get promoteRequested(): boolean {
    return this.promoteRequest !== undefined;
  }

  // ---- the story ----

  /** Creates the canary at 0% and checks it once. */
  async start(): Promise<void> {
    await this.publish(RolloutPhase.Progressing, `creating canary ${this.plan.version} (${this.plan.image})`, Reason.CanaryStarted);
    await this.call(`create canary ${this.plan.version} (${this.plan.image}) at 0%`, acts.prepareCanary, { ...this.ref, plan: this.plan });
    this.createdAt = Date.now();
    this.onUndo('remove the canary: all traffic to stable, subset and Deployment removed', acts.removeCanary, this.ref);
    await this.checkGate();
  }

  /**
   * Runs one step. A route step (weight, header route, mirror) moves traffic once the gate passes, and moving the
   * weight up once an analysis has passed at the current weight too; a pause waits for its time, a resume or a
   * promote.
   */
  async runStep(index: number, step: PlanStep): Promise<void> {
    this.state.step = index;
    this.throwIfInterrupted(false);
    await this.holdWhileBlind();
    const text = describeStep(step, index, this.plan.steps.length);
    if (step.kind === 'pause') {
      const resumesAtStart = this.resumes;
      const until = step.ms === null ? undefined : Date.now() + step.ms;
      this.state.pauseEndsAt = until === undefined ? undefined : new Date(until).toISOString();
      await this.publish(RolloutPhase.Paused, text, Reason.CanaryPaused);
      await this.watch({ pause: true, ...(until !== undefined ? { until } : {}), done: () => this.promoteRequested || this.resumes !== resumesAtStart });
      this.state.pauseEndsAt = undefined;
      if (!this.promoteRequested) await this.publish(RolloutPhase.Progressing, `${text}: done`, Reason.CanaryResumed);
      return;
    }
    const next = withStep(this.target, step);
    if (reachesCanary(next)) {
      const up = step.kind === 'weight' && step.weight > this.route.weight && this.needsAnalysis();
      await this.publish(RolloutPhase.Progressing, `${text}: waiting for ${this.plan.gates.minReadyReplicas} ready canary replica(s)${up ? ' and a passing analysis at the current weight' : ''}`);
      await this.watch({ done: () => this.gateOk() && (!up || this.state.analysis?.passed === true) });
    }
    // The target moves only now: until the step may go, a gate check keeps traffic where it is.
    this.target = next;
    if (!sameRoute(this.route, next)) await this.routeTo(next);
    await this.publish(RolloutPhase.Progressing, text, Reason.CanaryStepCompleted);
  }

  /** A user's pause holds the rollout before step `next` until resumed or promoted; gates keep running. */
  async holdWhilePaused(next: number): Promise<void> {
    if (!this.state.pausedByUser) return;
    await this.publish(RolloutPhase.Paused, `paused by request at ${describeStep(this.plan.steps[next], next, this.plan.steps.length)}`, Reason.CanaryPaused);
    await this.watch({ pause: true, done: () => !this.state.pausedByUser || this.promoteRequested });
  }

  /** An analysis that cannot see holds the rollout (a pause) until a metric answers again, or a resume, promote or abort. */
  private async holdWhileBlind(): Promise<void> {
    if (!this.state.analysis?.blind || this.promoteRequested) return;
    await this.publish(RolloutPhase.Paused, `analysis inconclusive, holding: ${this.state.analysis.blind}; the rollout goes on when the metric answers again, or on resume, promote or abort`);
    await this.watch({ pause: true, done: () => !this.state.analysis?.blind || this.promoteRequested });
  }

  /** Traffic may not move up (nor the last step promote) until an analysis passed at the current route. */
  private needsAnalysis(): boolean {
    return this.plan.analysis !== undefined && reachesCanary(this.route) && this.state.analysis?.passed !== true;
  }

  private gateOk(): boolean {
    return this.state.consecutiveFailures === 0 && this.state.gates.at(-1)?.ok === true;
  }

  /** Stable takes the canary's image and must be available before traffic leaves the canary; then the canary goes. */
  async promote(): Promise<RolloutResult> {
    this.throwIfInterrupted(false);
    this.state.step = this.plan.steps.length;
    // The last step promotes on its own only after a passing analysis at the last weight; a person's promote decides.
    if (!this.promoteRequested) {
      await this.holdWhileBlind();
      if (this.needsAnalysis()) {
        await this.publish(RolloutPhase.Progressing, `all ${this.plan.steps.length} steps done: waiting for a passing analysis before promoting`);
        await this.watch({ done: () => this.promoteRequested || this.state.analysis?.passed === true });
      }
    }
    const by = this.promoteRequest?.by ? ` by ${this.promoteRequest.by}` : '';
    await this.publish(RolloutPhase.Promoting, `promoting${by}: stable Deployment takes ${this.plan.image}`, Reason.CanaryPromoting);
    await this.call(`promote: the stable Deployment takes ${this.plan.image}`, acts.promoteStable, { ...this.ref, plan: this.plan });
    this.onUndo(`restore the stable image ${this.plan.stableImage}`, acts.restoreStableImage, { ...this.ref, plan: this.plan });
    this.awaitingStable = true;
    for (;;) {
      this.stableChanged = false;
      const stable = await this.call(`check that stable runs ${this.plan.image}`, acts.stableRolledOut, { ...this.ref, image: this.plan.image });
      if (stable.done) break;
      this.state.message = stable.message;
      // Between polls gates keep running and an abort is still honoured; the stable Deployment's status changing
      // (its Application's workflow forwards it) ends the wait at once.
      await this.watch({ until: Date.now() + Math.min(this.plan.gates.intervalMs, 2000), done: () => this.stableChanged });
    }
    this.awaitingStable = false;
    await this.routeTo(noCanaryRoute);
    await this.call('remove the canary', acts.removeCanary, this.ref);
    await this.call('switch the spec\'s canary off', acts.finishCanarySpec, { ...this.ref, plan: this.plan });
    this.undos.length = 0;
    this.state.reason = Reason.CanaryPromoted;
    await this.publish(RolloutPhase.Promoted, `stable runs ${this.plan.image}; all traffic on stable, canary removed${by}`, Reason.CanaryPromoted);
    return this.result();
  }

  /**
   * Runs the registered undos in reverse, shielded from cancellation, and says why. An undo that keeps failing is
   * retried until it succeeds, and status says so meanwhile. A cancelled rollout (its Application's workflow ended)
   * is compensated, then the cancellation goes on.
   */
  async compensate(err: unknown): Promise<RolloutResult> {
    const cancelled = isCancellation(err);
    const stop: Interruption = err instanceof Unwind ? err.interruption
      : cancelled ? { phase: RolloutPhase.RolledBack, reason: Reason.RolloutCancelled, message: 'the rollout was cancelled' }
        : { phase: RolloutPhase.RolledBack, reason: failureType(err) ?? Reason.RolloutError, message: describeFailure(err) };
    const aborted = stop.phase === RolloutPhase.Aborted;
    if (stop.by) this.state.abortedBy = stop.by;
    this.state.reason = stop.reason;
    this.state.pauseEndsAt = undefined;
    await CancellationScope.nonCancellable(async () => {
      await this.publish(RolloutPhase.Aborting, `${aborted ? 'aborting' : 'rolling back'}: ${stop.message}`, aborted ? Reason.CanaryAborting : Reason.CanaryRollingBack, 'Warning');
      for (const undo of this.undos.reverse()) {
        log.info(`compensation: ${undo.what}`);
        await this.persist(undo.what, undo.run, { undo: true });
      }
      this.state.weight = 0;
      this.state.routing = undefined;
      this.route = noCanaryRoute;
      const who = aborted && this.state.abortedBy ? ` by ${this.state.abortedBy}` : '';
      await this.publish(stop.phase, `${aborted ? 'aborted' : 'rolled back'}${who}: ${stop.message}; all traffic on stable, canary removed`,
        aborted ? Reason.CanaryAborted : Reason.CanaryRolledBack, 'Warning');
    });
    if (cancelled) throw err;
    return this.result();
  }

  // ---- operations the story is made of ----

  private result(): RolloutResult {
    return { key: this.plan.key, phase: this.state.phase, message: this.state.message };
  }

  /** Registers the undo of a step that just succeeded: `activity`, summarized as `what`. */
  private onUndo<A extends unknown[]>(what: string, activity: Summarizable<A, unknown>, ...args: A): void {
    this.undos.push({ what, run: () => run(activity, what, ...args) });
  }

  /** One activity call whose history event reads `summary`, retried through persist() while it fails. */
  private call<A extends unknown[], R>(summary: string, activity: Summarizable<A, R>, ...args: A): Promise<R> {
    return this.persist(summary, () => run(activity, summary, ...args));
  }

  /** Routes `r` to the canary (read back by the activity); a new route needs a new passing analysis. */
  private async routeTo(r: CanaryRoute): Promise<void> {
    await this.call(`set canary weight ${describeRoute(r)}`, acts.setCanaryRoute, { ...this.ref, version: this.plan.version, route: r });
    this.route = r;
    this.state.weight = r.weight;
    this.state.routing = describeExtras(r);
    if (this.state.analysis) {
      this.state.analysis.passed = false;
      // The next analysis covers a whole interval of the new route.
      this.lastAnalysisAt = Date.now();
    }
  }

  /**
   * One health gate check. Records the verdict (a failure during the start-up grace is recorded, not counted), puts
   * back what a hand edit or deletion took (the canary Deployment, its subset) and makes the VirtualService route
   * what the routing rule says, read back: status never claims a weight the mesh does not have.
   */
  private async checkGate(): Promise<void> {
    this.lastGateAt = Date.now();
    this.recheck = false;
    const seen = await this.call(`gate check at ${describeRoute(this.route)}`, acts.observeCanary, { ...this.ref, version: this.plan.version, route: this.route });
    const { health } = seen;
    const verdict = gateVerdict(health, this.plan.gates);
    if (verdict.ok && !this.state.readySince) this.state.readySince = new Date(this.lastGateAt).toISOString();
    const counts = !verdict.ok && failureCounts({
      everReady: this.state.readySince !== undefined, now: this.lastGateAt, createdAt: this.createdAt, initialDelayMs: this.plan.gates.initialDelayMs,
    });
    this.state.gates = [...this.state.gates.slice(-9), {
      at: new Date(this.lastGateAt).toISOString(), ok: verdict.ok, readyReplicas: health.readyReplicas, restarts: health.restarts, reason: verdict.reason,
      ...(!verdict.ok && !counts ? { grace: true } : {}),
    }];
    // A check made early (a recheck on an event) moves traffic and puts things back, but counts at most one failure
    // per interval: a burst of events must not roll a canary back in a second.
    const countable = counts && this.lastGateAt - this.lastCountedAt >= this.plan.gates.intervalMs;
    if (countable) this.lastCountedAt = this.lastGateAt;
    this.state.consecutiveFailures = verdict.ok ? 0 : this.state.consecutiveFailures + (countable ? 1 : 0);
    if (!verdict.ok) log.warn(`health gate failed (${counts ? `${this.state.consecutiveFailures}/${this.plan.gates.failureThreshold}` : 'start-up grace, not counted'}): ${verdict.reason}`);

    const desired = routeAfterGate(this.route, this.target, health, verdict.ok);
    if (!sameRoute(desired, this.route) || !seen.asIntended) {
      const why = !reachesCanary(desired) && reachesCanary(this.route) ? 'the canary has no ready replica: all traffic moved to stable'
        : !seen.asIntended ? `the VirtualService does not route what the rollout set (it routes ${describeRouted(seen.routed)}): routing ${describeRoute(desired)} again`
          : `gate passed: routing ${describeRoute(desired)} to the canary`;
      log.warn(why);
      await this.routeTo(desired);
      // Status follows the VirtualService at once: it never claims a route the mesh does not have.
      await this.publish(this.state.phase, why);
    }
    if (!health.exists || !seen.subset) {
      const what = !health.exists ? 'the canary Deployment is gone' : 'the DestinationRule lost the canary subset';
      await this.publish(this.state.phase, `${what}: traffic stays on stable while it is put back`);
      await this.call('put the canary back', acts.prepareCanary, { ...this.ref, plan: this.plan });
      // A new canary starts again: its start-up grace and failure count start over.
      this.createdAt = Date.now();
      this.state.readySince = undefined;
      this.state.consecutiveFailures = 0;
    }
  }

  private throwIfInterrupted(pausing: boolean): void {
    const stop = interruption({
      abort: this.abortRequest, analysisFailed: this.analysisFailed, consecutiveFailures: this.state.consecutiveFailures, lastGate: this.state.gates.at(-1),
      gates: this.plan.gates, now: Date.now(), deadline: this.deadline, pausing, progressDeadlineMs: this.plan.progressDeadlineMs,
      message: this.state.message,
    });
    if (stop) throw new Unwind(stop);
  }

  /**
   * Waits until `done()` or `until`, running a health gate every interval (and at once on a recheck) and waking on
   * any control request; throws Unwind when the rollout must stop. Time in a pause does not count against the
   * progress deadline.
   */
  private async watch(opts: { until?: number; pause?: boolean; done?: () => boolean }): Promise<void> {
    const gateEvery = this.plan.gates.intervalMs;
    const analysisEvery = this.plan.analysis?.intervalMs ?? Infinity;
    for (;;) {
      // A hold for an inconclusive analysis is a pause too: it does not count against the deadline.
      const pausing = opts.pause === true || this.state.pausedByUser || Boolean(this.state.analysis?.blind);
      this.throwIfInterrupted(pausing);
      if (opts.done?.() || (opts.until !== undefined && Date.now() >= opts.until)) return;
      const started = Date.now();
      // Analysis runs while requests reach the canary; with none, there is nothing to judge.
      const analysisAt = reachesCanary(this.route) ? this.lastAnalysisAt + analysisEvery : Infinity;
      const wakes: [string, number][] = [
        ['gate check', this.lastGateAt + gateEvery], ['analysis', analysisAt],
        [opts.pause ? 'pause ends' : 'next look', opts.until ?? Infinity], ['progress deadline', pausing ? Infinity : this.deadline],
      ];
      const [what, wakeAt] = wakes.reduce((a, b) => (b[1] < a[1] ? b : a));
      const seen = this.requests;
      const ms = Math.max(1, wakeAt - started);
      const why = `${pausing ? 'paused' : 'waiting'} at step ${Math.min(this.state.step + 1, this.state.totalSteps)}/${this.state.totalSteps}: ${what} in ${duration(ms)}`;
      if (!this.recheck) await waitFor(() => this.requests !== seen, ms, why);
      if (this.recheck || Date.now() >= this.lastGateAt + gateEvery) await this.checkGate();
      if (reachesCanary(this.route) && Date.now() >= this.lastAnalysisAt + analysisEvery) await this.analyse();
      // All of a paused iteration, checks included, is pause time.
      if (pausing) {
        this.deadline += Date.now() - started;
        this.state.deadlineAt = new Date(this.deadline).toISOString();
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
    this.lastAnalysisAt = Date.now();
    const answers = await this.call(`analysis at ${describeRoute(this.route)}: ${plan.metrics.map((m) => m.name).join(', ')}`, acts.queryMetrics, {
      ...this.ref, ...(plan.prometheusAddress ? { address: plan.prometheusAddress } : {}), queries: plan.metrics.map((m) => ({ name: m.name, query: m.query })),
    });
    const at = new Date(this.lastAnalysisAt).toISOString();
    const verdicts: AnalysisVerdict[] = plan.metrics.map((m) => judge(m, answers.find((a) => a.name === m.name) ?? { name: m.name, value: null, error: 'no answer' }, at, this.route.weight));
    for (const v of verdicts) log.info(`analysis: ${v.metric}${v.dryRun ? ' (dry run)' : ''}: ${v.result}: ${v.message}`, { query: v.query, weight: v.weight });
    const { tallies, decision } = tally(this.tallies, verdicts, plan.metrics);
    this.tallies = tallies;
    analysis.verdicts = [...analysis.verdicts, ...verdicts].slice(-keptVerdicts);
    await this.decideOnAnalysis(decision);
  }

  private async decideOnAnalysis(decision: AnalysisDecision): Promise<void> {
    const analysis = this.state.analysis!;
    const wasBlind = analysis.blind;
    if (decision.kind === 'pass') analysis.passed = true;
    if (decision.kind === 'fail') {
      this.analysisFailed = { metric: decision.verdict.metric, times: decision.times, message: decision.verdict.message };
    }
    if (decision.kind === 'blind' && !wasBlind) {
      analysis.blind = `${decision.verdict.metric} inconclusive ${decision.times} times in a row: ${decision.verdict.message}`;
      await this.publish(RolloutPhase.Paused, `analysis inconclusive, holding: ${analysis.blind}`, Reason.AnalysisInconclusive, 'Warning');
      return;
    }
    if (decision.kind !== 'blind' && wasBlind) {
      analysis.blind = undefined;
      await this.publish(this.state.phase, 'analysis answers again: the rollout goes on', Reason.AnalysisRecovered);
      return;
    }
    // Status shows the last verdicts.
    await this.publish(this.state.phase, this.state.message);
  }

  /**
   * Runs one activity call; while it keeps failing with a retryable error, says so in status and tries again with a
   * growing delay, so no retry is silent. A forward step gives way to an abort (the undos run instead); an undo
   * never gives up.
   */
  private async persist<T>(what: string, once: () => Promise<T>, opts: { undo?: boolean } = {}): Promise<T> {
    for (let attempt = 1; ; attempt++) {
      try {
        return await once();
      } catch (err) {
        if (isCancellation(err) || !(err instanceof ActivityFailure) || fatalFailures.includes(failureType(err) ?? '')) throw err;
        const delayMs = Math.min(2000 * 2 ** (attempt - 1), 60_000);
        const message = `"${what}" keeps failing (${attempt * 5} attempts): ${describeFailure(err)}; trying again in ${delayMs / 1000} s`;
        log.warn(message);
        this.state.message = message;
        this.details();
        // Best effort: the API server this step needs may be what is failing.
        await run(quiet.writeCanaryStatus, `status: ${this.state.phase}: "${what}" keeps failing`, this.statusInput(this.state.phase, message)).catch(() => undefined);
        const aborted = await waitFor(() => !opts.undo && this.abortRequest !== undefined, delayMs, `retry "${what}" in ${duration(delayMs)}`);
        if (aborted) this.throwIfInterrupted(false);
      }
    }
  }

  /** Status everywhere: the CR's status.canary and an Event (an activity), the UI's current details, the history's log. */
  private async publish(phase: RolloutPhase, message: string, event?: EventReason, type: 'Normal' | 'Warning' = 'Normal'): Promise<void> {
    this.state.phase = phase;
    this.state.message = message;
    log.info(`${phase}: ${message}`, { step: this.state.step, weight: this.state.weight });
    this.details();
    const input = { ...this.statusInput(phase, message), ...(event ? { event: { reason: event, message: `canary ${this.plan.version}: ${message}`, type } } : {}) };
    const summary = `status: ${phase} at step ${Math.min(this.state.step + 1, this.state.totalSteps)}/${this.state.totalSteps}, ${describeRoute(this.route)}: ${message}`;
    await this.persist(`status ${phase}`, () => run(acts.writeCanaryStatus, summary, input), { undo: true });
  }

  private details(): void {
    const s = this.state;
    setCurrentDetails([
      `**Canary ${this.plan.version}** (${this.plan.image}) — ${s.phase}`,
      `step ${Math.min(s.step + 1, s.totalSteps)}/${s.totalSteps}, canary weight ${s.weight}%`,
      s.message,
      s.pauseEndsAt ? `pause ends at ${s.pauseEndsAt}` : '',
      `deadline ${s.deadlineAt}`,
      s.gates.length ? `last gate: ${s.gates.at(-1)!.reason}` : '',
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
        ...(s.abortedBy ? { abortedBy: s.abortedBy } : {}),
        ...(s.reason ? { reason: s.reason } : {}),
        ...(s.routing ? { routing: s.routing } : {}),
        ...(s.analysis ? { analysis: s.analysis.verdicts } : {}),
      },
    };
  }
}

/** The route a step asks for: the current target with the step's change (an empty header match or 0% mirror removes it). */
function withStep(target: CanaryRoute, step: Exclude<PlanStep, { kind: 'pause' }>): CanaryRoute {
  const { headers, mirror, ...rest } = target;
  const next: CanaryRoute = { ...rest, ...(headers?.length ? { headers } : {}), ...(mirror ? { mirror } : {}) };
  if (step.kind === 'weight') return { ...next, weight: step.weight };
  if (step.kind === 'header') {
    const { headers: _h, ...without } = next;
    return step.match.length ? { ...without, headers: step.match } : without;
  }
  const { mirror: _m, ...without } = next;
  return step.percent ? { ...without, mirror: step.percent } : without;
}

/** A route in words. */
function describeRoute(r: CanaryRoute): string {
  return [`${r.weight}%`, describeExtras(r)].filter(Boolean).join(', ');
}

/** A header route and a mirror, in words (empty when neither). */
function describeExtras(r: CanaryRoute): string | undefined {
  const parts = [r.headers?.length ? `requests with ${describeMatch(r.headers)}` : '', r.mirror ? `a ${r.mirror}% mirror` : ''].filter(Boolean);
  return parts.length ? parts.join(', ') : undefined;
}

/** Routes read back, in words. */
function describeRouted(w: { canary: number; headerRoute: boolean; mirror: number } | null): string {
  if (!w) return 'nothing (no VirtualService)';
  return [`${w.canary}%`, w.headerRoute ? 'a header route' : '', w.mirror ? `a ${w.mirror}% mirror` : ''].filter(Boolean).join(', ');
}

// One attempt, for status written while something else is failing.
const quiet = proxyActivities<Activities>({ startToCloseTimeout: '10s', retry: { maximumAttempts: 1 } });

function failureType(err: unknown): string | undefined {
  return err instanceof ActivityFailure && err.cause instanceof ApplicationFailure ? err.cause.type ?? undefined : undefined;
}

function describeFailure(err: unknown): string {
  if (err instanceof ActivityFailure && err.cause instanceof ApplicationFailure) return `${err.cause.type ?? 'error'}: ${err.cause.message}`;
  if (err instanceof ActivityFailure && err.cause) return err.cause.message;
  return err instanceof Error ? err.message : String(err);
}
