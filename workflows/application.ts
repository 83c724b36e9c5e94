import {
  ActivityFailure, ApplicationFailure, CancellationScope, CancelledFailure, ChildWorkflowFailure, ParentClosePolicy, TerminatedFailure, TimeoutFailure,
  allHandlersFinished, condition, continueAsNew, getExternalWorkflowHandle, isCancellation, log, patched, proxyActivities, proxyLocalActivities, setCurrentDetails, setHandler,
  startChild, upsertSearchAttributes, workflowInfo, type ChildWorkflowHandle, type SignalDefinition,
} from '@temporalio/workflow';
import { FailureType, Reason, RolloutPhase, canaryName, isTerminal } from '../api/constants.ts';
import type { Activities } from '../activities/index.ts';
import type { FinalizeInput, FinalizeResult, ReconcileInput, ReconcileResult } from '../activities/types.ts';
import {
  applicationPatchLevel, changedSignal, controlActions, controlSignals, defaultLoopOptions, recheckSignal, rolloutEndedSignal, rolloutPatchLevel, rolloutWorkflowId, stateQuery,
  type ApplicationState, type ApplicationWorkflowInput, type ChangeReason, type ChangeSignal, type ControlAction, type ControlRequest, type FollowedRollout, type LoopOptions,
  type RecoveredRollout, type RolloutEnded,
} from './contract.ts';
import type { RolloutPlan } from '../reconcile/plan.ts';
import type { canaryRolloutWorkflow } from './rollout/workflow.ts';
import { rolloutWorkflows } from './strategies.ts';
import { appPhaseKey } from './search-attributes.ts';
import { duration, run, waitFor } from './summary.ts';
import { activeSpanContext, traced } from './kit/trace.ts';
import type { SpanContext } from '@opentelemetry/api';

/** A reconcile pass's reasons as its history summary says them. */
const reasonWords: Record<ChangeReason, string> = {
  spec: 'spec changed', child: 'a child changed or was deleted', 'child-status': 'a Deployment\'s status changed', resync: 'resync', deleted: 'deleted',
};

// Back off from 100 ms to 1 min on API errors; a spec the API server rejects fails at once instead.
// Activities heartbeat between API calls, so a worker killed mid-pass is noticed in seconds rather than minutes.
const { reconcileApplication, finalizeApplication } = proxyActivities<Activities>({
  startToCloseTimeout: '2m',
  heartbeatTimeout: '10s',
  retry: { initialInterval: '100ms', backoffCoefficient: 2, maximumInterval: '1m', nonRetryableErrorTypes: [FailureType.InvalidSpec, FailureType.ApplyRejected] },
});

// A pass runs first as a local activity, in the worker that runs the workflow task: no activity task goes through the
// server, which halves a pass's events and writes. It gets a few quick tries; a pass still failing is run again as
// the activity above, with its backoff, heartbeats, and the pending activity and last failure that the UI shows. A
// pass is idempotent, so running it again is harmless. Histories from before this ran every pass as an activity.
const local = proxyLocalActivities<Activities>({
  startToCloseTimeout: '20s',
  scheduleToCloseTimeout: '30s',
  retry: { initialInterval: '100ms', backoffCoefficient: 2, maximumAttempts: 3, nonRetryableErrorTypes: [FailureType.InvalidSpec, FailureType.ApplyRejected] },
});
const localPassesPatch = 'reconcile-as-local-activity';
/** What a pass costs the history at least (a signal, a workflow task, the pass's marker, a status write or two). */
const eventsPerPass = 8;
const forwardStablePatch = 'recheck-rollout-on-stable-status';
// Rollouts outlive the run that started them (ParentClosePolicy ABANDON), so this workflow can continue as new while
// one waits for days; it follows them by their rolloutEnded signal. Runs from before this kept REQUEST_CANCEL and
// never continued as new with a rollout in flight.
const outliveRunsPatch = 'rollouts-outlive-runs';

// Writing a rollout's end into status when its workflow could not (it was terminated, timed out or failed).
const { closeCanaryStatus } = proxyLocalActivities<Activities>({
  startToCloseTimeout: '20s',
  retry: { initialInterval: '200ms', backoffCoefficient: 2, maximumInterval: '10s' },
});

/** Failure types the reconcile activity raises after writing a status condition that explains them. */
const reportedFailures: ReadonlySet<string> = new Set([FailureType.InvalidSpec, FailureType.ApplyRejected]);

