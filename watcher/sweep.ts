// The watcher's look at Temporal's side, every --sweep-seconds: Kubernetes events say when an Application changed,
// but nothing says when Temporal lost a workflow (a replaced database, a namespace recreated, someone terminating
// it) or when a rollout's workflow closed without getting to tell its Application. One count (and, only when it does
// not add up, one listing) and one query of closed rollouts per sweep, whatever the number of Applications.
import type { Client, WorkflowExecutionInfo } from '@temporalio/client';
import { RolloutPhase } from '../api/constants.ts';
import { applicationWorkflowId, applicationWorkflowType, releaseWorkflowType, rolloutEndedSignal, rolloutWorkflowTypes, type RolloutEnded } from '../workflows/contract.ts';

/** A visibility query's string literal. */
function literal(s: string): string {
  return `'${s.replace(/\\/g, '\\\\').replace(/'/g, "\\'")}'`;
}

/** Running workflows of a type on the operator's task queue. */
export function runningQuery(taskQueue: string, workflowType: string): string {
  return `TaskQueue = ${literal(taskQueue)} AND WorkflowType = ${literal(workflowType)} AND ExecutionStatus = 'Running'`;
}

/** Rollout runs on the task queue that closed without finishing (terminated, timed out, failed) since `since`. */
export function endedRolloutsQuery(taskQueue: string, since: Date): string {
  return `TaskQueue = ${literal(taskQueue)} AND WorkflowType IN (${Object.values(rolloutWorkflowTypes).map(literal).join(', ')}) AND ExecutionStatus IN ('Terminated', 'TimedOut', 'Failed') AND CloseTime > ${literal(since.toISOString())}`;
}

/** The workflow ids `expected` names that are not among `running`. */
export function missing(expected: Iterable<string>, running: ReadonlySet<string>): string[] {
  return [...expected].filter((id) => !running.has(id));
}

const statusWords: Record<string, string> = { TERMINATED: 'Terminated', TIMED_OUT: 'TimedOut', FAILED: 'Failed' };

/**
 * What to tell an Application's workflow about a rollout run that closed without finishing: its id (the rollout's
 * is `<application workflow id>/canary`) and the signal. Null for anything else.
 */
export function endedRolloutReport(e: Pick<WorkflowExecutionInfo, 'workflowId' | 'status' | 'closeTime'>): { workflowId: string; signal: RolloutEnded } | null {
  const m = /^application\/([^/]+)\/([^/]+)\/canary$/.exec(e.workflowId);
  const abnormal = statusWords[e.status.name];
  if (!m || !abnormal) return null;
  const what = { Terminated: 'was terminated', TimedOut: 'timed out', Failed: 'failed' }[abnormal];
  return {
    workflowId: applicationWorkflowId(m[1]!, m[2]!),
    signal: {
      phase: RolloutPhase.RolledBack, abnormal, message: `the rollout's workflow ${what}`,
      ...(e.closeTime ? { closedAt: e.closeTime.toISOString() } : {}),
    },
  };
}

export interface SweepFindings {
  /** Workflow ids of Applications and Releases with no running workflow: the watcher starts them. */
  missing: string[];
  /** Application workflows told that their rollout's workflow closed without finishing. */
  endedRollouts: number;
}

/** One sweep's I/O against Temporal. */
export class Sweeper {
  private readonly client: Client;
  private readonly taskQueue: string;
  /** Closed rollout runs already reported (run id -> close time), so each is reported once. */
  private readonly reported = new Map<string, number>();
  private since: Date;

  constructor(client: Client, taskQueue: string, now = new Date()) {
    this.client = client;
    this.taskQueue = taskQueue;
    // A rollout that closed before this process started was reported by the one before, or its Application's next
    // pass finds status stale: look back a little anyway.
    this.since = new Date(now.getTime() - 10 * 60_000);
  }

  /**
   * Compares the workflow ids the watcher expects (one per Application and Release it knows) with the running ones:
   * a count first, the listing only when the count falls short. Then reports rollout runs that closed without
   * finishing since the last sweep.
   */
  async sweep(expected: { applications: string[]; releases: string[] }): Promise<SweepFindings> {
    const found: SweepFindings = { missing: [], endedRollouts: 0 };
    for (const [type, ids] of [[applicationWorkflowType, expected.applications], [releaseWorkflowType, expected.releases]] as const) {
      if (ids.length === 0) continue;
      const query = runningQuery(this.taskQueue, type);
      const { count } = await this.client.workflow.count(query);
      if (count >= ids.length) continue;
      const running = new Set<string>();
      for await (const wf of this.client.workflow.list({ query })) running.add(wf.workflowId);
      found.missing.push(...missing(ids, running));
    }
    const started = new Date();
    for await (const wf of this.client.workflow.list({ query: endedRolloutsQuery(this.taskQueue, this.since) })) {
      if (this.reported.has(wf.runId)) continue;
      const report = endedRolloutReport(wf);
      if (!report) continue;
      await this.client.workflow.getHandle(report.workflowId).signal(rolloutEndedSignal, report.signal).catch(() => undefined);
      this.reported.set(wf.runId, wf.closeTime?.getTime() ?? Date.now());
      found.endedRollouts++;
    }
    // Overlapping windows: visibility may show a close a moment late. Forget what is older than the window.
    this.since = new Date(started.getTime() - 5 * 60_000);
    for (const [run, at] of this.reported) if (at < this.since.getTime()) this.reported.delete(run);
    return found;
  }
}
