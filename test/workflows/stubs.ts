// The workflow test tier: the real workflow code on a real Worker against the run's Temporal dev server, with the
// activities replaced by recording stubs that answer from a script. No Kubernetes: the subject is the workflows'
// logic (timers, signals, updates, compensation); the end-to-end tests stay the proof of the features.
import { ApplicationFailure, Context } from '@temporalio/activity';
import { defaultPayloadConverter } from '@temporalio/common';
import proto from '@temporalio/proto';
import { Client, Connection, WorkflowNotFoundError, type WorkflowHandle } from '@temporalio/client';
import assert from 'node:assert/strict';
import { DefaultLogger, NativeConnection, Runtime, Worker } from '@temporalio/worker';
import { randomUUID } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import type { Activities } from '../../activities/index.ts';
import { readRouteWeights } from '../../render/istio.ts';
import { reachesCanary, sameRoute, type CanaryRoute } from '../../routing/route.ts';
import type { CanaryDrift, CanaryHealth, CanaryObservation, CanaryStatusInput, MetricValue, FinalizeResult, ReconcileInput, ReconcileResult } from '../../activities/types.ts';
import { eventually } from '../../lib/poll.ts';
import { testEnv, workflowBundle } from '../../testkit/env.ts';
import { startTemporal, type OwnTemporal } from '../../testkit/temporal-ui.ts';
import type { AppObservation } from '../../activities/release.ts';
import type { ReleasePlan } from '../../reconcile/wave-plan.ts';
import type { RolloutPlan } from '../../reconcile/plan.ts';
import type { NotificationMessage } from '../../reconcile/notify.ts';
import type { SendNotificationInput } from '../../activities/notify.ts';
import type { canaryRolloutWorkflow } from '../../workflows/rollout/workflow.ts';
import { controlUpdates, rolloutPatchLevel, rolloutWorkflowTypes, type ControlAction, type RolloutInput, type RolloutResult } from '../../workflows/contract.ts';

const EventType = proto.temporal.api.enums.v1.EventType;
type HistoryEvent = proto.temporal.api.history.v1.IHistoryEvent;

/** What a scenario's stubs answer. */
export interface Script {
  /** The canary's health at the n-th check (0-based); default: 1 of 1 replicas ready. */
  health?: (n: number) => Partial<CanaryHealth>;
  /** What a hand edit changed of the canary Deployment at the n-th check (observeCanary's `drift`); default nothing. */
  drift?: (n: number) => CanaryDrift | undefined;
  /** What the VirtualService routes at the n-th check, overriding what the rollout last set (a hand edit). */
  routed?: (n: number) => CanaryRoute | null | undefined;
  /** The answer for `metric` at the n-th analysis (0-based); default: no data. */
  metrics?: (n: number, metric: string) => { value: number | null; error?: string };
  /** stableRolledOut says done from this call on (0-based; default 0). */
  stableDoneAt?: number;
  /** What promoteStable says the API server stored (admission rewrote the image); stableRolledOut then says done only when asked for it. */
  stableStoredAs?: string;
  /** The n-th reconcile pass's answer (0-based); default: a Running app without a canary. */
  reconcile?: (n: number, input: ReconcileInput) => Partial<ReconcileResult> | Error;
  /** A Release: its plan, whether its claim is refused, and how each Application's canary goes. */
  release?: ReleaseScript;
  /** An HTTP check's verdict at its n-th call (0-based) for the check named; default pass. */
  http?: (n: number, check: string) => { verdict: 'pass' | 'fail' | 'waiting'; detail?: string; reason?: string };
  /** A Job check's state at its n-th look (0-based) for the check named; default succeeded at the first look. */
  job?: (n: number, check: string) => 'running' | 'succeeded' | 'failed';
  /** Makes an activity fail: return an error to throw on its n-th call. */
  fail?: Partial<Record<keyof Activities, (n: number) => Error | undefined>>;
  /**
   * Holds an activity's answer (the call already recorded) until the promise returned for its n-th call settles:
   * a scenario can act while the activity is in flight, whatever the machine's load.
   */
  hold?: Partial<Record<keyof Activities, (n: number) => Promise<void> | undefined>>;
}

export interface Call {
  name: keyof Activities;
  input: Record<string, unknown>;
  /** The workflow that called it. */
  workflowId: string;
  at: number;
}