/** The failure a reconcile pass reported in status (and that no retry can fix), if that is what `err` is. */
function reportedFailure(err: unknown): ApplicationFailure | undefined {
  // An activity's failure comes wrapped in an ActivityFailure; a local activity's as it was thrown.
  const cause = err instanceof ActivityFailure ? err.cause : err;
  return cause instanceof ApplicationFailure && cause.type && reportedFailures.has(cause.type) ? cause : undefined;
}

// Finalizing too runs first as a local activity (no activity task, three events fewer per deletion: a namespace of
// many Applications goes faster), then as the activity above if that failed. Histories from before ran it as one.
const localFinalizePatch = 'finalize-as-local-activity';
const inlineFinalizePatch = 'finalize-in-the-deleted-pass';
// A child the API server refused (admission denied it, a quota or CRD is missing) is applied again after a while, in
// case the policy, quota or CRD changed (LoopOptions.refusedRetrySeconds, doubling to ten times that), and at once on
// any change. Runs from before waited for a change.
const retryRefusedPatch = 'retry-refused-applies';
// A pass that keeps failing waits up to a minute between tries (the activity's backoff). A new spec or a deletion
// cancels it and passes again at once, as a controller's work queue takes an event in at once. Runs from before
// waited for the next try.
const supersedeRetriesPatch = 'supersede-retrying-pass';

/**
 * Patches a run takes as given, by patch level (the run's input `patchLevel`). Each patch a run meets costs its history
 * a marker and a TemporalChangeVersion search-attribute upsert (two events and a visibility write) the first time,
 * which for a new Application was four of its events. A run at level 1 or more, started by a watcher that knows
 * these patches, needs no marker for them: it calls `patched()` for them only while replaying, where a marker is
 * there only if a worker of an older release (one that ignored the level) recorded it, and the call consumes it.
 * Runs started before keep calling `patched()`. A patch added later goes through `patched()` until it is settled at
 * a higher level.
 */
const settledPatches: readonly (readonly string[])[] = [
  [],
  [outliveRunsPatch, localPassesPatch, forwardStablePatch, localFinalizePatch, inlineFinalizePatch],
];

/** `patched(id)`, or true without a marker for a patch the run's level settles (see `settledPatches`). */
function hasPatch(level: number, id: string): boolean {
  if (!settledPatches.slice(0, level + 1).some((ids) => ids.includes(id))) return patched(id);
  if (workflowInfo().unsafe.isReplaying) patched(id);
  return true;
}

/** Removes the children and releases the finalizer: as a local activity, then as an activity if that failed. */
async function finalizePass(level: number, summary: string, input: FinalizeInput): Promise<FinalizeResult> {
  if (!hasPatch(level, localFinalizePatch)) return run(finalizeApplication, summary, input);
  try {
    return await run(local.finalizeApplication, summary, input);
  } catch (err) {
    log.warn('finalizing failed as a local activity; running it as an activity', { err: String(err) });
    return run(finalizeApplication, summary, input);
  }
}

/**
 * One pass: as a local activity, then as an activity if that failed for any reason but one reported in status. The
 * activity, retried with its backoff, gives way once `superseded` says a newer reason came (the pass then ends
 * `superseded`, and the workflow passes again over the Application as it is now).
 */
async function reconcilePass(level: number, summary: string, input: ReconcileInput, superseded: () => boolean): Promise<ReconcileResult> {
  if (!hasPatch(level, localPassesPatch)) return run(reconcileApplication, summary, input);
  try {
    return await run(local.reconcileApplication, summary, input);
  } catch (err) {
    if (reportedFailure(err)) throw err;
    log.warn('reconcile pass failed as a local activity; running it as an activity', { err: String(err) });
    const pass = () => run(reconcileApplication, summary, input);
    return hasPatch(level, supersedeRetriesPatch) ? unlessSuperseded(pass, superseded) : pass();
  }
}

/** Runs `pass`, cancelled once `superseded` holds: then it ends `superseded` instead. */
async function unlessSuperseded(pass: () => Promise<ReconcileResult>, superseded: () => boolean): Promise<ReconcileResult> {
  const passing = new CancellationScope();
  const watching = new CancellationScope();
  let gaveWay = false;
  watching.run(() => condition(superseded)).then(() => {
    gaveWay = true;
    passing.cancel();
  }, () => undefined);
  try {
    return await passing.run(pass);
  } catch (err) {
    if (gaveWay && isCancellation(err)) {
      log.info('a retrying reconcile pass gave way to a newer change');
      return { outcome: 'superseded' };
    }
    throw err;
  } finally {
    watching.cancel();
  }
}

