// What the Application workflows of one run cost in Temporal, counted from their histories.
import type { Client } from '@temporalio/client';
import { pool } from './util.ts';

// temporal.api.enums.v1.EventType (stable protocol numbers).
const EventType = {
  WorkflowExecutionStarted: 1,
  WorkflowTaskCompleted: 7,
  WorkflowTaskTimedOut: 8,
  WorkflowTaskFailed: 9,
  ActivityTaskScheduled: 10,
  ActivityTaskFailed: 13,
  ActivityTaskTimedOut: 14,
  TimerStarted: 17,
  MarkerRecorded: 25,
  WorkflowExecutionSignaled: 26,
  WorkflowExecutionContinuedAsNew: 28,
  StartChildWorkflowExecutionInitiated: 29,
  UpsertWorkflowSearchAttributes: 40,
} as const;

type Name = keyof typeof EventType;
const names = Object.fromEntries(Object.entries(EventType).map(([k, v]) => [v, k])) as Record<number, Name>;

export interface EventCounts {
  events: number;
  workflowTasks: number;
  activities: number;
  /** Local activities (recorded as markers): a reconcile pass run in the worker that runs the workflow task. */
  localActivities: number;
  signals: number;
  timers: number;
  starts: number;
  upserts: number;
  childStarts: number;
  /** Failed or timed-out workflow tasks and activity attempts recorded in history (retries inside one attempt are not). */
  failures: number;
  /** Temporal actions as this benchmark defines them: workflow starts + signals + activities + local activities + timers. */
  actions: number;
}

export interface TemporalCost {
  executions: number;
  sampled: number;
  extrapolated: boolean;
  /** Totals over all executions of the run (extrapolated from the sample when sampled < executions). */
  create: EventCounts;
  idle: EventCounts;
  historyLength: { mean: number; max: number };
  /** Failed or timed-out workflow tasks and activities by event type, in the sampled histories (not extrapolated). */
  failureTypes: Record<string, number>;
  /** Seconds after idleFrom of the last event inside the idle window (small: the tail of convergence; large: periodic work). */
  lastIdleEventSeconds: number;
}

const zero = (): EventCounts => ({ events: 0, workflowTasks: 0, activities: 0, localActivities: 0, signals: 0, timers: 0, starts: 0, upserts: 0, childStarts: 0, failures: 0, actions: 0 });

function add(c: EventCounts, type: number, markerName?: string | null): void {
  c.events++;
  switch (names[type]) {
    case 'MarkerRecorded': if (markerName === 'core_local_activity') c.localActivities++; break;
    case 'WorkflowExecutionStarted': c.starts++; break;
    case 'WorkflowTaskCompleted': c.workflowTasks++; break;
    case 'ActivityTaskScheduled': c.activities++; break;
    case 'TimerStarted': c.timers++; break;
    case 'WorkflowExecutionSignaled': c.signals++; break;
    case 'UpsertWorkflowSearchAttributes': c.upserts++; break;
    case 'StartChildWorkflowExecutionInitiated': c.childStarts++; break;
    case 'WorkflowTaskFailed': case 'WorkflowTaskTimedOut': case 'ActivityTaskFailed': case 'ActivityTaskTimedOut': c.failures++; break;
    default: break;
  }
}

/** A proto Timestamp or Duration in ms (seconds may be a Long). */
export function millis(t: { seconds?: unknown; nanos?: number | null } | null | undefined): number {
  if (!t) return 0;
  const s = t.seconds as number | { toNumber(): number } | string | null | undefined;
  const seconds = typeof s === 'object' && s !== null ? s.toNumber() : Number(s ?? 0);
  return seconds * 1000 + (t.nanos ?? 0) / 1e6;
}

function scale(c: EventCounts, f: number): EventCounts {
  const out = zero();
  for (const k of Object.keys(c) as (keyof EventCounts)[]) out[k] = c[k] * f;
  return out;
}

export function perApp(c: EventCounts, apps: number): EventCounts {
  return scale(c, 1 / apps);
}

/**
 * Lists every workflow execution of the task queue and counts the events of up to `sample` histories (evenly spread),
 * split at `idleFrom` / `idleTo` (ms since epoch): events before idleFrom belong to the create phase.
 */
export async function temporalCost(client: Client, taskQueue: string, window: { idleFrom: number; idleTo: number }, sample = 200, onProgress?: (done: number, total: number) => void): Promise<TemporalCost> {
  const executions: { workflowId: string; runId: string }[] = [];
  for await (const wf of client.workflow.list({ query: `TaskQueue = "${taskQueue}"` })) {
    if (wf.type !== 'applicationWorkflow') continue;
    executions.push({ workflowId: wf.workflowId, runId: wf.runId });
  }
  executions.sort((a, b) => a.workflowId.localeCompare(b.workflowId) || a.runId.localeCompare(b.runId));
  const step = Math.max(1, executions.length / sample);
  const picked: typeof executions = [];
  for (let i = 0; i < executions.length && picked.length < sample; i += step) picked.push(executions[Math.floor(i)]!);

  const create = zero();
  const idle = zero();
  const lengths: number[] = [];
  let lastIdle = window.idleFrom;
  const failureTypes: Record<string, number> = {};
  let done = 0;
  await pool(picked, 10, async (e) => {
    const history = await client.workflow.getHandle(e.workflowId, e.runId).fetchHistory();
    const events = history.events ?? [];
    lengths.push(events.length);
    for (const ev of events) {
      const at = millis(ev.eventTime);
      const type = Number(ev.eventType ?? 0);
      const n = names[type];
      if (n === 'WorkflowTaskFailed' || n === 'WorkflowTaskTimedOut' || n === 'ActivityTaskFailed' || n === 'ActivityTaskTimedOut') {
        const detail = ev.workflowTaskTimedOutEventAttributes?.timeoutType ?? ev.activityTaskTimedOutEventAttributes?.failure?.timeoutFailureInfo?.timeoutType
          ?? ev.workflowTaskFailedEventAttributes?.failure?.message ?? ev.activityTaskFailedEventAttributes?.failure?.message ?? '';
        const timeoutNames: Record<number, string> = { 1: 'start-to-close', 2: 'schedule-to-start', 3: 'schedule-to-close', 4: 'heartbeat' };
        const text = typeof detail === 'number' ? (timeoutNames[detail] ?? String(detail)) : String(detail).slice(0, 80);
        const key = `${n}${text !== '' ? ` (${text})` : ''}`;
        failureTypes[key] = (failureTypes[key] ?? 0) + 1;
      }
      const marker = ev.markerRecordedEventAttributes?.markerName;
      if (at < window.idleFrom) add(create, type, marker);
      else if (at <= window.idleTo) {
        add(idle, type, marker);
        lastIdle = Math.max(lastIdle, at);
      }
    }
    done++;
    if (onProgress && (done % 50 === 0 || done === picked.length)) onProgress(done, picked.length);
  });
  for (const c of [create, idle]) c.actions = c.starts + c.signals + c.activities + c.localActivities + c.timers;
  const f = picked.length ? executions.length / picked.length : 0;
  return {
    executions: executions.length,
    sampled: picked.length,
    extrapolated: picked.length < executions.length,
    create: scale(create, f),
    idle: scale(idle, f),
    failureTypes,
    lastIdleEventSeconds: (lastIdle - window.idleFrom) / 1000,
    historyLength: { mean: lengths.length ? lengths.reduce((a, b) => a + b, 0) / lengths.length : 0, max: Math.max(0, ...lengths) },
  };
}
