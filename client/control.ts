// The client side of the operator: control and status of an Application's workflows, for the CLI, the kubectl
// plugin, the benchmark and the chaos run.
import { WorkflowNotFoundError, WorkflowUpdateFailedError, type Client, type WorkflowExecutionDescription, type WorkflowHandle } from '@temporalio/client';
import proto from '@temporalio/proto';
import { hostname, userInfo } from 'node:os';
import { Kube } from '../kube/client.ts';
import { formatDuration } from '../lib/duration.ts';
import { defaultNamespaceOf, loadKubeconfig } from '../kube/config.ts';
import {
  applicationWorkflowId, controlUpdates, rolloutQuery, rolloutWorkflowId, stateQuery,
  type ApplicationState, type ControlAction, type RolloutResult, type RolloutState,
} from '../workflows/contract.ts';

export type { ControlAction } from '../workflows/contract.ts';

/** The namespace of the current context of the kubeconfig (`kubeconfig`, else the default one), like kubectl's default. */
export function defaultNamespace(kubeconfig?: string): string {
  return defaultNamespaceOf(process.env, kubeconfig);
}

/** Who is asking as the machine names them, `user@host`: what is recorded when no Kubernetes identity can be had. */
export function localUser(): string {
  return `${userInfo().username}@${hostname()}`;
}

/** How long the CLI waits for the API server to say who the caller is before it falls back on localUser(). */
const identityTimeoutMs = 5000;

/**
 * Who is asking, recorded in status, Events and the history: the caller's Kubernetes identity where there is a
 * kubeconfig (`kubeconfig`, else the default one), as a SelfSubjectReview answers it (what `kubectl auth whoami`
 * asks; every authenticated user may), else localUser(): no kubeconfig, an API server that does not answer, or one
 * older than Kubernetes 1.28.
 */
export async function requester(kubeconfig?: string): Promise<string> {
  try {
    const kube = new Kube(await loadKubeconfig(kubeconfig));
    const review = await kube.request<{ status?: { userInfo?: { username?: string } } }>('POST', '/apis/authentication.k8s.io/v1/selfsubjectreviews', {
      body: { apiVersion: 'authentication.k8s.io/v1', kind: 'SelfSubjectReview' }, timeoutMs: identityTimeoutMs,
    });
    return review?.status?.userInfo?.username || localUser();
  } catch {
    return localUser();
  }
}

export interface ControlOutcome {
  /** The request was taken now (false: it was done already, which is no error: an abort of a rollout already aborting or over, a promote of one promoting or promoted, a pause of one paused). */
  accepted: boolean;
  /** What a person reads first. */
  note: string;
  /** The rollout's state after the request, when the workflow could answer. */
  state?: RolloutState;
  /** The outcome of a rollout that is over. */
  result?: RolloutResult;
}

// Refusals that mean what was asked is done already: asking again is not an error (a script that retries, two people
// pressing the same button). Any other refusal is.
const alreadyDone: Partial<Record<ControlAction, RegExp>> = {
  abort: /is already being aborted|is already (Promoted|Aborted|RolledBack|Failed)\b/,
  promote: /is already being promoted|is already Promoted\b/,
  pause: /is already paused/,
};
const nothingTo = (action: ControlAction, why: string) => `nothing to ${action}: ${why}`;

/** Whether a refusal of `action` means it is done already (`alreadyDone`); a Release's refusals read the same. */
export const doneAlready = (action: ControlAction, why: string): boolean => alreadyDone[action]?.test(why) ?? false;

/**
 * Sends a control action to the app's rollout as a validated Temporal update, asked by `by`. Asking again what is
 * done already succeeds and says so (`alreadyDone`: an abort of a rollout aborting or over, a promote of one
 * promoting or promoted, a pause of one paused); any other refusal throws with its reason.
 */
