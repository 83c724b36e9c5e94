import {
  ActivityFailure, ApplicationFailure, allHandlersFinished, condition, continueAsNew, log, proxyActivities,
  setCurrentDetails, setHandler, upsertSearchAttributes, workflowInfo,
} from '@temporalio/workflow';
import type { Activities } from '../activities/index.ts';
import {
  changedSignal, defaultLoopOptions, stateQuery,
  type ApplicationState, type ApplicationWorkflowInput, type ChangeReason, type ReconcileResult,
} from './messages.ts';
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

/**
 * One long-lived workflow per Application: woken by the watcher's `changed` signal, it reconciles the children
 * and status through activities, finalizes on delete, and continues-as-new before its history grows large.
 */
export async function applicationWorkflow(input: ApplicationWorkflowInput): Promise<string> {
  const opts = { ...defaultLoopOptions, ...input.options };
  const state: ApplicationState = {
    namespace: input.namespace, name: input.name, passes: input.carried?.passes ?? 0,
    ...(input.carried?.lastPhase ? { phase: input.carried.lastPhase } : {}),
    ...(input.carried?.lastGeneration !== undefined ? { generation: input.carried.lastGeneration } : {}),
  };
  // Always reconcile once on start: a new run may follow a missed event or an operator restart.
  let pending = new Set<ChangeReason>(['resync']);
  let progressing = false;

  setHandler(changedSignal, (s) => {
    pending.add(s.reason);
    state.lastReason = s.reason;
  });
  setHandler(stateQuery, () => state);

  // Mirrors the state into the Temporal UI: current details, and the AppPhase search attribute when it changes.
  let publishedPhase = input.carried?.lastPhase;
  const publish = (s: ApplicationState, details: string) => {
    setCurrentDetails(`${s.namespace}/${s.name}: ${details}\n\npasses: ${s.passes}`);
    if (s.phase && s.phase !== publishedPhase) {
      publishedPhase = s.phase;
      upsertSearchAttributes([{ key: appPhaseKey, value: s.phase }]);
    }
  };

  for (;;) {
    if (pending.size === 0) {
      const wait = progressing ? opts.progressRecheckSeconds : opts.resyncSeconds;
      const woken = wait > 0 ? await condition(() => pending.size > 0, wait * 1000) : (await condition(() => pending.size > 0), true);
      if (!woken) pending.add(progressing ? 'child-status' : 'resync');
    }
    const reasons = pending;
    pending = new Set();
    const apply = [...reasons].some((r) => r !== 'child-status');

    let result: ReconcileResult;
    try {
      result = await reconcileApplication({ namespace: input.namespace, name: input.name, workflowId: workflowInfo().workflowId, apply });
    } catch (err) {
      const cause = err instanceof ActivityFailure ? err.cause : undefined;
      if (cause instanceof ApplicationFailure && cause.type && reportedFailures.has(cause.type)) {
        // The activity already wrote the condition; wait for the user to change something.
        state.phase = 'Failed';
        state.message = cause.message;
        progressing = false;
        log.warn('reconcile rejected', { reason: cause.type, message: cause.message });
        publish(state, `**Failed** (${cause.type}): ${cause.message}`);
        continue;
      }
      throw err;
    }
    state.passes++;

    if (result.outcome === 'gone') {
      publish(state, 'Application no longer exists');
      return 'gone';
    }
    if (result.outcome === 'deleting') {
      publish({ ...state, phase: 'Deleting' }, 'Deleting: removing children, then releasing the finalizer');
      const fin = await finalizeApplication({ namespace: input.namespace, name: input.name, uid: result.uid ?? '' });
      log.info('finalized', { removed: fin.removed, finalizerReleased: fin.finalizerReleased });
      // A signal that arrived meanwhile may be about a new Application with the same name: start afresh.
      if (pending.size > 0) {
        await condition(allHandlersFinished);
        return continueAsNew<typeof applicationWorkflow>({ namespace: input.namespace, name: input.name, ...(input.options ? { options: input.options } : {}) });
      }
      return 'deleted';
    }

    progressing = result.progressing ?? false;
    if (result.phase) state.phase = result.phase;
    if (result.generation !== undefined) state.generation = result.generation;
    if (result.message !== undefined) state.message = result.message;
    publish(state, `**${state.phase ?? 'Unknown'}** at generation ${state.generation ?? '?'}: ${state.message ?? ''}`);

    const info = workflowInfo();
    if (info.continueAsNewSuggested || info.historyLength >= opts.maxHistoryEvents) {
      await condition(allHandlersFinished);
      return continueAsNew<typeof applicationWorkflow>({
        namespace: input.namespace, name: input.name,
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
