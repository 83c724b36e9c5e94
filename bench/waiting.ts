// The cost of waiting: canaries held for a while with the default settings, and the Temporal history events their
// workflows make per hour (every run of each, continue-as-new included), with the runs it took. One canary waits
// at an approval (health gates every 10 s), one also under a blind analysis (a query every 30 s that answers no
// data, so the analysis holds it): what a rollout waiting for a person over a weekend costs.
import { rolloutWorkflowId, applicationWorkflowId } from '../workflows/contract.ts';
import { appManifest, testNamespace, waitForObject, getApp, kube } from '../testkit/apps.ts';
import { startOperator } from '../testkit/operator.ts';
import type { Ctx } from './context.ts';
import { phase, progress } from './util.ts';

export interface WaitingResult {
  minutes: number;
  rollouts: { name: string; what: string; eventsPerHour: number; runs: number; appEventsPerHour: number }[];
}

const apply = (obj: unknown) => kube(['apply', '--server-side', '--field-manager=bench', '--force-conflicts', '-f', '-'], JSON.stringify(obj));

/** Every history event of every run of a workflow id, counted. */
async function eventsOf(ctx: Ctx, workflowId: string): Promise<{ events: number; runs: number }> {
  let events = 0;
  let runs = 0;
  for await (const wf of ctx.temporal.workflow.list({ query: `WorkflowId = '${workflowId}'` })) {
    events += (await ctx.temporal.workflow.getHandle(wf.workflowId, wf.runId).fetchHistory()).events?.length ?? 0;
    runs++;
  }
  return { events, runs };
}

export async function runWaiting(ctx: Ctx): Promise<WaitingResult> {
  const minutes = ctx.opts.waitingMinutes;
  const ns = await testNamespace('bench-waiting');
  ctx.cleanups.push(ns.cleanup);
  const op = await phase('an operator with its default settings', () => startOperator({
    namespaces: [ns.name], flags: ['--log-level=info', `--prometheus-address=${ctx.info.prometheusUrl}`],
  }));
  ctx.cleanups.push(() => op.stop());
  const canary = (extra: object) => ({ enabled: true, canaryVersion: 'v2', steps: [{ setWeight: 20 }, { pause: {} }], ...extra });
  const apps = [
    { name: 'approval', what: 'at an approval, health gates every 10 s', canary: canary({}) },
    {
      name: 'blind', what: 'at an approval under an analysis every 30 s that has no data (held)',
      canary: canary({ analysis: { metrics: [{ name: 'success', template: 'request-success-rate', thresholdRange: { min: 99 } }] } }),
    },
  ];
  await phase('the canaries waiting', async () => {
    for (const a of apps) await apply(appManifest(ns.name, a.name, { image: 'nginx:1.25', serviceMesh: { enabled: true, canary: a.canary } }));
    for (const a of apps) await waitForObject(`${a.name} waiting`, () => getApp(ns.name, a.name), (o) => o?.status?.canary?.phase === 'Paused' && o.status.canary.weight === 20, 180_000);
  });
  const before = await Promise.all(apps.map(async (a) => ({ rollout: await eventsOf(ctx, rolloutWorkflowId(ns.name, a.name)), app: await eventsOf(ctx, applicationWorkflowId(ns.name, a.name)) })));
  await phase(`waiting ${minutes} minute(s)`, () => new Promise((r) => setTimeout(r, minutes * 60_000)));
  const after = await Promise.all(apps.map(async (a) => ({ rollout: await eventsOf(ctx, rolloutWorkflowId(ns.name, a.name)), app: await eventsOf(ctx, applicationWorkflowId(ns.name, a.name)) })));
  const perHour = (n: number) => Math.round((n / minutes) * 60);
  const rollouts = apps.map((a, i) => ({
    name: a.name, what: a.what,
    eventsPerHour: perHour(after[i]!.rollout.events - before[i]!.rollout.events),
    runs: after[i]!.rollout.runs,
    appEventsPerHour: perHour(after[i]!.app.events - before[i]!.app.events),
  }));
  for (const r of rollouts) progress(`${r.name} (${r.what}): ${r.eventsPerHour} rollout events per hour (${r.runs} run(s) so far); its Application's workflow ${r.appEventsPerHour}`);
  return { minutes, rollouts };
}