export async function control(client: Client, action: ControlAction, namespace: string, name: string, reason?: string, by = localUser()): Promise<ControlOutcome> {
  const handle = client.workflow.getHandle(rolloutWorkflowId(namespace, name));
  try {
    const state = await sendControl(client, handle, action, () => handle.executeUpdate(controlUpdates[action], { args: [{ by, ...(reason ? { reason } : {}) }] }));
    return { accepted: true, note: `${action} accepted`, state };
  } catch (err) {
    if (err instanceof WorkflowUpdateFailedError) {
      const why = err.cause?.message ?? err.message;
      if (doneAlready(action, why)) return { accepted: false, note: nothingTo(action, why), ...(await rolloutNow(handle)) };
      throw new Error(`${action} rejected: ${why}`, { cause: err });
    }
    if (!(err instanceof WorkflowNotFoundError)) throw err;
    const closed = await closedRollout(handle);
    if (!closed) throw new Error(`no rollout has run for ${namespace}/${name}`, { cause: err });
    const why = `the rollout of ${closed.key.split('|')[0]} is already ${closed.phase}`;
    if (doneAlready(action, why)) return { accepted: false, note: nothingTo(action, `${why}: ${closed.message}`), result: closed };
    throw new Error(`${action} rejected: ${why}: ${closed.message} (no rollout is running for ${namespace}/${name})`, { cause: err });
  }
}

/** How long a control waits for a worker to take it. */
const controlDeadlineMs = 30_000;
/** A worker polls its task queue again at least this often (a long poll lasts about a minute): older, it is gone. */
const pollerGoneMs = 90_000;
const operatorHint = 'is the operator running? Check its pods (kubectl -n <operator namespace> get pods), its log, and its /readyz; '
  + 'the Temporal address and namespace it uses must match this command\'s.';

/**
 * Sends a control request (`send`, an update) to a workflow, when a worker can take it. A request no worker can take
 * would wait for one with no word, and be applied whenever one came back (found by hand: a pause given up on took
 * effect two minutes later): it is not sent when no worker polls the workflow's task queue, and waits at most
 * controlDeadlineMs for an answer.
 */
export async function sendControl<T>(client: Client, handle: WorkflowHandle, action: string, send: () => Promise<T>): Promise<T> {
  const idle = await idleTaskQueue(client, handle);
  if (idle) throw new Error(`${action} not sent: ${idle}, so nothing would answer it: ${operatorHint}`);
  return client.connection.withDeadline(Date.now() + controlDeadlineMs, send).catch((err: unknown) => {
    if (!grpcCodes(err).some((c) => c === grpcCancelled || c === grpcDeadlineExceeded)) throw err;
    throw new Error(`${action}: no worker answered within ${controlDeadlineMs / 1000} s; the request may still take effect when a worker takes the workflow up `
      + `(status and history show it then): ${operatorHint}`, { cause: err });
  });
}

/**
 * Why no worker can take a request to a running workflow now (no poller on its task queue, or none for longer than a
 * worker ever waits between polls), or undefined when one may (or the server could not tell, or it is not running).
 */
async function idleTaskQueue(client: Client, handle: WorkflowHandle): Promise<string | undefined> {
  const d = await describeOrNull(handle).catch(() => null);
  if (d?.status.name !== 'RUNNING') return undefined;
  const polls = await lastPolls(client, d.taskQueue);
  return polls === undefined ? undefined : idleSince(polls, d.taskQueue, Date.now());
}

/** When each poller the server remembers on a workflow task queue last polled it (epoch ms; 0: never said), or undefined when it cannot tell. */
function lastPolls(client: Client, taskQueue: string): Promise<number[] | undefined> {
  return client.workflowService.describeTaskQueue({
    namespace: client.options.namespace, taskQueue: { name: taskQueue }, taskQueueType: proto.temporal.api.enums.v1.TaskQueueType.TASK_QUEUE_TYPE_WORKFLOW,
  }).then((r) => (r.pollers ?? []).map((p) => Number(p.lastAccessTime?.seconds ?? 0) * 1000), () => undefined);
}

/** Why a task queue whose pollers last polled at `lastPolls` (epoch ms) has no worker at `now`, or undefined. */
export function idleSince(lastPolls: number[], taskQueue: string, now: number): string | undefined {
  const last = Math.max(0, ...lastPolls);
  if (now - last < pollerGoneMs) return undefined;
  return last > 0 ? `no worker has polled task queue "${taskQueue}" since ${new Date(last).toISOString()}` : `no worker is polling task queue "${taskQueue}"`;
}