/** The rollout this workflow follows: started by this run (a child whose result it awaits) or carried from an earlier run. */
interface RunningRollout extends FollowedRollout {
  /** The child handle, when this run started it: its result (or failure) arrives without a signal. */
  child?: ChildWorkflowHandle<typeof canaryRolloutWorkflow>;
  /** Started with ParentClosePolicy ABANDON: it may outlive this run (runs from before that cancelled it instead). */
  outlivesRun: boolean;
  result?: RolloutEnded;
}

/**
 * An Application as the workflow sees it: what woke it, the state it reports, and the rollout it runs as a child
 * workflow. The workflow function below tells the loop; this keeps the state and the operations.
 */
class ApplicationEntity {
  readonly state: ApplicationState;
  readonly opts: LoopOptions;
  private readonly input: ApplicationWorkflowInput;
  /** Reasons to reconcile that arrived since the last pass; a new run always starts with one (a missed event, a restart). */
  private pending = new Set<ChangeReason>(['resync']);
  /** The Deployment is still rolling out: re-check on a timer besides events. */
  private progressing = false;
  private rollout: RunningRollout | undefined;
  /** Key of the last rollout this run finished: never restarted by itself (an aborted canary stays aborted). */
  private lastRolloutKey: string | undefined;
  /** Whether this run knows if a rollout is in flight; a fresh run learns it from status on its first pass. */
  private rolloutKnown: boolean;
  /** A rollout whose workflow ended without finishing, to be written into status once a pass moved traffic back. */
  private endedAbnormally: RolloutEnded | undefined;
  private readonly outlive: boolean;
  /** Which patches this run takes as given (`settledPatches`). */
  private readonly patchLevel: number;
  private publishedPhase: string | undefined;
  /** A rollout could not start yet (another of this app's is closing): look again in a second. */
  private retrySoon = false;
  /** Passes in a row the API server refused a child of (ApplyRejected): how long until the next try. */
  private refusedPasses = 0;
  /** Passes this run made: what decides continue-as-new when events leave no wait between passes. */
  private passesThisRun = 0;
  /** Why the current pass runs and which children changed, for its activity's summary. */
  private reasons: ChangeReason[] = [];
  private objects: string[] = [];
  private readonly pendingObjects = new Set<string>();
  /** Children a watch saw edited or deleted (reason child): the pass says which of them it put back. */
  private drifted: string[] = [];
  private readonly pendingDrift = new Set<string>();
  /** The watcher said the Application's namespace is being deleted: finalizing leaves the children to it. */
  private namespaceGoing = false;

  get withNamespace(): boolean {
    return this.namespaceGoing;
  }
  /** The trace of the signal the next pass answers, and the last pass's trace id (with tracing on). */
  private signalTrace: SpanContext | undefined;
  private lastTraceId: string | undefined;

  constructor(input: ApplicationWorkflowInput) {
    this.input = input;
    this.opts = { ...defaultLoopOptions, ...input.options };
    const c = input.carried;
    this.state = {
      namespace: input.namespace, name: input.name, passes: c?.passes ?? 0,
      ...(c?.lastPhase ? { phase: c.lastPhase } : {}),
      ...(c?.lastGeneration !== undefined ? { generation: c.lastGeneration } : {}),
    };
    // The phase the run started with in its search attribute: the watcher starts a workflow with the phase status
    // names (Pending for a new Application), so a first pass that finds that phase upserts nothing.
    this.publishedPhase = c?.lastPhase ?? workflowInfo().typedSearchAttributes.get(appPhaseKey);
    this.patchLevel = input.patchLevel ?? 0;
    this.outlive = hasPatch(this.patchLevel, outliveRunsPatch);
    this.lastRolloutKey = c?.lastRolloutKey;
    this.rolloutKnown = c !== undefined || !this.outlive;
    if (c?.rollout) this.rollout = { ...c.rollout, outlivesRun: true };
  }

