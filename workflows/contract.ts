// The contract between the workflows and their clients (the watcher, the CLI, tests, any Temporal client): workflow
// ids and types, inputs and results, signals, updates and queries. Activity inputs and outputs are in
// activities/types.ts; the rollout's plan is in rollout/plan.ts.
import { defineQuery, defineSignal, defineUpdate } from '@temporalio/workflow';
import type { RolloutPhase, StrategyName } from '../api/constants.ts';
import { defaultMaxHistoryEvents } from './kit/rollover.ts';
import type { AnalysisVerdict, CheckVerdict, RecoveredRollout } from '../activities/types.ts';
import type { CanaryRoute } from '../routing/route.ts';
import type { MetricTally } from './rollout/analysis.ts';
import type { Interruption } from './rollout/decide.ts';
import type { RolloutPlan } from '../reconcile/plan.ts';
import type { ReleasePlan } from '../reconcile/wave-plan.ts';
import type { NotificationInput } from './notify.ts';

// ---- the Application workflow ----

/** The Application workflow's type name, for clients that start it without importing workflow code. */
export const applicationWorkflowType = 'applicationWorkflow';

/** One workflow per Application. */
export function applicationWorkflowId(namespace: string, name: string): string {
  return `application/${namespace}/${name}`;
}

/** Why the watcher woke the workflow. `child-status` alone never re-applies children; it only refreshes status. */
export type ChangeReason = 'spec' | 'child' | 'child-status' | 'deleted' | 'resync';

export interface ChangeSignal {
  reason: ChangeReason;
  /** Kind/name of the child that changed, for the history. */
  object?: string;
  /** Kind/name of every child edited or deleted in the burst this signal stands for (its reason is the strongest one). */
  drifted?: string[];
  /**
   * With a deletion: the Application's namespace is being deleted, so the namespace controller deletes its children
   * and the finalizer has only to be released.
   */
  namespaceGoing?: boolean;
}

/** Durations of the reconcile loop; inputs so tests can use seconds. */
export interface LoopOptions {
  /** Re-check a rollout that has not finished this often even without events (Updating: 30 s). */
  progressRecheckSeconds: number;
  /** A converged app is re-applied this often as a safety net besides events (0 = never). */
  resyncSeconds: number;
  /**
   * A child the API server refused (admission denied it, a quota, a missing CRD) is applied again after this long,
   * doubling to ten times as long, in case the policy changed; a change of the Application tries at once.
   */
  refusedRetrySeconds: number;
  /** Continue-as-new once the history reaches this many events (or when the server suggests it). */
  maxHistoryEvents: number;
}

export const defaultLoopOptions: Readonly<LoopOptions> = { progressRecheckSeconds: 30, resyncSeconds: 0, refusedRetrySeconds: 30, maxHistoryEvents: defaultMaxHistoryEvents };

export interface ApplicationWorkflowInput {
  namespace: string;
  name: string;
  options?: Partial<LoopOptions>;
  /** State carried across continue-as-new. */
  carried?: CarriedState;
  /**
   * The patches this run takes as given without recording them (workflows/application.ts `settledPatches`): set by
   * the watcher on every start and by every continue-as-new since; absent in runs started before.
   */
  patchLevel?: number;
  /**
   * The change that started this workflow, when the watcher started it with a plain start (a new Application, so
   * that Temporal can hand the first workflow task to this process's worker in the start's answer) rather than a
   * signal-with-start: taken as if signalled first thing. Never carried across continue-as-new.
   */
  change?: ChangeSignal;
}

/** The patch level the watcher starts Application workflows at (workflows/application.ts `settledPatches`). */
export const applicationPatchLevel = 1;

export interface CarriedState {
  passes: number;
  lastPhase?: string;
  lastGeneration?: number;
  /** The rollout running when the run continued as new: the next run follows it by its signals. */
  rollout?: FollowedRollout;
  /** The last rollout this workflow finished: never restarted by itself. */
  lastRolloutKey?: string;
}

/** A rollout the Application's workflow follows, as carried from one run to the next. */
export interface FollowedRollout {
  key: string;
  version: string;
  /** Workflow time when this workflow started (or adopted) it: reports of rollout runs closed before are stale. */
  since: number;
  /** An abort was sent. */
  aborting?: boolean;
}

