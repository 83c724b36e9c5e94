// The watcher's look at Temporal's side, every --sweep-seconds: Kubernetes events say when an Application changed,
// but nothing says when Temporal lost a workflow (a replaced database, a namespace recreated, someone terminating
// it), when a rollout's workflow closed without getting to tell its Application, or when an Application went while
// no watcher was watching (its finalizer removed by hand with the operator down): its workflow would wait forever,
// a rollout in flight with it. One count (and, only when it does not add up, or every tenth sweep, one listing) and
// one query of closed rollouts per sweep, whatever the number of Applications.
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

/** The Application or Release an id of theirs names (`application/<ns>/<name>`, `release/<ns>/<name>`); undefined for any other id. */
export function workflowObject(workflowId: string): { target: 'app' | 'release'; kind: 'Application' | 'Release'; namespace: string; name: string } | undefined {
  const [prefix, namespace, name, ...rest] = workflowId.split('/');
  if (!namespace || !name || rest.length > 0) return undefined;
  if (prefix === 'application') return { target: 'app', kind: 'Application', namespace, name };
  if (prefix === 'release') return { target: 'release', kind: 'Release', namespace, name };
  return undefined;
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

/**
 * Running workflow ids whose object the watcher does not know, found in two listings a sweep apart (`suspects` is
 * what the previous listing found): a deletion's own signal, in flight at the first look, has had a sweep to end it.
 * Returns the orphans and the suspects for the next listing.
 */
export function orphans(running: Iterable<string>, known: (workflowId: string) => boolean, suspects: ReadonlySet<string>): { orphans: string[]; suspects: Set<string> } {
  const found: string[] = [];
  const next = new Set<string>();
  for (const id of running) {
    if (known(id)) continue;
    if (suspects.has(id)) found.push(id);
    else next.add(id);
  }
  return { orphans: found, suspects: next };
}

/** What the watcher expects of one workflow type: the ids that must have a workflow running, and how many objects it knows. */
export interface Expected {
  /** Workflow ids of the objects seen a sweep ago and not being signalled: each must have a running workflow. */
  ids: string[];
  /** How many objects of the type the watcher knows in all: more running workflows than that means orphans. */
  known: number;
}

export interface SweepFindings {
  /** Workflow ids of Applications and Releases with no running workflow: the watcher starts them. */
  missing: string[];
  /**
   * Workflow ids of running Application and Release workflows whose object is gone (deleted while no watcher
   * watched): the watcher signals them, and each one's pass finds its object gone and ends it.
   */
  orphans: string[];
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
  /** Running workflows of each type whose object was unknown at the last listing (see `orphans`). */
  private readonly suspects = new Map<string, Set<string>>();
  private sweeps = 0;

  constructor(client: Client, taskQueue: string, now = new Date()) {
    this.client = client;
    this.taskQueue = taskQueue;
    // A rollout that closed before this process started was reported by the one before, or its Application's next
    // pass finds status stale: look back a little anyway.
    this.since = new Date(now.getTime() - 10 * 60_000);
  }

  /**
   * Compares the workflow ids the watcher expects (one per Application and Release it knows) with the running ones:
   * a count first, the listing only when the count does not add up (fewer running than expected, more than the
   * objects known, suspects to look at again) and every tenth sweep (a missing workflow and an orphan can cancel out
   * in a count). Without `known` (the watcher has not listed everything yet) nothing is taken for an orphan. Then
   * reports rollout runs that closed without finishing since the last sweep.
   */
  async sweep(expected: { applications: Expected; releases: Expected }, known?: (workflowId: string) => boolean): Promise<SweepFindings> {
    const found: SweepFindings = { missing: [], orphans: [], endedRollouts: 0 };
    const full = this.sweeps++ % 10 === 0;
    for (const [type, want] of [[applicationWorkflowType, expected.applications], [releaseWorkflowType, expected.releases]] as const) {
      const query = runningQuery(this.taskQueue, type);
      const suspects = this.suspects.get(type) ?? new Set<string>();
      // Nothing of the type known nor suspected: only the full look counts its workflows.
      if (want.known === 0 && suspects.size === 0 && !(full && known)) continue;
      const { count } = await this.client.workflow.count(query);
      const short = count < want.ids.length;
      const over = known !== undefined && (count > want.known || suspects.size > 0 || (full && count > 0));
      if (!short && !over) continue;
      const running = new Set<string>();
      for await (const wf of this.client.workflow.list({ query })) running.add(wf.workflowId);
      found.missing.push(...missing(want.ids, running));
      if (known) {
        const look = orphans(running, known, suspects);
        found.orphans.push(...look.orphans);
        this.suspects.set(type, look.suspects);
      }
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