  changed(reason: ChangeReason, object?: string, drifted: string[] = [], namespaceGoing = false): void {
    // With tracing on, the next pass joins the trace of the signal that asked for it (the newest, when several did).
    this.signalTrace = activeSpanContext() ?? this.signalTrace;
    this.pending.add(reason);
    if (namespaceGoing) this.namespaceGoing = true;
    if (object) this.pendingObjects.add(object);
    if (object && reason === 'child') this.pendingDrift.add(object);
    for (const o of drifted) this.pendingDrift.add(o);
    this.state.lastReason = reason;
    // A running rollout looks at once when one of its children changed: a hand edit of its routes, its Deployment
    // deleted, its pods becoming ready or not. It puts back what was taken and moves traffic off an empty canary.
    // The stable Deployment's status too, which a promotion waits on (histories from before this did not forward it).
    const running = this.running;
    const canary = `Deployment/${canaryName({ metadata: { name: this.state.name } })}`;
    const stable = `Deployment/${this.state.name}`;
    if (running && (reason === 'child' || (reason === 'child-status' && (object === canary || (object === stable && hasPatch(this.patchLevel, forwardStablePatch)))))) {
      this.signalRollout(running, recheckSignal, { ...(object ? { object } : {}) }).catch((err: unknown) => {
        // A rollout that has just ended (its end signal on its way here) is why its children changed: nothing to see.
        if (workflowGone(err)) log.info('the rollout ended before its recheck reached it', { key: running.key });
        else log.warn('could not ask the rollout to recheck', { err: String(err) });
      });
    }
  }

  /**
   * A rollout ended: its own word (it signals this workflow as its last act), or the operator's sweep reporting a
   * rollout workflow that closed without finishing. A report about an earlier rollout is stale and ignored.
   */
  rolloutEnded(ended: RolloutEnded): void {
    const r = this.rollout;
    // A child of this run: its completion comes with the workflow's close, which the signal only announces (a new
    // rollout of the same id could not start yet).
    if (!r || r.result || r.child) return;
    const stale = ended.key !== undefined ? ended.key !== r.key : ended.closedAt !== undefined && Date.parse(ended.closedAt) < r.since;
    if (stale) {
      log.info('ignored the end of an earlier rollout', { ...ended, following: r.key });
      return;
    }
    r.result = { ...ended, key: ended.key ?? r.key };
  }

  query(): ApplicationState {
    return { ...this.state, ...(this.running ? { rollout: this.running.key } : {}) };
  }

  /** Control sent to the Application's workflow reaches the running rollout, so one id works for everything. */
  forward(action: ControlAction, request: ControlRequest = {}): void {
    const running = this.running;
    if (!running) {
      log.warn(`ignored ${action} signal: no canary rollout is running for ${this.state.namespace}/${this.state.name}`);
      return;
    }
    this.signalRollout(running, controlSignals[action], request).catch((err: unknown) => log.warn(`could not forward ${action}`, { err: String(err) }));
  }

  /**
   * Waits for a reason to reconcile (an event, a finished rollout, or a timer); returns whether children are
   * re-applied, or null when the run should continue as new first.
   */
  async nextPass(): Promise<boolean | null> {
    if (this.pending.size === 0) {
      const { wait, why } = this.nextWait();
      const woken = () => this.pending.size > 0 || this.rolloutFinished;
      this.retrySoon = false;
      const timedOut = wait > 0 ? !(await waitFor(woken, wait * 1000, `${why} in ${duration(wait * 1000)}`)) : (await condition(woken), false);
      if (timedOut) this.pending.add(this.progressing ? 'child-status' : 'resync');
      // Decided first thing in the workflow task the wake began, before a pass (a local activity) resolves in it:
      // the history length read after a local activity depends on which task its result came in, which a replay
      // cannot reproduce.
      if (this.shouldContinueAsNew(workflowInfo())) return null;
    } else if (this.shouldContinueAsNew({ continueAsNewSuggested: false, historyLength: this.passesThisRun * eventsPerPass })) {
      // Woken again and again with no wait between (a flood of events): a count of this run's passes decides instead.
      return null;
    }
    if (this.rolloutFinished) {
      const r = this.rollout!.result!;
      log.info('canary rollout finished', { key: r.key, phase: r.phase, message: r.message, abnormal: r.abnormal });
      if (r.abnormal) this.endedAbnormally = r;
      this.rollout = undefined;
      // Back to the steady state: stable routes only, no canary Deployment.
      this.pending.add('resync');
    }
    const reasons = this.pending;
    this.pending = new Set();
    this.reasons = [...reasons];
    this.objects = [...this.pendingObjects];
    this.pendingObjects.clear();
    this.drifted = [...this.pendingDrift];
    this.pendingDrift.clear();
    // After a refusal every pass applies (and is refused again, or applies what is allowed now): a pass that only
    // read status would write one that no longer says the spec was refused.
    return this.reasons.some((r) => r !== 'child-status') || this.refusedPasses > 0;
  }

