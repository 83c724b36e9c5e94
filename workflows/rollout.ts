import {
  ActivityFailure, ApplicationFailure, CancellationScope, condition, isCancellation, log, proxyActivities, setCurrentDetails, setHandler,
} from '@temporalio/workflow';
import type { Activities } from '../activities/index.ts';
import {
  abortSignal, abortUpdate, pauseSignal, pauseUpdate, promoteSignal, promoteUpdate, resumeSignal, resumeUpdate, rolloutQuery,
  type CanaryHealth, type ControlRequest, type GateVerdict, type RolloutInput, type RolloutPhase, type RolloutResult, type RolloutState,
} from './messages.ts';
import { describeStep, gateVerdict, isTerminal } from './rollout-logic.ts';

// Short timeouts: a worker killed mid-activity is noticed quickly, and every canary activity is idempotent.
const acts = proxyActivities<Activities>({
  startToCloseTimeout: '20s',
  retry: { initialInterval: '200ms', backoffCoefficient: 2, maximumInterval: '10s', nonRetryableErrorTypes: ['CanaryNotReady', 'ApplicationGone', 'InvalidSpec', 'Superseded'] },
});

/** Thrown inside the rollout to unwind into compensation: an abort, a failed gate or the deadline. */
class Unwind extends Error {
  readonly phase: 'Aborted' | 'RolledBack';
  readonly by: string | undefined;
  constructor(phase: 'Aborted' | 'RolledBack', reason: string, by?: string) {
    super(reason);
    this.phase = phase;
    this.by = by;
  }
}

/**
 * One canary rollout, as a child of the Application's workflow: creates the canary, walks the steps (weights and
 * pauses) while health gates run on durable timers, and promotes, aborts or rolls back. Every step that changes the
 * cluster registers its undo right after it succeeds; an abort, a failed gate or the deadline runs the undos in
 * reverse, shielded from cancellation, each verified by reading the VirtualService back.
 */
