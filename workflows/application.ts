import {
  ActivityFailure, ApplicationFailure, ParentClosePolicy, allHandlersFinished, condition, continueAsNew, log, patched, proxyActivities,
  proxyLocalActivities, setCurrentDetails, setHandler, startChild, upsertSearchAttributes, workflowInfo, type ChildWorkflowHandle,
} from '@temporalio/workflow';
import { FailureType, canaryName, isTerminal } from '../api/constants.ts';
import type { Activities } from '../activities/index.ts';
import type { ReconcileInput, ReconcileResult } from '../activities/types.ts';
import {
  changedSignal, controlActions, controlSignals, defaultLoopOptions, recheckSignal, rolloutWorkflowId, stateQuery,
  type ApplicationState, type ApplicationWorkflowInput, type ChangeReason, type ControlAction, type ControlRequest, type LoopOptions, type RolloutResult,
} from './contract.ts';
import type { RolloutPlan } from './rollout/plan.ts';
import { canaryRolloutWorkflow } from './rollout/workflow.ts';
import { appPhaseKey } from './search-attributes.ts';
import { duration, run, waitFor } from './summary.ts';

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
const forwardStablePatch = 'recheck-rollout-on-stable-status';

/** Failure types the reconcile activity raises after writing a status condition that explains them. */
const reportedFailures: ReadonlySet<string> = new Set([FailureType.InvalidSpec, FailureType.ApplyRejected]);

/** The failure a reconcile pass reported in status (and that no retry can fix), if that is what `err` is. */
function reportedFailure(err: unknown): ApplicationFailure | undefined {
  // An activity's failure comes wrapped in an ActivityFailure; a local activity's as it was thrown.
  const cause = err instanceof ActivityFailure ? err.cause : err;
  return cause instanceof ApplicationFailure && cause.type && reportedFailures.has(cause.type) ? cause : undefined;
}

/** One pass: as a local activity, then as an activity if that failed for any reason but one reported in status. */
async function reconcilePass(summary: string, input: ReconcileInput): Promise<ReconcileResult> {
  if (!patched(localPassesPatch)) return run(reconcileApplication, summary, input);
  try {
    return await run(local.reconcileApplication, summary, input);
  } catch (err) {
    if (reportedFailure(err)) throw err;
    log.warn('reconcile pass failed as a local activity; running it as an activity', { err: String(err) });
    return run(reconcileApplication, summary, input);
  }
}

interface RunningRollout {
  key: string;
  handle: ChildWorkflowHandle<typeof canaryRolloutWorkflow>;
  result?: RolloutResult;
  /** Set once an abort was sent, so it is sent once. */
  aborting?: boolean;
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
  private publishedPhase: string | undefined;
  /** Why the current pass runs and which children changed, for its activity's summary. */
  private reasons: ChangeReason[] = [];
  private objects: string[] = [];
  private readonly pendingObjects = new Set<string>();

  constructor(input: ApplicationWorkflowInput) {
    this.input = input;
    this.opts = { ...defaultLoopOptions, ...input.options };
    const c = input.carried;
    this.state = {
      namespace: input.namespace, name: input.name, passes: c?.passes ?? 0,
      ...(c?.lastPhase ? { phase: c.lastPhase } : {}),
      ...(c?.lastGeneration !== undefined ? { generation: c.lastGeneration } : {}),
    };
    this.publishedPhase = c?.lastPhase;
  }

  changed(reason: ChangeReason, object?: string): void {
    this.pending.add(reason);
    if (object) this.pendingObjects.add(object);
    this.state.lastReason = reason;
    // A running rollout looks at once when one of its children changed: a hand edit of its routes, its Deployment
    // deleted, its pods becoming ready or not. It puts back what was taken and moves traffic off an empty canary.
    // The stable Deployment's status too, which a promotion waits on (histories from before this did not forward it).
    const running = this.running;
    const canary = `Deployment/${canaryName({ metadata: { name: this.state.name } })}`;
    const stable = `Deployment/${this.state.name}`;
    if (running && (reason === 'child' || (reason === 'child-status' && (object === canary || (object === stable && patched(forwardStablePatch)))))) {
      void running.handle.signal(recheckSignal, { ...(object ? { object } : {}) }).catch((err: unknown) => log.warn('could not ask the rollout to recheck', { err: String(err) }));
    }
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
    void running.handle.signal(controlSignals[action], request).catch((err: unknown) => log.warn(`could not forward ${action}`, { err: String(err) }));
  }

  /** Waits for a reason to reconcile (an event, a finished rollout, or a timer); returns whether children are re-applied. */
  async nextPass(): Promise<boolean> {
    if (this.pending.size === 0) {
      const wait = this.progressing ? this.opts.progressRecheckSeconds : this.opts.resyncSeconds;
      const woken = () => this.pending.size > 0 || this.rolloutFinished;
      const why = this.progressing ? 'the Deployment is rolling out: look again' : 'resync';
      const timedOut = wait > 0 ? !(await waitFor(woken, wait * 1000, `${why} in ${duration(wait * 1000)}`)) : (await condition(woken), false);
      if (timedOut) this.pending.add(this.progressing ? 'child-status' : 'resync');
    }
    if (this.rolloutFinished) {
      const r = this.rollout!.result!;
      log.info('canary rollout finished', { key: r.key, phase: r.phase, message: r.message });
      this.rollout = undefined;
      // Back to the steady state: stable routes only, no canary Deployment.
      this.pending.add('resync');
    }
    const reasons = this.pending;
    this.pending = new Set();
    this.reasons = [...reasons];
    this.objects = [...this.pendingObjects];
    this.pendingObjects.clear();
    return this.reasons.some((r) => r !== 'child-status');
  }