/** What the workflow knows, for `temporal workflow query --name state` and the CLI. */
export interface ApplicationState {
  namespace: string;
  name: string;
  passes: number;
  phase?: string;
  generation?: number;
  message?: string;
  lastReason?: ChangeReason;
  /** The key of the rollout running now, if any. */
  rollout?: string;
}

export const changedSignal = defineSignal<[ChangeSignal]>('changed');

/**
 * A rollout ended: sent by the rollout to its Application's workflow as its last act, and by the operator's sweep
 * when a rollout's workflow closed without getting to say so (terminated, timed out, failed).
 */
export interface RolloutEnded {
  /** The rollout's key; absent when the sweep could not tell it (then `closedAt` decides whether it is news). */
  key?: string;
  phase: RolloutPhase;
  message: string;
  /** How the workflow closed when it did not end by itself: Terminated, TimedOut, Failed, Canceled. */
  abnormal?: string;
  closedAt?: string;
}

export const rolloutEndedSignal = defineSignal<[RolloutEnded]>('rolloutEnded');
export const stateQuery = defineQuery<ApplicationState>('state');

// ---- the canary rollout workflow ----

/** The rollout workflow's type name of each strategy (workflows/strategies.ts maps them to the functions). */
export const rolloutWorkflowTypes = { canary: 'canaryRolloutWorkflow', blueGreen: 'blueGreenRolloutWorkflow' } as const satisfies Record<StrategyName, string>;
/** The canary's, the first strategy's. */
export const rolloutWorkflowType = rolloutWorkflowTypes.canary;

/** The workflow id of an Application's rollout (one run per rollout). */
export function rolloutWorkflowId(namespace: string, name: string): string {
  return `application/${namespace}/${name}/canary`;
}

export interface RolloutInput {
  namespace: string;
  name: string;
  plan: RolloutPlan;
  /** Continue-as-new once the history reaches this many events, or sooner when the server suggests it (default 2000). */
  maxHistoryEvents?: number;
  /** The waits between tries of a step that keeps failing (default 2 s doubling to 60 s; tests shorten them). */
  retryDelay?: { firstMs: number; maxMs: number };
  /** The whole state of the rollout, carried across continue-as-new. */
  carried?: RolloutCarry;
  /** A rollout in flight whose workflow Temporal lost: where the Application's status says it was. */
  recovered?: RecoveredRollout;
  /**
   * The level asked for (`rolloutPatchLevel`): set by the Application's workflow on every rollout it starts, carried
   * across continue-as-new; absent in rollouts started before, which keep the commands their history recorded.
   */
  patchLevel?: number;
}

/**
 * The level the Application's workflow starts rollouts at. A rollout takes a level only when its input asks for it
 * (a rollout started before a change keeps the old way to its end) and its first workflow task records it with
 * one `patched()` marker, at a fixed place: a worker of an older release that runs the rollout live during a rolling
 * upgrade records none, and every replay of that history then takes the old way too. 1: a step whose gate already
 * passes moves traffic without writing "waiting for ready canary replicas" first; a clean gate check writes the
 * steady message again only when status last said something else (a promote waiting for the stable Deployment
 * rewrote its Promoting status at every gate check). 2: a gate check that finds the canary Deployment resized or
 * running another image than the rollout's (`kubectl scale`, `kubectl set image`) puts it back, as it does a
 * deleted one, instead of judging it as it runs; one running another image gets no traffic meanwhile. 3: a weight
 * step of a canary by pod counts (`traffic.router: replicas`) ends once the canary's pods are all ready, so the pause
 * after it bakes at the share it names (before, it ended once they were asked for). 4: an abort that comes once a
 * promote has seen the stable Deployment run the new image is refused, saying it is too late (before, it was
 * accepted, said Aborting, and the promote went on); a person's pause or resume in the middle of a step is written
 * to status at once (before, once the step was over).
 */
export const rolloutPatchLevel = 4;

/** Where a rollout's story is, so a new run takes it up exactly there. */
export type RolloutPosition =
  /** The canary is not created yet. */
  | { at: 'start' }
  /** At step `step`; `done` once that step is over (the rollout may be held before the next one). */
  | { at: 'steps'; step: number; done: boolean }
  /**
   * Promoting; `stableUpdated` once the stable Deployment was given the canary's image, `stableImage` what the API
   * server stored it as (admission may pin a digest or rewrite the registry).
   */
  | { at: 'promote'; stableUpdated: boolean; stableImage?: string }
  /** Undoing: `stop` says why; the undo stack holds what is left to undo. */
  | { at: 'compensate'; stop: Interruption };