/** How a Release scenario goes: the plan read, a refused claim, and each Application's canary. */
export interface ReleaseScript {
  plan?: ReleasePlan;
  read?: (n: number) => unknown;
  refuse?: string;
  /**
   * Each Application's canary (by name, or cluster/name in a member cluster): promoted or failed after so many
   * observations since it started (default promoted after 2); 'gone' deletes it.
   */
  apps?: Record<string, {
    outcome: 'promote' | 'fail' | 'hang' | 'gone'; after?: number;
    /** The image its spec names when its canary starts: changed after the claim (a hotfix of what runs). */
    hotfix?: string;
    /** Its image as a revert finds it: changed by hand after its promotion (the revert then writes nothing). */
    editedTo?: string;
  }>;
  /** Member clusters that do not answer right now (the scenario changes it): their activities fail as ClusterUnreachable. */
  down?: Set<string>;
}

interface FakeApp {
  polls: number;
  version: string;
  state: 'running' | 'promoted' | 'failed' | 'aborted';
  specImage: string;
}

/** Everything one scenario's activities were asked, in order. */
export class Recorder {
  readonly calls: Call[] = [];
  readonly statuses: CanaryStatusInput['status'][] = [];
  /** Reasons of the Events the rollout recorded with its status writes, in order. */
  readonly events: string[] = [];
  /** Rollout ends the Application workflow wrote for a rollout that could not (closeCanaryStatus), in order. */
  readonly closed: { key: string; reason: string; message: string }[] = [];
  /** Every attempt to deliver a notification (sendNotification), in order: the message and the receiver's name. */
  readonly notifications: { message: NotificationMessage; receiver: string }[] = [];
  /** Breaches of the rule that no traffic goes to a canary without a ready replica. */
  readonly violations: string[] = [];
  readonly script: Script;
  private ready = 1;
  /** The Applications a Release started, as the scenario plays them. */
  private readonly apps = new Map<string, FakeApp>();
  /** What the (pretend) VirtualService routes: what the rollout last set. */
  private routed: CanaryRoute | null = { weight: 0 };

  constructor(script: Script) {
    this.script = script;
  }

  count(name: keyof Activities): number {
    return this.calls.filter((c) => c.name === name).length;
  }

  names(): string[] {
    return this.calls.map((c) => c.name);
  }

  phases(): string[] {
    return this.statuses.map((s) => s.phase).filter((p, i, all) => i === 0 || all[i - 1] !== p);
  }

  /** Weights the rollout routed, in order. */
  weights(): number[] {
    return this.routes().map((r) => r.weight);
  }

  /** Routes the rollout set, in order. */
  routes(): CanaryRoute[] {
    return this.calls.filter((c) => c.name === 'setCanaryRoute').map((c) => c.input['route'] as CanaryRoute);
  }

  last(): CanaryStatusInput['status'] | undefined {
    return this.statuses.at(-1);
  }

  /** Waits until the scenario's recorded state satisfies `ok`. */
  async until(what: string, ok: (r: Recorder) => boolean, timeoutMs = 90_000): Promise<void> {
    await eventually(what, () => Promise.resolve(ok(this) ? true : undefined), { timeoutMs, intervalMs: 20 });
  }

  /** One Application as the scripted Release scenario has it now (each look moves its canary on). */
  private observeApp(name: string, cluster?: string): AppObservation {
    const key = cluster ? `${cluster}/${name}` : name;
    const a = this.apps.get(key);
    const plan = this.script.release?.apps?.[key] ?? { outcome: 'promote' };
    if (!a) return { name, exists: true, specImage: `${name}:old`, canary: { enabled: false }, running: true, deploymentImage: `${name}:old` };
    if (plan.outcome === 'gone' && a.polls >= (plan.after ?? 2)) return { name, exists: false, running: false };
    if (a.state === 'running' && ++a.polls >= (plan.after ?? 2)) {
      if (plan.outcome === 'promote') {
        a.state = 'promoted';
        a.specImage = `${name}:${a.version}`;
      } else if (plan.outcome === 'fail') a.state = 'failed';
    }
    const phase = { running: 'Progressing', promoted: 'Promoted', failed: 'RolledBack', aborted: 'Aborted' }[a.state];
    return {
      name, exists: true, specImage: a.specImage, running: true, deploymentImage: a.specImage,
      canary: { enabled: a.state === 'running', phase, version: a.version, image: `${name}:${a.version}`, message: `${phase} (scripted)`, ...(a.state === 'failed' ? { reason: 'HealthGateFailed' } : {}) },
    };
  }