  /** One reconcile pass; null when the activity reported a failure in status (then wait for the user to change something). */
  async reconcile(apply: boolean): Promise<ReconcileResult | null> {
    const { namespace, name } = this.state;
    try {
      const why = [...this.reasons.map((r) => reasonWords[r]), ...this.objects].join(', ');
      const summary = `${apply ? 'apply children' : 'read status'} (${why})`;
      const result = await reconcilePass(summary, { namespace, name, workflowId: workflowInfo().workflowId, apply, rolloutActive: this.rollout !== undefined });
      this.state.passes++;
      if (result.outcome === 'reconciled') {
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
      log.warn('reconcile rejected', { reason: cause.type, message: cause.message });
      this.publish(`**Failed** (${cause.type}): ${cause.message}`);
      return null;
    }
  }

  /** Starts, supersedes or stops rollouts to match what the spec asks for. */
  async steerRollout(result: ReconcileResult): Promise<void> {
    const plan = result.canary;
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

  /** The Application is going: abort a running rollout and wait for its compensation. */
  async stopRollout(): Promise<void> {
    if (!this.running) return;
    await this.abortRollout('the Application is being deleted', 'operator');
    await condition(() => this.rolloutFinished);
  }

  /** Removes the children and releases the finalizer; true when a signal meanwhile may be about a new Application of the same name. */
  async finalize(uid: string): Promise<boolean> {
    this.state.phase = 'Deleting';
    this.publish('Deleting: removing children, then releasing the finalizer');
    const fin = await run(finalizeApplication, 'remove the children and release the finalizer', { namespace: this.state.namespace, name: this.state.name, uid });
    log.info('finalized', { removed: fin.removed, finalizerReleased: fin.finalizerReleased });
    return this.pending.size > 0;
  }

  /** A running rollout is a child of this run, so the run goes on until the rollout ends. */
  get shouldContinueAsNew(): boolean {
    const info = workflowInfo();
    return !this.rollout && (info.continueAsNewSuggested || info.historyLength >= this.opts.maxHistoryEvents);
  }

  /** The input of the next run: carried state, or a fresh start for a new Application of the same name. */
  nextRun(carry: boolean): ApplicationWorkflowInput {
    const { namespace, name, passes, phase, generation } = this.state;
    return {
      namespace, name,
      ...(this.input.options ? { options: this.input.options } : {}),
      ...(carry ? { carried: { passes, ...(phase ? { lastPhase: phase } : {}), ...(generation !== undefined ? { lastGeneration: generation } : {}) } } : {}),
    };
  }

  /** Mirrors the state into the Temporal UI: current details, and the AppPhase search attribute when it changes. */
  publish(details: string): void {
    const { namespace, name, passes, phase } = this.state;
    const r = this.running ? `\n\ncanary rollout running: ${this.running.key}` : '';
    setCurrentDetails(`${namespace}/${name}: ${details}${r}\n\npasses: ${passes}`);
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

  private async startRollout(plan: RolloutPlan): Promise<void> {
    const { namespace, name } = this.state;
    let handle: ChildWorkflowHandle<typeof canaryRolloutWorkflow>;
    try {
      handle = await startChild(canaryRolloutWorkflow, {
        workflowId: rolloutWorkflowId(namespace, name),
        args: [{ namespace, name, plan }],
        // An Application workflow that ends (deleted app) takes its rollout with it; the rollout compensates first.
        parentClosePolicy: ParentClosePolicy.REQUEST_CANCEL,
        staticSummary: `Canary ${plan.version} of ${namespace}/${name}`,
        staticDetails: `image ${plan.image}; ${plan.steps.length} steps; promote, abort, pause, resume as updates or signals`,
      });
    } catch (err) {
      // E.g. an earlier rollout of this app is still compensating after its parent was terminated: try again later.
      log.warn('could not start the canary rollout; will retry', { key: plan.key, err: String(err) });
      this.progressing = true;
      return;
    }
    const r: RunningRollout = { key: plan.key, handle };
    this.rollout = r;
    this.lastRolloutKey = plan.key;
    log.info('canary rollout started', { key: plan.key });
    void handle.result().then(
      (res) => { r.result = res; },
      (err: unknown) => { r.result = { key: plan.key, phase: 'Failed', message: String(err) }; },
    );
  }

  private async abortRollout(reason: string, by: string): Promise<void> {
    const running = this.running;
    if (!running || running.aborting) return;
    running.aborting = true;
    try {
      await running.handle.signal(controlSignals.abort, { by, reason });
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
  setHandler(changedSignal, (s) => app.changed(s.reason, s.object));
  setHandler(stateQuery, () => app.query());
  for (const action of controlActions) setHandler(controlSignals[action], (r) => app.forward(action, r));

  for (;;) {
    const apply = await app.nextPass();
    const result = await app.reconcile(apply);
    if (!result) continue;

    if (result.outcome !== 'reconciled') {
      await app.stopRollout();
      if (result.outcome === 'gone') {
        app.publish('Application no longer exists');
        return 'gone';
      }
      if (await app.finalize(result.uid ?? '')) {
        await condition(allHandlersFinished);
        return continueAsNew<typeof applicationWorkflow>(app.nextRun(false));
      }
      return 'deleted';
    }

    await app.steerRollout(result);
    app.publish(`**${app.state.phase ?? 'Unknown'}** at generation ${app.state.generation ?? '?'}: ${app.state.message ?? ''}`);
    if (app.shouldContinueAsNew) {
      await condition(allHandlersFinished);
      return continueAsNew<typeof applicationWorkflow>(app.nextRun(true));
    }
  }
}
