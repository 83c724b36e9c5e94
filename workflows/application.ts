import {
  ActivityFailure, ApplicationFailure, ParentClosePolicy, allHandlersFinished, condition, continueAsNew, log, proxyActivities,
  setCurrentDetails, setHandler, startChild, upsertSearchAttributes, workflowInfo, type ChildWorkflowHandle,
} from '@temporalio/workflow';
import type { Activities } from '../activities/index.ts';
import {
  abortSignal, changedSignal, defaultLoopOptions, pauseSignal, promoteSignal, resumeSignal, rolloutWorkflowId, stateQuery,
  type ApplicationState, type ApplicationWorkflowInput, type ChangeReason, type ControlRequest, type ReconcileResult, type RolloutPlan, type RolloutResult,
} from './messages.ts';
import { canaryRolloutWorkflow } from './rollout.ts';
import { isTerminal } from './rollout-logic.ts';
import { appPhaseKey } from './search-attributes.ts';

// SPEC §5: back off from 100 ms to 1 min on API errors; a spec the API server rejects fails at once instead.
// Activities heartbeat between API calls, so a worker killed mid-pass is noticed in seconds rather than minutes.
const { reconcileApplication, finalizeApplication } = proxyActivities<Activities>({
  startToCloseTimeout: '2m',
  heartbeatTimeout: '10s',
  retry: { initialInterval: '100ms', backoffCoefficient: 2, maximumInterval: '1m', nonRetryableErrorTypes: ['InvalidSpec', 'ApplyRejected'] },
});

/** Failure types the reconcile activity raises after writing a status condition that explains them. */
const reportedFailures = new Set(['InvalidSpec', 'ApplyRejected']);

interface Rollout {
  key: string;
  handle: ChildWorkflowHandle<typeof canaryRolloutWorkflow>;
  result?: RolloutResult;
  /** Set once an abort was sent, so it is sent once. */
  aborting?: boolean;
}

/**
 * One long-lived workflow per Application: woken by the watcher's `changed` signal, it reconciles the children and
 * status through activities, runs each canary rollout as a child workflow, finalizes on delete, and
 * continues-as-new before its history grows large.
 */