  /** The statuses a Release wrote, in order. */
  releaseStatuses(): { phase: string; message: string; wave: number; applications: { name: string; phase: string }[] }[] {
    return this.calls.filter((c) => c.name === 'writeReleaseStatus').map((c) => c.input['status'] as never);
  }

  /** The stub activities' answer to one call. */
  answer(name: keyof Activities, input: Record<string, unknown>): unknown {
    const n = this.count(name);
    let workflowId = '';
    try {
      workflowId = Context.current().info.workflowExecution?.workflowId ?? '';
    } catch {
      // not in an activity
    }
    this.calls.push({ name, input, workflowId, at: Date.now() });
    if (name === 'sendNotification') {
      const { message, receiver } = input as unknown as SendNotificationInput;
      this.notifications.push({ message, receiver: receiver.name });
    }
    const failure = this.script.fail?.[name]?.(n);
    if (failure) throw failure;
    const cluster = input['cluster'] as string | undefined;
    if (cluster && this.script.release?.down?.has(cluster)) {
      throw ApplicationFailure.nonRetryable(`cluster ${cluster} (https://127.0.0.1:1): connect ECONNREFUSED (scripted)`, 'ClusterUnreachable');
    }
    const key = (app: string) => (cluster ? `${cluster}/${app}` : app);
    switch (name) {
      case 'observeCanary': {
        const health: CanaryHealth = { exists: true, readyReplicas: 1, desiredReplicas: 1, restarts: 0, ...this.script.health?.(n) };
        this.ready = health.readyReplicas;
        const edited = this.script.routed?.(n);
        if (edited !== undefined) this.routed = edited;
        const intended = input['route'] as CanaryRoute;
        const routed = this.routed && readRouteWeights(renderRoutes(this.routed));
        const drift = this.script.drift?.(n);
        return { health, routed, asIntended: this.routed !== null && sameRoute(this.routed, intended), target: health.exists, ...(drift ? { drift } : {}) } satisfies CanaryObservation;
      }
      case 'setCanaryRoute': {
        const route = input['route'] as CanaryRoute;
        if (reachesCanary(route) && this.ready === 0) this.violations.push(`routed ${JSON.stringify(route)} while the last health check saw 0 ready replicas`);
        this.routed = route;
        return readRouteWeights(renderRoutes(route));
      }
      case 'queryMetrics': {
        const queries = input['queries'] as { name: string }[];
        return queries.map((q) => ({ name: q.name, ...(this.script.metrics?.(n, q.name) ?? { value: null, error: 'no data (scripted)' }) })) satisfies MetricValue[];
      }
      case 'promoteStable':
        return this.script.stableStoredAs ? { image: this.script.stableStoredAs } : {};
      case 'stableRolledOut': {
        const storedAs = this.script.stableStoredAs;
        if (storedAs && input['stored'] !== storedAs) return { done: false, message: `stable runs ${storedAs}, asked for ${String(input['image'])}` };
        return { done: n >= (this.script.stableDoneAt ?? 0), message: `stable rolling out (poll ${n})` };
      }
      case 'runHttpCheck': {
        const check = (input['check'] as { name: string }).name;
        const r = this.script.http?.(n, check) ?? { verdict: 'pass' };
        return { verdict: r.verdict, status: r.verdict === 'pass' ? 200 : 503, detail: r.detail ?? `HTTP ${r.verdict === 'pass' ? 200 : 503} (scripted)`, attempts: 1, ...(r.reason ? { reason: r.reason } : {}) };
      }
      case 'startJobCheck':
        return { jobName: `app-${(input['check'] as { name: string }).name}-job` };
      case 'observeJobCheck': {
        const jobName = input['jobName'] as string;
        const check = jobName.replace(/^app-/, '').replace(/-job$/, '');
        const state = this.script.job?.(this.calls.filter((c) => c.name === 'observeJobCheck' && c.input['jobName'] === jobName).length - 1, check) ?? 'succeeded';
        return { state, message: state === 'failed' ? `Job ${jobName} failed: BackoffLimitExceeded: exit 1 (scripted)` : `Job ${jobName} ${state}` };
      }
      case 'deleteJobCheck':
        return { deleted: true };
      case 'sendNotification': {
        const { receiver } = input as unknown as SendNotificationInput;
        return { outcome: 'sent', status: 200, detail: `${receiver.name}: HTTP 200 (scripted)` };
      }
      case 'writeCanaryStatus': {
        const { status, event } = input as unknown as CanaryStatusInput;
        this.statuses.push(status);
        if (event) this.events.push(event.reason);
        return undefined;
      }
      case 'closeCanaryStatus':
        this.closed.push({ key: input['key'] as string, reason: input['reason'] as string, message: input['message'] as string });
        return true;
      case 'reconcileApplication': {
        const r = this.script.reconcile?.(n, input as unknown as ReconcileInput) ?? {};
        if (r instanceof Error) throw r;
        return { outcome: 'reconciled', uid: 'uid-1', generation: 1, phase: 'Running', message: '1/1 replicas available', ...r } satisfies ReconcileResult;
      }
      case 'finalizeApplication':
        return { removed: ['Deployment/app'], finalizerReleased: true } satisfies FinalizeResult;
      case 'readRelease':
        return this.script.release?.read?.(n) ?? { outcome: 'ready', uid: 'rel-uid', generation: 1, plan: this.script.release?.plan };
      case 'claimApplications': {
        const refused = this.script.release?.refuse;
        // The first Application is the one refused; the rest were not claimed because of it.
        if (refused) return { ok: false, message: refused, refused: [{ name: (input['apps'] as { name: string }[])[0]?.name ?? '', message: refused }] };
        return { ok: true, apps: (input['apps'] as { name: string; canaryVersion: string }[]).map((a) => ({ name: a.name, image: `${a.name}:${a.canaryVersion}`, previousImage: `${a.name}:old` })) };
      }
      case 'startCanary': {
        const app = input['app'] as string;
        const hotfix = this.script.release?.apps?.[key(app)]?.hotfix;
        this.apps.set(key(app), { polls: 0, version: input['canaryVersion'] as string, state: 'running', specImage: hotfix ?? `${app}:old` });
        return undefined;
      }
      case 'observeApplications':
        return (input['apps'] as string[]).map((name) => ({ ...this.observeApp(name, cluster), ...(cluster ? { cluster } : {}) }));
      case 'signalCanary':
        return true;
      case 'stopCanary': {
        const a = this.apps.get(key(input['app'] as string));
        if (a && a.state === 'running') a.state = 'aborted';
        return undefined;
      }
      case 'revertApplication': {
        // As the activity: it writes the previous image only over the image the Release promoted.
        const a = this.apps.get(key(input['app'] as string));
        const edited = this.script.release?.apps?.[key(input['app'] as string)]?.editedTo;
        if (a && edited) a.specImage = edited;
        if (!a || a.specImage !== input['image']) return false;
        a.specImage = input['previousImage'] as string;
        return true;
      }
      default:
        return undefined;
    }
  }
}