  /** How long to wait for an event before passing anyway (0: no timer), and why, for the timer's summary. */
  private nextWait(): { wait: number; why: string } {
    if (this.retrySoon) return { wait: 1, why: 'start the canary rollout again' };
    if (this.refusedPasses > 0 && this.opts.refusedRetrySeconds > 0 && hasPatch(this.patchLevel, retryRefusedPatch)) {
      const refused = Math.min(2 ** (this.refusedPasses - 1), 10) * this.opts.refusedRetrySeconds;
      return { wait: this.opts.resyncSeconds > 0 ? Math.min(refused, this.opts.resyncSeconds) : refused, why: 'apply what the API server refused again' };
    }
    if (this.progressing) return { wait: this.opts.progressRecheckSeconds, why: 'the Deployment is rolling out: look again' };
    return { wait: this.opts.resyncSeconds, why: 'resync' };
  }

  /**
   * The Application changed under the pass (its watch event may still be on its way): the next pass goes over it as
   * it is now, for what woke this one too (its drift still repaired and said, a deletion still finalized at once).
   */
  passAgain(): void {
    for (const r of [...this.reasons, 'spec' as const]) this.pending.add(r);
    for (const o of this.objects) this.pendingObjects.add(o);
    for (const o of this.drifted) this.pendingDrift.add(o);
  }

  /** One reconcile pass; null when the activity reported a failure in status (then wait for the user to change something). */
  async reconcile(apply: boolean): Promise<ReconcileResult | null> {
    const parent = this.signalTrace;
    this.signalTrace = undefined;
    const { namespace, name } = this.state;
    return traced(`reconcile pass ${namespace}/${name}`, parent, { 'app.namespace': namespace, 'app.name': name }, (traceId) => this.reconcileTraced(apply, traceId));
  }

  private async reconcileTraced(apply: boolean, traceId: string | undefined): Promise<ReconcileResult | null> {
    const { namespace, name } = this.state;
    this.lastTraceId = traceId;
    try {
      const why = [...this.reasons.map((r) => reasonWords[r]), ...this.objects, ...(this.namespaceGoing ? ['its namespace is being deleted'] : [])].join(', ');
      const summary = `${apply ? 'apply children' : 'read status'} (${why})${traceId ? ` · trace ${traceId}` : ''}`;
      // A fresh run does not know yet whether a rollout is in flight: the pass leaves the canary to one status names.
      const rolloutActive = this.rollout !== undefined ? true : this.rolloutKnown ? false : undefined;
      // Told of a deletion with no rollout to compensate, the pass finalizes at once (runs from before took two steps).
      const finalize = this.reasons.includes('deleted') && this.rollout === undefined && hasPatch(this.patchLevel, inlineFinalizePatch);
      const result = await reconcilePass(this.patchLevel, summary, {
        namespace, name, workflowId: workflowInfo().workflowId, apply, acceptsSuperseded: true,
        ...(rolloutActive !== undefined ? { rolloutActive } : {}), ...(apply && this.drifted.length ? { drifted: this.drifted } : {}),
        ...(finalize ? { finalize } : {}), ...(this.namespaceGoing ? { namespaceGoing: true } : {}),
        // The watcher signals a stable pod only when it shows a new problem.
        ...(this.objects.some((o) => o.startsWith('Pod/')) ? { podProblem: true } : {}),
      }, () => this.pending.has('spec') || this.pending.has('deleted'));
      this.state.passes++;
      this.passesThisRun++;
      if (result.outcome === 'reconciled') {
        if (apply) this.refusedPasses = 0;
        this.progressing = result.progressing ?? false;
        if (result.phase) this.state.phase = result.phase;
        if (result.generation !== undefined) this.state.generation = result.generation;
        if (result.message !== undefined) this.state.message = result.message;
      }
      return result;
    } catch (err) {
      const cause = reportedFailure(err);
      if (!cause) throw err;
      this.state.phase = 'Failed';
      this.state.message = cause.message;
      this.progressing = false;
      // An invalid spec stays invalid until it changes (an event); a refused apply may pass once a policy changes.
      this.refusedPasses = cause.type === FailureType.ApplyRejected ? this.refusedPasses + 1 : 0;
      log.warn('reconcile rejected', { reason: cause.type, message: cause.message });
      this.publish(`**Failed** (${cause.type}): ${cause.message}`);
      return null;
    }
  }