/** An undo the rollout registered, by name (the closures are rebuilt from these in a new run). */
export type UndoKind = 'removeCanary' | 'restoreStableImage';

/** Everything a rollout knows, as it goes from one run to the next: nothing a user sees changes across the boundary. */
export interface RolloutCarry {
  state: RolloutState;
  position: RolloutPosition;
  /** When the timed step under way (an analysis window, a switch-back window) ends. */
  stepEndsAt?: number;
  /** The Job of a Job check under way, deleted with the rollout's undoing if it is cut short. */
  checkJob?: string;
  /** What the steps ask to route to the canary, and what is routed now. */
  target: CanaryRoute;
  route: CanaryRoute;
  promoteRequest?: ControlRequest;
  abortRequest?: ControlRequest;
  /** Consecutive analysis results per metric, and the failure that ends the rollout, once one does. */
  tallies: Record<string, MetricTally>;
  analysisFailed?: { metric: string; times: number; message: string };
  /** Epoch ms: the last analysis, the last gate check, the last failure counted, the canary's creation, the deadline. */
  lastAnalysisAt: number;
  lastGateAt: number;
  lastCountedAt: number;
  createdAt: number;
  deadline: number;
  /** Undos registered so far, run last first. */
  undos: UndoKind[];
  /** The message that says what the rollout does (a repair's message gives way to it at the next clean check). */
  steady?: string;
  /** What status said before a person's pause came in the middle of a step (level 4): said again on resume. */
  unheld?: { phase: RolloutPhase; message: string };
  /** 1 for the first run of the rollout, +1 for each continue-as-new. */
  run: number;
  /** Notifications sent so far (the last message's seq), and what their ids are made of (reconcile/notify.ts). */
  notified?: { seq: number; epoch: number };
  /** Notifications whose workflow was not known to be started when the run continued as new: the next run starts them again. */
  unstarted?: NotificationInput[];
}


export type { RecoveredRollout } from '../activities/types.ts';

export interface RolloutResult {
  key: string;
  phase: RolloutPhase;
  message: string;
}

/** One health gate check of the canary. */
export interface GateVerdict {
  at: string;
  ok: boolean;
  /** A failure during the start-up grace: recorded, not counted. */
  grace?: boolean;
  readyReplicas: number;
  restarts: number;
  reason: string;
}

/** The rollout's position, for the `rollout` query, the CLI and the UI. */
export interface RolloutState {
  namespace: string;
  name: string;
  key: string;
  phase: RolloutPhase;
  /** Index of the current step (steps.length once all are done). */
  step: number;
  totalSteps: number;
  /** Traffic percentage the canary receives now. */
  weight: number;
  /** A header route or a mirror in place, in words. */
  routing?: string;
  message: string;
  startedAt: string;
  /** When a timed pause ends (clients compute the time left from it). */
  pauseEndsAt?: string;
  /** Paused by a user (as opposed to a pause step). */
  pausedByUser: boolean;
  /** Who paused it, while pausedByUser. */
  pausedBy?: string;
  deadlineAt: string;
  gates: GateVerdict[];
  consecutiveFailures: number;
  /** When the canary first had minReadyReplicas ready: from then on, failed gates count. */
  readySince?: string;
  /** The canary's analysis, when the spec has one. */
  analysis?: {
    /** The last verdicts, newest last. */
    verdicts: AnalysisVerdict[];
    /** An analysis passed since the route last changed: traffic may move up, the last step may promote. */
    passed: boolean;
    /** Why the rollout holds: a metric inconclusive too many times in a row. */
    blind?: string;
  };
  /** The last check verdicts, newest last. */
  checks?: CheckVerdict[];
  abortedBy?: string;
  /** Why the rollout ended short of promotion, as a CamelCase reason (the message says it in words). */
  reason?: string;
}

/** Who asked for a control action, and why (shown in status and history). */
export interface ControlRequest {
  by?: string;
  reason?: string;
}

export type ControlAction = 'promote' | 'abort' | 'pause' | 'resume';
export const controlActions: readonly ControlAction[] = ['promote', 'abort', 'pause', 'resume'];

/** Control as signals: fire and forget; one sent to the Application's workflow is forwarded to its rollout. */
export const controlSignals = {
  promote: defineSignal<[ControlRequest?]>('promote'),
  abort: defineSignal<[ControlRequest?]>('abort'),
  pause: defineSignal<[ControlRequest?]>('pause'),
  resume: defineSignal<[ControlRequest?]>('resume'),
} as const satisfies Record<ControlAction, unknown>;