const activityNames: (keyof Activities)[] = [
  'reconcileApplication', 'finalizeApplication', 'prepareCanary', 'observeCanary', 'queryMetrics', 'setCanaryRoute', 'removeCanary',
  'promoteStable', 'stableRolledOut', 'restoreStableImage', 'finishCanarySpec', 'writeCanaryStatus', 'closeCanaryStatus',
  'runHttpCheck', 'startJobCheck', 'observeJobCheck', 'deleteJobCheck', 'sendNotification',
  'readRelease', 'claimApplications', 'releaseClaims', 'startCanary', 'stopCanary', 'revertApplication', 'observeApplications', 'writeReleaseStatus', 'finalizeRelease',
  'signalCanary',
];

/** A rollout started by a scenario: its handle (following continue-as-new), its recorder, its result. */
export interface RolloutRun {
  handle: WorkflowHandle<typeof canaryRolloutWorkflow>;
  r: Recorder;
  result: () => Promise<RolloutResult>;
}

/** A control request as a validated update, as the CLI sends it. */
export const control = (run: RolloutRun, action: ControlAction, by = 'tester', reason?: string) =>
  run.handle.executeUpdate(controlUpdates[action], { args: [{ by, ...(reason ? { reason } : {}) }] });

/** A non-retryable activity failure of a type, as the real activities raise them. */
export const failure = (type: string, message = `${type} (scripted)`) => ApplicationFailure.nonRetryable(message, type);

/**
 * One Worker for a test file, polling its own task queue; every scenario gets its own namespace, and the stub
 * activities find the scenario's Recorder by the namespace in their input.
 */
export class WorkflowTier {
  readonly taskQueue = `wf-tier-${randomUUID()}`;
  client!: Client;
  private connection!: Connection;
  private native!: NativeConnection;
  private worker!: Worker;
  private running!: Promise<void>;
  private readonly scenarios = new Map<string, Recorder>();
  private own: OwnTemporal | undefined;