  /** Starts, supersedes or stops rollouts to match what the spec asks for. */
  async steerRollout(result: ReconcileResult): Promise<void> {
    const plan = result.canary;
    if (!this.rolloutKnown) {
      this.rolloutKnown = true;
      const last = result.lastRollout;
      if (!this.rollout && last && !isTerminal(last.phase) && await this.takeUpInFlight(last, plan)) return;
    }
    const running = this.running;
    if (running) {
      if (!plan) await this.abortRollout('the canary was disabled in the spec', 'spec');
      else if (plan.key !== running.key) await this.abortRollout(`superseded by canary ${plan.version} (${plan.image})`, 'spec');
      return;
    }
    if (!plan) {
      this.lastRolloutKey = undefined;
      return;
    }
    const finishedBefore = plan.key === this.lastRolloutKey
      || (this.lastRolloutKey === undefined && result.lastRollout?.key === plan.key && isTerminal(result.lastRollout.phase));
    if (finishedBefore) {
      this.lastRolloutKey = plan.key;
      return;
    }
    await this.startRollout(plan);
  }

  /**
   * A fresh run whose Application's status says a rollout is in flight: follow it if its workflow still runs (this
   * workflow was lost or terminated, not the rollout); take it up again from status if Temporal lost it and the spec
   * still asks for it; otherwise it is over: status says so and the next pass moves traffic back to stable. True
   * when nothing more is to be steered in this pass.
   */
  private async takeUpInFlight(last: RecoveredRollout, plan: RolloutPlan | undefined): Promise<boolean> {
    const { namespace, name } = this.state;
    const alive = await getExternalWorkflowHandle(rolloutWorkflowId(namespace, name)).signal(recheckSignal, {}).then(() => true, () => false);
    if (alive) {
      log.info('following a rollout already in flight', { key: last.key });
      this.rollout = { key: last.key, version: last.key.split('|')[0] ?? '', since: Date.now(), outlivesRun: true };
      return false;
    }
    if (plan?.key === last.key) {
      log.warn('the rollout in flight has no workflow (Temporal lost it): taking it up again from status', { key: last.key, step: last.step, phase: last.phase });
      await this.startRollout(plan, last);
      return true;
    }
    this.endedAbnormally = {
      key: last.key, phase: RolloutPhase.RolledBack, abnormal: Reason.RolloutLost,
      message: `the rollout of ${last.key.split('|')[0]} had no workflow any more (Temporal lost it) and the spec no longer asks for it`,
    };
    this.pending.add('resync');
    return true;
  }

  /**
   * Says in status, with a Warning Event, that a rollout's workflow ended without finishing, once a pass has moved
   * all traffic to stable and removed the canary.
   */
  async reportAbnormalEnd(): Promise<void> {
    const ended = this.endedAbnormally;
    if (!ended || this.pending.size > 0) return;
    this.endedAbnormally = undefined;
    const reason = ended.abnormal === 'TimedOut' ? Reason.RolloutTimedOut : ended.abnormal === 'Failed' ? Reason.RolloutFailed
      : ended.abnormal === Reason.RolloutLost ? Reason.RolloutLost : Reason.RolloutTerminated;
    await run(closeCanaryStatus, `status: the rollout of ${ended.key?.split('|')[0] ?? '?'} ended without finishing (${reason})`, {
      namespace: this.state.namespace, name: this.state.name, key: ended.key ?? '', phase: RolloutPhase.RolledBack, reason,
      message: `${ended.message}: the Application's workflow moved all traffic to stable and removed the canary`,
    });
  }

  /** The Application is going: abort a running rollout and wait for its compensation. */
  async stopRollout(): Promise<void> {
    if (!this.running) return;
    await this.abortRollout('the Application is being deleted', 'operator');
    await condition(() => this.rolloutFinished);
  }