/** The outcome of a rollout workflow that has ended, or null when there is none. */
async function closedRollout(handle: WorkflowHandle): Promise<RolloutResult | null> {
  try {
    const d = await handle.describe();
    if (d.status.name === 'RUNNING') return null;
    return await handle.result() as RolloutResult;
  } catch (err) {
    if (err instanceof WorkflowNotFoundError) return null;
    return endedWithoutResult(handle, err);
  }
}

/**
 * A rollout that ended with no result (terminated, timed out, failed): its version from the run's input and what
 * ended it from its last event. The Application's workflow rolls such a rollout back (status says so).
 */
async function endedWithoutResult(handle: WorkflowHandle, err: unknown): Promise<RolloutResult> {
  const fallback = err instanceof Error ? err.message : String(err);
  try {
    const events = (await handle.fetchHistory()).events ?? [];
    const started = events[0]?.workflowExecutionStartedEventAttributes;
    const converter = handle.client.options.loadedDataConverter;
    let payloads = started?.input?.payloads ?? [];
    for (const codec of [...converter.payloadCodecs].reverse()) payloads = await codec.decode(payloads);
    const input = payloads[0] ? converter.payloadConverter.fromPayload<{ plan?: { key?: string } }>(payloads[0]) : undefined;
    const last = events.at(-1);
    const how = last?.workflowExecutionTerminatedEventAttributes ? `terminated${last.workflowExecutionTerminatedEventAttributes.reason ? ` (${last.workflowExecutionTerminatedEventAttributes.reason})` : ''}`
      : last?.workflowExecutionTimedOutEventAttributes ? 'timed out'
        : last?.workflowExecutionFailedEventAttributes ? `failed (${last.workflowExecutionFailedEventAttributes.failure?.message ?? 'no message'})`
          : last?.workflowExecutionCanceledEventAttributes ? 'cancelled' : fallback;
    return { key: input?.plan?.key ?? '?|?', phase: 'RolledBack', message: `its workflow was ${how}; the Application's workflow moved all traffic to stable and removed the canary` };
  } catch {
    return { key: '?|?', phase: 'Failed', message: fallback };
  }
}

/** The running rollout's state (or an ended one's result), as far as it can be had. */
async function rolloutNow(handle: WorkflowHandle): Promise<Pick<ControlOutcome, 'state' | 'result'>> {
  const closed = await closedRollout(handle);
  if (closed) return { result: closed };
  const state = await handle.query(rolloutQuery).catch(() => null);
  return state ? { state } : {};
}

export interface AppStatus {
  app: ApplicationState | null;
  rollout: RolloutState | null;
  /** The rollout workflow's execution status (RUNNING, COMPLETED...). */
  rolloutStatus?: string;
  /** The outcome of the last rollout when it is over. */
  rolloutResult?: RolloutResult;
  /** What keeps failing right now in either workflow (an API server out of reach, a refusal): the rest is older. */
  failing: FailingActivity[];
}

/** An activity that is being retried now, after failing: the workflow's state is from before it. */
export interface FailingActivity {
  workflow: 'application' | 'rollout';
  /** The activity's type (reconcileApplication, checkCanary...). */
  activity: string;
  attempt: number;
  /** Its last failure. */
  error: string;
  /** When the last attempt failed (ISO). */
  failedAt?: string;
}

/** What of a pending activity (as DescribeWorkflowExecution answers it) says whether and how it fails. */
interface PendingActivity {
  activityType?: { name?: string | null } | null;
  attempt?: number | null;
  lastFailure?: { message?: string | null } | null;
  /** A protobuf Timestamp: seconds as a number or a Long (whose string is the number). */
  lastAttemptCompleteTime?: { seconds?: { toString(): string } | number | null } | null;
}