  /** `dynamicConfig`: run on a dev server of its own with these values (e.g. a low `limit.historyCount.error`). */
  private readonly opts: { dynamicConfig?: Record<string, string | number> };
  constructor(opts: { dynamicConfig?: Record<string, string | number> } = {}) {
    this.opts = opts;
  }

  async start(): Promise<void> {
    // Scripted activity failures are the point of many scenarios: keep the worker's log to real errors.
    Runtime.install({ logger: new DefaultLogger('ERROR') });
    const env = await testEnv();
    if (this.opts.dynamicConfig) this.own = await startTemporal({ dynamicConfig: this.opts.dynamicConfig });
    const address = this.own?.address ?? env.temporalAddress;
    const namespace = this.own ? 'default' : env.temporalNamespace;
    this.native = await NativeConnection.connect({ address });
    this.connection = await Connection.connect({ address });
    this.client = new Client({ connection: this.connection, namespace });
    const activities = Object.fromEntries(activityNames.map((name) => [name, (input: Record<string, unknown>) => {
      const r = this.scenarios.get(input['namespace'] as string);
      if (!r) throw ApplicationFailure.nonRetryable(`no scenario for namespace ${String(input['namespace'])}`, 'NoScenario');
      const n = r.count(name);
      const answer = r.answer(name, input);
      const held = r.script.hold?.[name]?.(n);
      return held ? held.then(() => answer) : Promise.resolve(answer);
    }]));
    this.worker = await Worker.create({
      connection: this.native, namespace, taskQueue: this.taskQueue, workflowBundle: await workflowBundle(), activities,
      // Scenarios run side by side; evicting cached runs now and then also exercises replay.
      maxCachedWorkflows: 50,
    });
    this.running = this.worker.run();
  }

  async stop(): Promise<void> {
    this.worker.shutdown();
    await this.running;
    await this.connection.close();
    await this.native.close();
    await this.own?.stop();
  }

  /** A fresh scenario: its namespace, its recorder. */
  scenario(script: Script = {}): { namespace: string; recorder: Recorder } {
    const namespace = `wf-${randomUUID().slice(0, 8)}`;
    const recorder = new Recorder(script);
    this.scenarios.set(namespace, recorder);
    return { namespace, recorder };
  }

  /** Starts a rollout workflow (the plan's strategy's type) on its own (no Application workflow), in a fresh scenario. */
  async startRollout(p: RolloutPlan, script: Script = {}, extra: Partial<RolloutInput> = {}): Promise<RolloutRun> {
    const { namespace, recorder } = this.scenario(script);
    const handle = await this.client.workflow.start<typeof canaryRolloutWorkflow>(rolloutWorkflowTypes[p.strategy ?? 'canary'], {
      // At the level the Application's workflow starts rollouts at; `extra` may take it away (a rollout started before).
      taskQueue: this.taskQueue, workflowId: `application/${namespace}/app/canary`, args: [{ namespace, name: 'app', plan: p, patchLevel: rolloutPatchLevel, ...extra }],
    });
    return { handle, r: recorder, result: () => handle.result() };
  }

  /** Waits for a rollout's result, replays every run of it, and checks the routing rule held throughout. */
  async finish(run: RolloutRun): Promise<RolloutResult> {
    const result = await run.result();
    await this.replayRuns(run.handle.workflowId);
    assert.deepEqual(run.r.violations, [], 'never routed to a canary without a ready replica');
    return result;
  }

  /** Replays every run of a workflow id (a chain of continue-as-new runs, or runs of several rollouts); returns how many. */
  async replayRuns(workflowId: string): Promise<number> {
    const runs = await this.allRuns(workflowId);
    for (const run of runs) await this.replay(this.client.workflow.getHandle(workflowId, run.runId));
    return runs.length;
  }

  /** The input of every run of a workflow id, oldest first: what each continue-as-new carried. */
  async runInputs<T>(workflowId: string): Promise<T[]> {
    return (await this.allRuns(workflowId)).map((r) => r.input as T);
  }

  /** How many runs of a workflow id Temporal knows (each continue-as-new starts one). */
  async runs(workflowId: string): Promise<number> {
    return (await this.allRuns(workflowId)).length;
  }