  /**
   * Removes the children and releases the finalizer, unless the pass already did (`done`); true when a signal
   * meanwhile may be about a new Application of the same name.
   */
  async finalize(uid: string, done?: FinalizeResult): Promise<boolean> {
    this.state.phase = 'Deleting';
    this.publish(this.namespaceGoing ? 'Deleting with its namespace: releasing the finalizer (the namespace controller removes the children)' : 'Deleting: removing children, then releasing the finalizer');
    const fin = done ?? await finalizePass(this.patchLevel, this.namespaceGoing ? 'release the finalizer (the namespace is being deleted: its controller removes the children)' : 'remove the children and release the finalizer', {
      namespace: this.state.namespace, name: this.state.name, uid, ...(this.namespaceGoing ? { namespaceGoing: true } : {}),
    });
    log.info('finalized', { removed: fin.removed, finalizerReleased: fin.finalizerReleased, ...(fin.leftToNamespace ? { leftToNamespace: true } : {}) });
    return this.pending.size > 0;
  }

  /** A rollout that outlives runs goes on across this one's continue-as-new; one of an older run's kind holds it back. */
  private shouldContinueAsNew(info: { continueAsNewSuggested: boolean; historyLength: number }): boolean {
    const held = this.rollout !== undefined && !this.rollout.outlivesRun;
    return !held && !this.endedAbnormally && (info.continueAsNewSuggested || info.historyLength >= this.opts.maxHistoryEvents);
  }

  /** The input of the next run: carried state, or a fresh start for a new Application of the same name. */
  nextRun(carry: boolean): ApplicationWorkflowInput {
    const { namespace, name, passes, phase, generation } = this.state;
    const r = this.running;
    const rollout: FollowedRollout | undefined = r && { key: r.key, version: r.version, since: r.since, ...(r.aborting ? { aborting: true } : {}) };
    return {
      namespace, name,
      // The next run starts on this code: the patches it settles need no marker there.
      patchLevel: applicationPatchLevel,
      ...(this.input.options ? { options: this.input.options } : {}),
      ...(carry ? {
        carried: {
          passes, ...(phase ? { lastPhase: phase } : {}), ...(generation !== undefined ? { lastGeneration: generation } : {}),
          ...(rollout ? { rollout } : {}), ...(this.lastRolloutKey ? { lastRolloutKey: this.lastRolloutKey } : {}),
        },
      } : {}),
    };
  }

  /** Mirrors the state into the Temporal UI: current details, and the AppPhase search attribute when it changes. */
  publish(details: string): void {
    const { namespace, name, passes, phase } = this.state;
    const r = this.running ? `\n\ncanary rollout running: ${this.running.key}` : '';
    const t = this.lastTraceId ? `\n\nlast pass's trace: ${this.lastTraceId}` : '';
    setCurrentDetails(`${namespace}/${name}: ${details}${r}\n\npasses: ${passes}${t}`);
    if (phase && phase !== this.publishedPhase) {
      this.publishedPhase = phase;
      upsertSearchAttributes([{ key: appPhaseKey, value: phase }]);
    }
  }

  private get running(): RunningRollout | undefined {
    return this.rollout && !this.rollout.result ? this.rollout : undefined;
  }

  private get rolloutFinished(): boolean {
    return this.rollout?.result !== undefined;
  }

  private async startRollout(plan: RolloutPlan, recovered?: RecoveredRollout): Promise<void> {
    const { namespace, name } = this.state;
    let child: ChildWorkflowHandle<typeof canaryRolloutWorkflow>;
    try {
      child = await startChild(rolloutWorkflows[plan.strategy ?? 'canary'], {
        workflowId: rolloutWorkflowId(namespace, name),
        args: [{ namespace, name, plan, maxHistoryEvents: this.opts.maxHistoryEvents, patchLevel: rolloutPatchLevel, ...(recovered ? { recovered } : {}) }],
        // The rollout outlives this run (continue-as-new) and a terminated Application workflow; a deleted
        // Application aborts it explicitly and waits for its compensation.
        parentClosePolicy: this.outlive ? ParentClosePolicy.ABANDON : ParentClosePolicy.REQUEST_CANCEL,
        staticSummary: `${plan.strategy === 'blueGreen' ? 'Blue-green rollout' : 'Canary'} ${plan.version} of ${namespace}/${name}`,
        staticDetails: `image ${plan.image}; ${plan.steps.length} steps; promote, abort, pause, resume as updates or signals`,
      });
    } catch (err) {
      // The rollout before it is closing (it reports its end a moment before its workflow closes), or an earlier
      // rollout of this app still compensates after its Application's workflow was terminated: try again soon.
      log.warn('could not start the canary rollout; will retry', { key: plan.key, err: String(err) });
      this.retrySoon = true;
      return;
    }
    const r: RunningRollout = { key: plan.key, version: plan.version, since: Date.now(), child, outlivesRun: this.outlive };
    this.rollout = r;
    this.lastRolloutKey = plan.key;
    log.info('canary rollout started', { key: plan.key, ...(recovered ? { recoveredAt: recovered.step } : {}) });
    void child.result().then(
      (res) => { r.result ??= res; },
      (err: unknown) => { r.result ??= endedBy(plan.key, err); },
    );
  }