export async function canaryRolloutWorkflow(input: RolloutInput): Promise<RolloutResult> {
  const { namespace, name, plan } = input;
  const ref = { namespace, name };
  const startedAt = Date.now();
  let deadline = startedAt + plan.progressDeadlineMs;
  const state: RolloutState = {
    namespace, name, key: plan.key, phase: 'Progressing', step: 0, totalSteps: plan.steps.length, weight: 0,
    message: 'starting', startedAt: new Date(startedAt).toISOString(), pausedByUser: false,
    deadlineAt: new Date(deadline).toISOString(), gates: [], consecutiveFailures: 0,
  };
  let promoteRequest: ControlRequest | undefined;
  let abortRequest: ControlRequest | undefined;
  let resumes = 0;
  let lastGateAt = 0;
  /** The weight the steps ask for; the routed weight (state.weight) drops to 0 while the canary has no ready pod. */
  let targetWeight = 0;
  const compensations: { what: string; undo: () => Promise<unknown> }[] = [];

  // ---- control API: updates (validated, answered) and signals (fire and forget), one behaviour ----
  const snapshot = (): RolloutState => {
    const pauseEnds = state.pauseEndsAt ? Date.parse(state.pauseEndsAt) : undefined;
    return { ...state, gates: [...state.gates], ...(pauseEnds !== undefined ? { pauseRemainingMs: Math.max(0, pauseEnds - Date.now()) } : {}) };
  };
  const finished = () => isTerminal(state.phase);
  const validators = {
    promote: () => {
      if (finished()) throw new Error(`the rollout of ${plan.version} is already ${state.phase}`);
      if (state.phase === 'Promoting' || promoteRequest) throw new Error(`the rollout of ${plan.version} is already being promoted`);
      if (state.phase === 'Aborting' || abortRequest) throw new Error(`the rollout of ${plan.version} is being aborted`);
    },
    abort: () => {
      if (finished()) throw new Error(`the rollout of ${plan.version} is already ${state.phase}`);
      if (state.phase === 'Aborting' || abortRequest) throw new Error(`the rollout of ${plan.version} is already being aborted`);
    },
    pause: () => {
      if (state.phase !== 'Progressing' && state.phase !== 'Paused') throw new Error(`cannot pause a rollout that is ${state.phase}`);
      if (state.pausedByUser) throw new Error('the rollout is already paused');
    },
    resume: () => {
      if (!state.pausedByUser && state.phase !== 'Paused') throw new Error('the rollout is not paused');
    },
  };
  const handlers = {
    promote: (r?: ControlRequest) => { promoteRequest = r ?? {}; log.info('promote requested', { ...r }); return snapshot(); },
    abort: (r?: ControlRequest) => { abortRequest = r ?? {}; log.info('abort requested', { ...r }); return snapshot(); },
    pause: (r?: ControlRequest) => { state.pausedByUser = true; log.info('pause requested', { ...r }); return snapshot(); },
    resume: (r?: ControlRequest) => { state.pausedByUser = false; resumes++; log.info('resume requested', { ...r }); return snapshot(); },
  };
  const asSignal = (kind: keyof typeof handlers) => (r?: ControlRequest) => {
    try {
      validators[kind]();
      handlers[kind](r);
    } catch (err) {
      log.warn(`ignored ${kind} signal: ${(err as Error).message}`);
    }
  };
  setHandler(promoteUpdate, (r: ControlRequest) => handlers.promote(r), { validator: (_r: ControlRequest) => validators.promote() });
  setHandler(abortUpdate, (r: ControlRequest) => handlers.abort(r), { validator: (_r: ControlRequest) => validators.abort() });
  setHandler(pauseUpdate, (r: ControlRequest) => handlers.pause(r), { validator: (_r: ControlRequest) => validators.pause() });
  setHandler(resumeUpdate, (r: ControlRequest) => handlers.resume(r), { validator: (_r: ControlRequest) => validators.resume() });
  setHandler(promoteSignal, asSignal('promote'));
  setHandler(abortSignal, asSignal('abort'));
  setHandler(pauseSignal, asSignal('pause'));
  setHandler(resumeSignal, asSignal('resume'));
  setHandler(rolloutQuery, snapshot);

  // ---- status everywhere: CR status + Event (activity), the UI's current details, the history (logs) ----
  const publish = async (phase: RolloutPhase, message: string, event?: { reason: string; type?: 'Normal' | 'Warning' }) => {
    state.phase = phase;
    state.message = message;
    log.info(`${phase}: ${message}`, { step: state.step, weight: state.weight });
    setCurrentDetails([
      `**Canary ${plan.version}** (${plan.image}) — ${phase}`,
      `step ${Math.min(state.step + 1, state.totalSteps)}/${state.totalSteps}, canary weight ${state.weight}%`,
      message,
      state.pauseEndsAt ? `pause ends at ${state.pauseEndsAt}` : '',
      `deadline ${state.deadlineAt}`,
      state.gates.length ? `last gate: ${state.gates[state.gates.length - 1]!.reason}` : '',
    ].filter(Boolean).join('\n\n'));
    await acts.writeCanaryStatus({
      ...ref,
      status: {
        phase, step: state.step, totalSteps: state.totalSteps, weight: state.weight, message, version: plan.version, image: plan.image,
        startedAt: state.startedAt,
        ...(state.pauseEndsAt ? { pauseEndsAt: state.pauseEndsAt } : {}),
        ...(state.abortedBy ? { abortedBy: state.abortedBy } : {}),
        ...(state.reason ? { reason: state.reason } : {}),
      },
      ...(event ? { event: { reason: event.reason, message: `canary ${plan.version}: ${message}`, type: event.type ?? 'Normal' } } : {}),
    });
  };

  const route = async (weight: number) => {
    await acts.setCanaryWeight({ ...ref, weight, version: plan.version });
    state.weight = weight;
  };

  /** One health gate check; throws Unwind when failures reach the threshold. Keeps traffic off a canary with no ready pod. */
  const checkGate = async () => {
    lastGateAt = Date.now();
    const health: CanaryHealth = await acts.canaryHealth({ ...ref, version: plan.version });
    const verdict = gateVerdict(health, plan.gates);
    const record: GateVerdict = { at: new Date(lastGateAt).toISOString(), ok: verdict.ok, readyReplicas: health.readyReplicas, restarts: health.restarts, reason: verdict.reason };
    state.gates = [...state.gates.slice(-9), record];
    if (health.readyReplicas === 0 && state.weight > 0) {
      // Never leave traffic on a canary with no ready replica, even for one interval.
      await route(0);
      log.warn('canary has no ready replica: traffic moved back to stable', { target: targetWeight });
    }
    if (verdict.ok) {
      state.consecutiveFailures = 0;
      if (state.weight !== targetWeight && health.readyReplicas > 0) await route(targetWeight);
      return;
    }
    state.consecutiveFailures++;
    log.warn(`health gate failed (${state.consecutiveFailures}/${plan.gates.failureThreshold}): ${verdict.reason}`);
    if (state.consecutiveFailures >= plan.gates.failureThreshold) {
      throw new Unwind('RolledBack', `health gate failed ${state.consecutiveFailures} times in a row: ${verdict.reason}`);
    }
  };

  /**
   * Waits until `done()` or `untilMs`, running health gates every interval and honouring abort, promote and pause.
   * Time spent in a pause does not count against the progress deadline.
   */
  const watch = async (opts: { untilMs?: number | null; pause?: boolean; done?: () => boolean }) => {
    for (;;) {
      if (abortRequest) throw new Unwind('Aborted', abortRequest.reason ?? 'aborted', abortRequest.by ?? 'unknown');
      if (opts.done?.()) return;
      const now = Date.now();
      if (opts.untilMs != null && now >= opts.untilMs) return;
      const pausing = opts.pause === true || state.pausedByUser;
      if (!pausing && now >= deadline) {
        throw new Unwind('RolledBack', `progress deadline of ${Math.round(plan.progressDeadlineMs / 1000)} s exceeded (${state.message})`);
      }
      const nextGate = lastGateAt + plan.gates.intervalMs;
      const wakeAt = Math.min(nextGate, opts.untilMs ?? Infinity, pausing ? Infinity : deadline);
      const seen = { resumes, paused: state.pausedByUser, promote: promoteRequest };
      const before = Date.now();
      await condition(() => Boolean(abortRequest) || resumes !== seen.resumes || state.pausedByUser !== seen.paused || promoteRequest !== seen.promote || Boolean(opts.done?.()), Math.max(1, wakeAt - now));
      if (pausing) {
        deadline += Date.now() - before;
        state.deadlineAt = new Date(deadline).toISOString();
      }
      if (Date.now() >= lastGateAt + plan.gates.intervalMs) await checkGate();
    }
  };

  try {
    await publish('Progressing', `creating canary ${plan.version} (${plan.image})`, { reason: 'CanaryStarted' });
    await acts.prepareCanary({ ...ref, plan });
    compensations.push({ what: 'remove the canary (100% stable, subset and Deployment removed)', undo: () => acts.removeCanary(ref) });
    await checkGate();

    for (let i = 0; i < plan.steps.length; i++) {
      state.step = i;
      const step = plan.steps[i]!;
      if (promoteRequest) break;
      if (abortRequest) throw new Unwind('Aborted', abortRequest.reason ?? 'aborted', abortRequest.by ?? 'unknown');
      if (step.kind === 'weight') {
        targetWeight = step.weight;
        if (targetWeight > 0) {
          await publish('Progressing', `${describeStep(step, i, plan.steps.length)}: waiting for ${plan.gates.minReadyReplicas} ready canary replica(s)`);
          await watch({ done: () => state.consecutiveFailures === 0 && state.gates.at(-1)?.ok === true });
          await route(targetWeight);
        } else if (state.weight !== 0) {
          await route(0);
        }
        await publish('Progressing', describeStep(step, i, plan.steps.length), { reason: 'CanaryStepCompleted' });
      } else {
        const resumesAtStart = resumes;
        state.pauseEndsAt = step.ms === null ? undefined : new Date(Date.now() + step.ms).toISOString();
        await publish('Paused', describeStep(step, i, plan.steps.length), { reason: 'CanaryPaused' });
        await watch({ pause: true, untilMs: step.ms === null ? null : Date.now() + step.ms, done: () => Boolean(promoteRequest) || resumes !== resumesAtStart });
        state.pauseEndsAt = undefined;
        if (!promoteRequest) await publish('Progressing', `${describeStep(step, i, plan.steps.length)}: done`, { reason: 'CanaryResumed' });
      }
      // A user pause holds the rollout between steps until resumed (gates keep running).
      if (state.pausedByUser) {
        await publish('Paused', `paused by request at ${describeStep(plan.steps[i + 1], i + 1, plan.steps.length)}`, { reason: 'CanaryPaused' });
        await watch({ pause: true, done: () => !state.pausedByUser || Boolean(promoteRequest) });
      }
    }
    state.step = plan.steps.length;

    // ---- promote: stable takes the canary's image and is available before traffic moves ----
    const by = promoteRequest?.by ? ` by ${promoteRequest.by}` : '';
    await publish('Promoting', `promoting${by}: stable Deployment takes ${plan.image}`, { reason: 'CanaryPromoting' });
    await acts.promoteStable({ ...ref, plan });
    compensations.push({ what: `restore the stable image ${plan.stableImage}`, undo: () => acts.restoreStableImage({ ...ref, plan }) });
    // Poll the stable rollout between gate checks (abort still honoured).
    let stableDone = false;
    while (!stableDone) {
      const s = await acts.stableRolledOut({ ...ref, image: plan.image });
      stableDone = s.done;
      if (!stableDone) {
        state.message = s.message;
        await watch({ untilMs: Date.now() + Math.min(plan.gates.intervalMs, 2000) });
      }
    }
    await route(0);
    await acts.removeCanary(ref);
    await acts.finishCanarySpec({ ...ref, plan });
    compensations.length = 0;
    await publish('Promoted', `stable runs ${plan.image}; all traffic on stable, canary removed${by}`, { reason: 'CanaryPromoted' });
    return { key: plan.key, phase: 'Promoted', message: state.message };
  } catch (err) {
    const unwind = err instanceof Unwind ? err : undefined;
    const cancelled = isCancellation(err);
    const reason = unwind?.message ?? (cancelled ? 'the rollout was cancelled' : describeFailure(err));
    const phase: RolloutPhase = unwind?.phase ?? 'RolledBack';
    if (unwind?.by) state.abortedBy = unwind.by;
    state.reason = reason;
    state.pauseEndsAt = undefined;
    await CancellationScope.nonCancellable(async () => {
      await publish('Aborting', `${phase === 'Aborted' ? 'aborting' : 'rolling back'}: ${reason}`, { reason: phase === 'Aborted' ? 'CanaryAborting' : 'CanaryRollingBack', type: 'Warning' });
      for (const c of compensations.reverse()) {
        log.info(`compensation: ${c.what}`);
        await c.undo();
      }
      state.weight = 0;
      await publish(phase, `${phase === 'Aborted' ? `aborted${state.abortedBy ? ` by ${state.abortedBy}` : ''}` : 'rolled back'}: ${reason}; all traffic on stable, canary removed`, {
        reason: phase === 'Aborted' ? 'CanaryAborted' : 'CanaryRolledBack', type: 'Warning',
      });
    });
    if (cancelled) throw err;
    return { key: plan.key, phase, message: state.message };
  }
}

function describeFailure(err: unknown): string {
  if (err instanceof ActivityFailure && err.cause instanceof ApplicationFailure) return `${err.cause.type ?? 'error'}: ${err.cause.message}`;
  if (err instanceof ActivityFailure && err.cause) return err.cause.message;
  return err instanceof Error ? err.message : String(err);
}