  /**
   * Every run of a workflow id, oldest first. Temporal's visibility store (what list and count read) catches up a
   * moment after a run starts or ends, later on a loaded machine; so the chain of continue-as-new runs is walked back
   * from the current run through each run's first event, which is never behind, and runs visibility lists outside
   * that chain (an earlier rollout under the same id) are added.
   */
  private async allRuns(workflowId: string): Promise<{ runId: string; start: number; input: unknown }[]> {
    const runs = new Map<string, { runId: string; start: number; input: unknown }>();
    const read = async (runId: string) => {
      const first = (await this.client.workflow.getHandle(workflowId, runId).fetchHistory()).events?.[0];
      const started = first?.workflowExecutionStartedEventAttributes;
      const payload = started?.input?.payloads?.[0];
      runs.set(runId, { runId, start: Number(first?.eventTime?.seconds ?? 0) * 1000 + (first?.eventTime?.nanos ?? 0) / 1e6, input: payload ? defaultPayloadConverter.fromPayload(payload) : undefined });
      return started?.continuedExecutionRunId || undefined;
    };
    let runId: string | undefined;
    try {
      runId = (await this.client.workflow.getHandle(workflowId).describe()).runId;
    } catch (err) {
      if (!(err instanceof WorkflowNotFoundError)) throw err;
    }
    while (runId && !runs.has(runId)) runId = await read(runId);
    for await (const wf of this.client.workflow.list({ query: `WorkflowId = '${workflowId}'` })) if (!runs.has(wf.runId)) await read(wf.runId);
    return [...runs.values()].sort((a, b) => a.start - b.start);
  }

  /** Replays the run's history on fresh workflow code (it must not diverge), and checks every activity and timer in it carries a summary. */
  async replay(handle: WorkflowHandle): Promise<void> {
    const history = await handle.fetchHistory();
    await Worker.runReplayHistory({ workflowBundle: await workflowBundle() }, history, handle.workflowId);
    const missing = unsummarized(history);
    if (missing.length) throw new Error(`${handle.workflowId}: history events without a summary: ${missing.join(', ')}`);
  }
}

/** The ActivityTaskScheduled and TimerStarted events of a history that carry no summary (as "#id EVENT_TYPE"). */
export function unsummarized(history: proto.temporal.api.history.v1.IHistory): string[] {
  return (history.events ?? [])
    .filter((e) => e.eventType === EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED || e.eventType === EventType.EVENT_TYPE_TIMER_STARTED
      || e.markerRecordedEventAttributes?.markerName === 'core_local_activity')
    .filter((e) => !summaryOf(e))
    .map((e) => `#${String(e.eventId)} ${EventType[e.eventType ?? 0]}`);
}

/** The summary Temporal's UI shows for a history event, decoded; undefined when there is none. */
export function summaryOf(event: HistoryEvent): string | undefined {
  const payload = event.userMetadata?.summary;
  return payload ? defaultPayloadConverter.fromPayload<string>(payload) || undefined : undefined;
}

/** Gates every 100 ms; three counted failures roll back; no start-up grace unless a scenario asks for one. */
export const gates = { minReadyReplicas: 1, maxRestarts: 3, intervalMs: 100, failureThreshold: 3, initialDelayMs: 0 };

/** A plan with millisecond timings: gates every 100 ms, three failures roll back, a generous deadline. */
export function plan(over: Partial<RolloutPlan> = {}): RolloutPlan {
  return {
    key: 'v2|app:v2', version: 'v2', image: 'app:v2', stableImage: 'app:v1',
    steps: [{ kind: 'weight', weight: 20 }, { kind: 'pause', ms: 300 }, { kind: 'weight', weight: 60 }],
    gates,
    // Far beyond any scenario on a loaded machine: only the scenarios about the deadline set one that matters.
    progressDeadlineMs: 600_000,
    ...over,
  };
}

export { sleep };

/** The routes part of a VirtualService for a canary route, as readRouteWeights reads it. */
function renderRoutes(r: CanaryRoute) {
  return {
    spec: {
      http: [
        ...(r.headers?.length ? [{ name: 'canary-match', route: [{ destination: { subset: 'canary' }, weight: 100 }] }] : []),
        {
          name: 'primary', route: [{ destination: { subset: 'stable' }, weight: 100 - r.weight }, { destination: { subset: 'canary' }, weight: r.weight }],
          ...(r.mirror ? { mirror: { subset: 'canary' }, mirrorPercentage: { value: r.mirror } } : {}),
        },
      ],
    },
  };
}