  /** Signals the rollout: through the child handle when this run started it, by its workflow id otherwise. */
  private signalRollout<A extends unknown[]>(r: RunningRollout, def: SignalDefinition<A>, ...args: A): Promise<void> {
    if (r.child) return r.child.signal(def, ...args);
    return getExternalWorkflowHandle(rolloutWorkflowId(this.state.namespace, this.state.name)).signal(def, ...args);
  }

  private async abortRollout(reason: string, by: string): Promise<void> {
    const running = this.running;
    if (!running || running.aborting) return;
    running.aborting = true;
    try {
      await this.signalRollout(running, controlSignals.abort, { by, reason });
    } catch (err) {
      // The rollout ended meanwhile (a promote switches the spec's canary off as its last step): nothing to abort.
      log.info('rollout already finished; abort not needed', { key: running.key, err: String(err) });
    }
  }
}

/**
 * One long-lived workflow per Application: woken by the watcher's `changed` signal, it reconciles the children and
 * status through an activity, runs each canary rollout as a child workflow, finalizes on delete, and
 * continues-as-new before its history grows large. docs/architecture.md tells the whole path.
 */
export async function applicationWorkflow(input: ApplicationWorkflowInput): Promise<string> {
  const app = new ApplicationEntity(input);
  const changed = (s: ChangeSignal) => app.changed(s.reason, s.object, s.drifted, s.namespaceGoing);
  setHandler(changedSignal, changed);
  setHandler(rolloutEndedSignal, (e) => app.rolloutEnded(e));
  setHandler(stateQuery, () => app.query());
  for (const action of controlActions) setHandler(controlSignals[action], (r) => app.forward(action, r));
  // A plain start's change (a new Application), as its signal would have come.
  if (input.change) changed(input.change);

  for (;;) {
    const apply = await app.nextPass();
    if (apply === null) {
      await condition(allHandlersFinished);
      return continueAsNew<typeof applicationWorkflow>(app.nextRun(true));
    }
    const result = await app.reconcile(apply);
    if (!result) continue;
    if (result.outcome === 'superseded') {
      app.passAgain();
      continue;
    }

    if (result.outcome !== 'reconciled') {
      await app.stopRollout();
      if (result.outcome === 'gone') {
        app.publish(app.withNamespace
          ? 'Application deleted with its namespace: the watcher released its finalizer (no rollout to compensate; the namespace controller deletes the children)'
          : 'Application no longer exists');
        return 'gone';
      }
      if (await app.finalize(result.uid ?? '', result.finalized)) {
        await condition(allHandlersFinished);
        return continueAsNew<typeof applicationWorkflow>(app.nextRun(false));
      }
      return 'deleted';
    }

    await app.reportAbnormalEnd();
    await app.steerRollout(result);
    app.publish(`**${app.state.phase ?? 'Unknown'}** at generation ${app.state.generation ?? '?'}: ${app.state.message ?? ''}`);
  }
}

/** Whether signalling another workflow failed because it has ended (Temporal says it was not found). */
function workflowGone(err: unknown): boolean {
  return err instanceof ApplicationFailure && /\bnot found\b/.test(err.message);
}

/** How a child rollout that returned no result ended. A cancelled one compensated and wrote its status itself. */
function endedBy(key: string, err: unknown): RolloutEnded {
  const cause = err instanceof ChildWorkflowFailure ? err.cause : err;
  if (cause instanceof CancelledFailure) return { key, phase: RolloutPhase.RolledBack, message: 'the rollout was cancelled' };
  const abnormal = cause instanceof TerminatedFailure ? 'Terminated' : cause instanceof TimeoutFailure ? 'TimedOut' : 'Failed';
  const what = { Terminated: 'was terminated', TimedOut: 'timed out', Failed: 'failed' }[abnormal];
  const detail = cause instanceof Error && cause.message && cause.message !== abnormal ? ` (${cause.message})` : '';
  return { key, phase: RolloutPhase.RolledBack, abnormal, message: `the rollout's workflow ${what}${detail}` };
}
