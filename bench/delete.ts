// The delete scenario: N Applications converged by one operator process in one namespace (bench/operator-run.ts),
// then the namespace deleted and timed until the API server no longer has it: every Application's finalizer released
// by its workflow, every child gone. Compared with the floor's namespace (the same rendered children applied with
// no operator and no finalizers) deleted the same way; then the Application workflows still running are counted,
// since a workflow that outlives its Application is a leak.
import { deleteNamespace, type NamespaceDeletion } from './apps.ts';
import type { Ctx } from './context.ts';
import type { LiveRun } from './operator-run.ts';
import { probeByVerb, sumProbes, type ProbeCounts } from './operators.ts';
import { counterDelta } from './apiserver.ts';
import { phase, progress } from './util.ts';
import { setTimeout as sleep } from 'node:timers/promises';

/** How long the running workflows may take to reach 0 after the namespace is gone (they end after the last finalizer). */
const SETTLE_MS = 120_000;

export interface DeleteResult {
  apps: number;
  operator: NamespaceDeletion & {
    operatorByVerb: Record<string, number>;
    operatorByResource: ProbeCounts;
    /** Workflows of the run's task queue still running when the namespace was gone, and after up to SETTLE_MS more. */
    runningAtGone: number;
    runningAfter: number;
    /** Seconds after the namespace was gone at which runningAfter was counted. */
    settleSeconds: number;
    /** A few of the workflows left running. */
    leftRunning: string[];
  };
  floor: NamespaceDeletion | null;
  /** Operator delete time / floor delete time. */
  ratio: number | null;
}

/** Workflows of the task queue still running, and a few of their ids. */
async function running(ctx: Ctx, taskQueue: string): Promise<{ count: number; ids: string[] }> {
  const query = `TaskQueue = "${taskQueue}" AND ExecutionStatus = "Running"`;
  const { count } = await ctx.temporal.workflow.count(query);
  const ids: string[] = [];
  if (count > 0) {
    for await (const wf of ctx.temporal.workflow.list({ query })) {
      ids.push(wf.workflowId);
      if (ids.length >= 5) break;
    }
  }
  return { count, ids };
}

/** Deletes the converged run's namespace with its operator running, and counts what is left in Temporal. */
export async function runDelete(ctx: Ctx, live: LiveRun, floor: NamespaceDeletion | null): Promise<DeleteResult> {
  const p0 = sumProbes(await live.ops.probeCounts());
  const deletion = await phase(`delete: delete namespace ${live.namespace} (${live.names.length} Applications, operator running) until it is gone`, () => deleteNamespace(ctx, live.namespace));
  const atGone = await running(ctx, live.taskQueue);
  const t0 = Date.now();
  let after = atGone;
  while (after.count > 0 && Date.now() - t0 < SETTLE_MS) {
    await sleep(1000);
    after = await running(ctx, live.taskQueue);
  }
  const probe = counterDelta(sumProbes(await live.ops.probeCounts()), p0);
  const ratio = floor?.seconds && deletion.seconds !== null ? deletion.seconds / floor.seconds : null;
  progress(`  namespace gone in ${deletion.seconds?.toFixed(1) ?? 'never'} s${ratio ? ` (${ratio.toFixed(2)}x the floor's ${floor!.seconds!.toFixed(1)} s)` : ''}; workflows running: ${atGone.count} when it was gone, ${after.count} ${((Date.now() - t0) / 1000).toFixed(0)} s later`);
  return {
    apps: live.names.length,
    operator: {
      ...deletion, operatorByVerb: probeByVerb(probe), operatorByResource: probe,
      runningAtGone: atGone.count, runningAfter: after.count, settleSeconds: (Date.now() - t0) / 1000, leftRunning: after.ids,
    },
    floor,
    ratio,
  };
}