/** The pending activities of a workflow that have failed at least once, as FailingActivity. */
export function failingActivities(workflow: FailingActivity['workflow'], pending: readonly PendingActivity[] | null | undefined): FailingActivity[] {
  return (pending ?? []).flatMap((a) => {
    if (!a.lastFailure) return [];
    const at = a.lastAttemptCompleteTime?.seconds;
    return [{
      workflow, activity: a.activityType?.name ?? '?', attempt: a.attempt ?? 0, error: a.lastFailure.message ?? '?',
      ...(at !== undefined && at !== null ? { failedAt: new Date(Number(at) * 1000).toISOString() } : {}),
    }];
  });
}

/**
 * The Application workflow's state and its latest rollout's. Throws with what to check when the workflows exist
 * but no worker answers (the operator is not running).
 */
export async function appStatus(client: Client, namespace: string, name: string): Promise<AppStatus> {
  const appHandle = client.workflow.getHandle(applicationWorkflowId(namespace, name));
  const app = await withWorker(client, appHandle, () => appHandle.query(stateQuery));
  const appFailing = app ? failingActivities('application', (await describeOrNull(appHandle))?.raw.pendingActivities) : [];
  const rh = client.workflow.getHandle(rolloutWorkflowId(namespace, name));
  const d = await describeOrNull(rh);
  if (!d) return { app, rollout: null, failing: appFailing };
  if (d.status.name !== 'RUNNING') {
    const result = await closedRollout(rh);
    return { app, rollout: null, rolloutStatus: d.status.name, ...(result ? { rolloutResult: result } : {}), failing: appFailing };
  }
  const rollout = await withWorker(client, rh, () => rh.query(rolloutQuery));
  return { app, rollout, rolloutStatus: d.status.name, failing: [...appFailing, ...failingActivities('rollout', d.raw.pendingActivities)] };
}

async function describeOrNull(handle: WorkflowHandle): Promise<WorkflowExecutionDescription | null> {
  return handle.describe().catch((err: unknown) => {
    if (err instanceof WorkflowNotFoundError) return null;
    throw err;
  });
}

/** How long a query may wait for a worker before the command says none answers. */
const queryDeadlineMs = 10_000;

/** Runs a query; null when the workflow does not exist; when no worker answers, an error that says so and what to check. */
async function withWorker<T>(client: Client, handle: WorkflowHandle, query: () => Promise<T>): Promise<T | null> {
  try {
    return await client.connection.withDeadline(Date.now() + queryDeadlineMs, query);
  } catch (err) {
    if (err instanceof WorkflowNotFoundError) return null;
    const taskQueue = (await handle.describe().catch(() => null))?.taskQueue;
    const polls = taskQueue === undefined ? undefined : await lastPolls(client, taskQueue);
    const what = noWorker(err, taskQueue ?? '?', polls?.filter((t) => t > 0).map((t) => t / 1000));
    if (what) {
      throw new Error(`${what}, so the workflow ${handle.workflowId} cannot answer: ${operatorHint}`, { cause: err });
    }
    throw new Error(`the workflow ${handle.workflowId} did not answer: ${causeMessages(err)}`, { cause: err });
  }
}

/**
 * Why a failed query means no worker answered, or undefined when it failed for another reason. `pollers` are the
 * last poll times (epoch seconds) the server remembers on the workflow task queue (undefined: it could not tell).
 * Three ways it shows: the server knows no poller; the server refuses at once (FAILED_PRECONDITION, "no poller
 * seen for task queue recently"); or nobody took the query before the deadline (the client's deadline ends the
 * call as CANCELLED, a server-side one as DEADLINE_EXCEEDED), whatever the server remembers of earlier pollers.
 */
export function noWorker(err: unknown, taskQueue: string, pollers: number[] | undefined): string | undefined {
  const codes = grpcCodes(err);
  const last = pollers?.length ? ` (a worker last polled at ${new Date(Math.max(...pollers) * 1000).toISOString()})` : '';
  if (pollers?.length === 0) return `no worker is polling task queue "${taskQueue}"`;
  if (codes.includes(grpcFailedPrecondition) && /no poller/i.test(causeMessages(err))) return `no worker is polling task queue "${taskQueue}"${last}`;
  if (codes.some((c) => c === grpcCancelled || c === grpcDeadlineExceeded)) return `no worker answered within ${queryDeadlineMs / 1000} s on task queue "${taskQueue}"${last}`;
  return undefined;
}