/** Control as updates: validated (a refusal says why) and answered with the rollout's state. */
export const controlUpdates = {
  promote: defineUpdate<RolloutState, [ControlRequest]>('promote'),
  abort: defineUpdate<RolloutState, [ControlRequest]>('abort'),
  pause: defineUpdate<RolloutState, [ControlRequest]>('pause'),
  resume: defineUpdate<RolloutState, [ControlRequest]>('resume'),
} as const satisfies Record<ControlAction, unknown>;

export const rolloutQuery = defineQuery<RolloutState | null>('rollout');

/** Sent by the Application's workflow when a child the rollout owns changed (a hand edit, a deletion, canary pods): check now. */
export const recheckSignal = defineSignal<[{ object?: string }]>('recheck');

// ---- the Release workflow ----

/** The Release workflow's type name. */
export const releaseWorkflowType = 'releaseWorkflow';

/** One workflow per Release. */
export function releaseWorkflowId(namespace: string, name: string): string {
  return `release/${namespace}/${name}`;
}

export interface ReleaseWorkflowInput {
  namespace: string;
  name: string;
  options?: {
    /** How often a running release looks at its Applications besides the watcher's signals (default 30). */
    pollSeconds?: number;
    /** Continue-as-new once the history reaches this many events, or sooner when the server suggests it (default 2000). */
    maxHistoryEvents?: number;
  };
  /** The whole state of a release in progress, carried across continue-as-new. */
  carried?: ReleaseCarry;
}

/** Where a release's story is, so a new run takes it up exactly there. */
export type ReleasePosition =
  /** Before the claim (a new generation). */
  | { at: 'claim' }
  /** At wave `wave` (0-based): held before it, following its canaries, or pausing after it (until: epoch ms, null for a promote). */
  | { at: 'wave'; wave: number; stage: 'hold' | 'follow' | 'between'; until?: number | null }
  /** Undoing, and why. */
  | { at: 'compensate'; stop: { phase: 'Aborted' | 'RolledBack'; message: string; app?: string } };

/** Everything a release in progress knows, as it goes from one run to the next. */
export interface ReleaseCarry {
  plan: ReleasePlan;
  state: ReleaseState;
  position: ReleasePosition;
  abortRequest?: ControlRequest;
  promoteRequest?: ControlRequest;
  deleting: boolean;
  /** What status last said (it is written only when it changes). */
  written: string;
  lastRequest: ControlRequest;
  /** What the release last told each running canary. */
  told: [string, 'promote' | 'pause' | 'resume'][];
}

/** One Application as the Release sees it. */
export interface ReleaseAppState {
  name: string;
  /** The member cluster it is in; absent: the operator's own. */
  cluster?: string;
  /** 1-based. */
  wave: number;
  phase: string;
  canaryVersion: string;
  /** The image the Release rolls out. */
  image?: string;
  /** Its image before the Release, which a rollback puts back. */
  previousImage?: string;
  /**
   * What its stable Deployment ran when the Release claimed it: `previousImage` as admission stored it (a registry
   * mirror, a pinned digest), which a reverted Deployment runs again. Absent in histories from before.
   */
  previousDeploymentImage?: string;
  message?: string;
}

/** What the Release workflow knows, for the `release` query, the CLI and status. */
export interface ReleaseState {
  namespace: string;
  name: string;
  phase: string;
  /** The current (or last) wave, 1-based; 0 before the first. */
  wave: number;
  waves: number;
  generation?: number;
  message: string;
  pausedByUser: boolean;
  /** The Application whose canary failed, if one did (cluster/name in a member cluster). */
  failedApplication?: string;
  /** The member cluster the release waits for, while it cannot be reached. */
  heldByCluster?: string;
  applications: ReleaseAppState[];
}

/** Control of a whole Release, as updates (validated, answered with its state) and as signals (controlSignals). */
export const releaseUpdates = {
  promote: defineUpdate<ReleaseState, [ControlRequest]>('promote'),
  abort: defineUpdate<ReleaseState, [ControlRequest]>('abort'),
  pause: defineUpdate<ReleaseState, [ControlRequest]>('pause'),
  resume: defineUpdate<ReleaseState, [ControlRequest]>('resume'),
} as const satisfies Record<ControlAction, unknown>;

export const releaseQuery = defineQuery<ReleaseState>('release');