export async function applicationWorkflow(input: ApplicationWorkflowInput): Promise<string> {
  const opts = { ...defaultLoopOptions, ...input.options };
  const { namespace, name } = input;
  const state: ApplicationState = {
    namespace, name, passes: input.carried?.passes ?? 0,
    ...(input.carried?.lastPhase ? { phase: input.carried.lastPhase } : {}),
    ...(input.carried?.lastGeneration !== undefined ? { generation: input.carried.lastGeneration } : {}),
  };
  // Always reconcile once on start: a new run may follow a missed event or an operator restart.
  let pending = new Set<ChangeReason>(['resync']);
  let progressing = false;
  let rollout: Rollout | undefined;
  /** Key of the last rollout this run finished: never restarted by itself (an aborted canary stays aborted). */
  let lastRolloutKey: string | undefined;

  setHandler(changedSignal, (s) => {
    pending.add(s.reason);
    state.lastReason = s.reason;
  });
  setHandler(stateQuery, () => ({ ...state, ...(rollout && !rollout.result ? { rollout: rollout.key } : {}) }));
  // Control signals sent to the Application's workflow reach the running rollout, so one id works for everything.
  const forward = (signal: typeof promoteSignal) => (r?: ControlRequest) => {
    if (!rollout || rollout.result) {
      log.warn(`ignored ${signal.name} signal: no canary rollout is running for ${namespace}/${name}`);
      return;
    }
    void rollout.handle.signal(signal, r ?? {}).catch((err: unknown) => log.warn(`could not forward ${signal.name}`, { err: String(err) }));
  };
  setHandler(promoteSignal, forward(promoteSignal));
  setHandler(abortSignal, forward(abortSignal));
  setHandler(pauseSignal, forward(pauseSignal));
  setHandler(resumeSignal, forward(resumeSignal));

  // Mirrors the state into the Temporal UI: current details, and the AppPhase search attribute when it changes.
  let publishedPhase = input.carried?.lastPhase;
  const publish = (details: string) => {
    const r = rollout && !rollout.result ? `\n\ncanary rollout running: ${rollout.key}` : '';
    setCurrentDetails(`${namespace}/${name}: ${details}${r}\n\npasses: ${state.passes}`);
    if (state.phase && state.phase !== publishedPhase) {
      publishedPhase = state.phase;
      upsertSearchAttributes([{ key: appPhaseKey, value: state.phase }]);
    }
  };

  const startRollout = async (plan: RolloutPlan) => {
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
      progressing = true;
      return;
    }
    const r: Rollout = { key: plan.key, handle };
    rollout = r;
    lastRolloutKey = plan.key;
    log.info('canary rollout started', { key: plan.key });
    void handle.result().then(
      (res) => { r.result = res; },
      (err: unknown) => { r.result = { key: plan.key, phase: 'Failed', message: String(err) }; },
    );
  };

  const abortRollout = async (reason: string, by: string) => {
    if (!rollout || rollout.result || rollout.aborting) return;
    rollout.aborting = true;
    try {
      await rollout.handle.signal(abortSignal, { by, reason });
    } catch (err) {
      // The rollout ended meanwhile (a promote switches the spec's canary off as its last step): nothing to abort.
      log.info('rollout already finished; abort not needed', { key: rollout.key, err: String(err) });
    }
  };

  /** Starts, supersedes or stops rollouts to match what the spec asks for. */
  const steerRollout = async (result: ReconcileResult) => {
    const plan = result.canary;
    const running = rollout && !rollout.result ? rollout : undefined;
    if (running) {
      if (!plan) await abortRollout('the canary was disabled in the spec', 'spec');
      else if (plan.key !== running.key) await abortRollout(`superseded by canary ${plan.version} (${plan.image})`, 'spec');
      return;
    }
    if (!plan) {
      lastRolloutKey = undefined;
      return;
    }
    const finishedBefore = plan.key === lastRolloutKey
      || (lastRolloutKey === undefined && result.lastRollout?.key === plan.key && isTerminal(result.lastRollout.phase));
    if (finishedBefore) {
      lastRolloutKey = plan.key;
      return;
    }
    await startRollout(plan);
  };

  const rolloutFinished = () => Boolean(rollout?.result) && rollout !== undefined;

  for (;;) {
    if (pending.size === 0) {
      const wait = progressing ? opts.progressRecheckSeconds : opts.resyncSeconds;
      const woken = wait > 0
        ? await condition(() => pending.size > 0 || rolloutFinished(), wait * 1000)
        : (await condition(() => pending.size > 0 || rolloutFinished()), true);
      if (!woken) pending.add(progressing ? 'child-status' : 'resync');
    }
    if (rolloutFinished()) {
      const r = rollout!.result!;
      log.info('canary rollout finished', { key: r.key, phase: r.phase, message: r.message });
      rollout = undefined;
      // Back to the steady state: stable routes only, no canary Deployment.
      pending.add('resync');
    }
    const reasons = pending;
    pending = new Set();
    const apply = [...reasons].some((r) => r !== 'child-status');

    let result: ReconcileResult;
    try {
      result = await reconcileApplication({ namespace, name, workflowId: workflowInfo().workflowId, apply, rolloutActive: rollout !== undefined });
    } catch (err) {
      const cause = err instanceof ActivityFailure ? err.cause : undefined;
      if (cause instanceof ApplicationFailure && cause.type && reportedFailures.has(cause.type)) {
        // The activity already wrote the condition; wait for the user to change something.
        state.phase = 'Failed';
        state.message = cause.message;
        progressing = false;
        log.warn('reconcile rejected', { reason: cause.type, message: cause.message });
        publish(`**Failed** (${cause.type}): ${cause.message}`);
        continue;
      }
      throw err;
    }
    state.passes++;

    if (result.outcome === 'gone' || result.outcome === 'deleting') {
      if (rollout && !rollout.result) {
        await abortRollout('the Application is being deleted', 'operator');
        await condition(() => Boolean(rollout?.result));
      }
      if (result.outcome === 'gone') {
        publish('Application no longer exists');
        return 'gone';
      }
      state.phase = 'Deleting';
      publish('Deleting: removing children, then releasing the finalizer');
      const fin = await finalizeApplication({ namespace, name, uid: result.uid ?? '' });
      log.info('finalized', { removed: fin.removed, finalizerReleased: fin.finalizerReleased });
      // A signal that arrived meanwhile may be about a new Application with the same name: start afresh.
      if (pending.size > 0) {
        await condition(allHandlersFinished);
        return continueAsNew<typeof applicationWorkflow>({ namespace, name, ...(input.options ? { options: input.options } : {}) });
      }
      return 'deleted';
    }

    progressing = result.progressing ?? false;
    if (result.phase) state.phase = result.phase;
    if (result.generation !== undefined) state.generation = result.generation;
    if (result.message !== undefined) state.message = result.message;
    await steerRollout(result);
    publish(`**${state.phase ?? 'Unknown'}** at generation ${state.generation ?? '?'}: ${state.message ?? ''}`);

    // A running rollout is a child of this run, so the run goes on until the rollout ends.
    const info = workflowInfo();
    if (!rollout && (info.continueAsNewSuggested || info.historyLength >= opts.maxHistoryEvents)) {
      await condition(allHandlersFinished);
      return continueAsNew<typeof applicationWorkflow>({
        namespace, name,
        ...(input.options ? { options: input.options } : {}),
        carried: {
          passes: state.passes,
          ...(state.phase ? { lastPhase: state.phase } : {}),
          ...(state.generation !== undefined ? { lastGeneration: state.generation } : {}),
          ...(result.uid ? { uid: result.uid } : {}),
        },
      });
    }
  }
}