const grpcCancelled = 1;
const grpcDeadlineExceeded = 4;
const grpcFailedPrecondition = 9;

/** The gRPC status codes anywhere in an error's cause chain (the SDK wraps the transport's error once or twice). */
function grpcCodes(err: unknown): number[] {
  const codes: number[] = [];
  for (let e: unknown = err, depth = 0; e && typeof e === 'object' && depth < 5; e = (e as { cause?: unknown }).cause, depth++) {
    const code = (e as { code?: unknown }).code;
    if (typeof code === 'number') codes.push(code);
  }
  return codes;
}

/** "outer: inner: innermost", so a wrapped error still says what happened. */
function causeMessages(err: unknown): string {
  const parts: string[] = [];
  for (let e: unknown = err, depth = 0; e && depth < 5; e = (e as { cause?: unknown }).cause, depth++) {
    const m = e instanceof Error ? e.message : JSON.stringify(e);
    if (m && !parts.includes(m)) parts.push(m);
  }
  return parts.join(': ');
}

/** A few lines a person reads; the time left in a pause is computed from its end, now. */
export function formatRollout(r: RolloutState, now = Date.now()): string {
  const lines = [
    `rollout of ${r.key.replace('|', ' (')}) — ${r.phase}`,
    `  step ${Math.min(r.step + 1, r.totalSteps)}/${r.totalSteps}, weight ${r.weight}%`,
    `  ${r.message}`,
  ];
  if (r.pauseEndsAt) {
    const left = Math.max(0, Math.ceil((Date.parse(r.pauseEndsAt) - now) / 1000)) * 1000;
    lines.push(`  pause ends in ${left === 0 ? '0 s' : formatDuration(left)} (${r.pauseEndsAt})`);
  }
  if (r.pausedByUser) lines.push('  paused by request: resume or promote to continue');
  const gate = r.gates.at(-1);
  if (gate) {
    const verdict = gate.ok ? 'pass' : gate.grace ? 'FAIL (start-up grace, not counted)' : 'FAIL';
    lines.push(`  last health gate (${ago(gate.at, now)}): ${verdict} — ${gate.reason} (${r.consecutiveFailures} consecutive failures)`);
  }
  lines.push(`  deadline ${r.deadlineAt}`);
  if (r.abortedBy) lines.push(`  aborted by ${r.abortedBy}`);
  if (r.reason) lines.push(`  reason ${r.reason}`);
  return lines.join('\n');
}

/** How long ago an ISO time was, in words ("just now", "12 s ago", "3 min ago", "2 h ago"). */
export function ago(iso: string, now = Date.now()): string {
  const s = Math.round((now - Date.parse(iso)) / 1000);
  if (!Number.isFinite(s)) return iso;
  if (s < 2) return 'just now';
  if (s < 120) return `${s} s ago`;
  if (s < 7200) return `${Math.floor(s / 60)} min ago`;
  return `${Math.floor(s / 3600)} h ago`;
}

/** Activities the name of which a person would not recognise, in words. */
const activityWords: Record<string, string> = { reconcileApplication: 'the reconcile pass', finalizeApplication: 'removing the children' };

/**
 * One line for what keeps failing now. The states around it (the phase, the rollout's message) come from before
 * the failure began; this line is the present.
 */
export function formatFailing(f: FailingActivity, now = Date.now()): string {
  const what = activityWords[f.activity] ?? `${f.workflow === 'rollout' ? 'the rollout\'s ' : ''}activity ${f.activity}`;
  const when = f.failedAt ? `, last ${ago(f.failedAt, now)}` : '';
  return `  failing now: ${what} (attempt ${f.attempt}${when}): ${f.error}`;
}

/** One line for a rollout that is over. */
export function formatResult(r: RolloutResult): string {
  return `rollout of ${r.key.replace('|', ' (')}) — ${r.phase}: ${r.message}`;
}
