// Rollouts that wait longer than Temporal would keep one history, end to end: a Temporal dev server of this file's own
// with its history limits lowered (terminate at 400 events, suggest continue-as-new at 80), so that minutes here are
// days in production. A canary waits at an approval through several runs and is promoted; another is aborted; one
// whose workflow is terminated by hand is rolled back by its Application's workflow and status says so. Then a
// Temporal whose database is replaced mid-rollout: the operator notices, and the rollout is taken up from status.
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { WorkflowNotFoundError, type Client } from '@temporalio/client';
import { control } from '../../client/control.ts';
import { rolloutHistory } from '../../client/history.ts';
import { eventually } from '../../lib/poll.ts';
import { applicationWorkflowId, controlSignals, rolloutWorkflowId } from '../../workflows/contract.ts';
import { appManifest, eventsOf, getApp, getDeployment, kube, testNamespace, waitForObject, waitForPhase, type Json } from '../../testkit/apps.ts';
import { assertPromoted, assertSteadyState, virtualService, waitCanaryPhase, waitWeights } from '../../testkit/canary.ts';
import { startOperator, testFlags, type OperatorProcess } from '../../testkit/operator.ts';
import { recordRoutes } from '../../testkit/routes.ts';
import { startTemporal, type OwnTemporal } from '../../testkit/temporal-ui.ts';
import { readRouteWeights } from '../../render/istio.ts';

const apply = (obj: Json) => kube(['apply', '--server-side', '--field-manager=test-user', '--force-conflicts', '-f', '-'], JSON.stringify(obj));
const approval = (ns: string, name: string, version: string, replicas = 2) => appManifest(ns, name, {
  image: 'nginx:1.25', replicas,
  serviceMesh: { enabled: true, canary: { enabled: true, canaryVersion: version, steps: [{ setWeight: 20 }, { pause: {} }], healthGates: { interval: '1s', initialDelay: '2s' } } },
});
const count = async (client: Client, query: string) => (await client.workflow.count(query)).count;
const runsOf = (client: Client, workflowId: string) => count(client, `WorkflowId = '${workflowId}'`);

/** One namespace and one operator on a Temporal of the suite's own; everything is stopped after it. */
function ownTemporalSuite(prefix: string, dynamicConfig: Record<string, number>, flags: string[] = []) {
  const s = {} as { ns: string; temporal: OwnTemporal; op: OperatorProcess; client: Client; cleanup: () => Promise<void> };
  before(async () => {
    s.temporal = await startTemporal({ dynamicConfig });
    const ns = await testNamespace(prefix);
    s.ns = ns.name;
    s.cleanup = ns.cleanup;
    s.op = await startOperator({ namespaces: [s.ns], temporalAddress: s.temporal.address, flags: [...testFlags, ...flags] });
    s.client = await s.temporal.client();
  });
  after(async () => {
    await s.op?.stop();
    await s.cleanup?.();
    await s.temporal?.stop();
  });
  return s;
}

describe('rollouts that outlive the history limit (a Temporal that terminates workflows at 400 events)', () => {
  const s = ownTemporalSuite('long', { 'limit.historyCount.error': 400, 'limit.historyCount.warn': 200, 'limit.historyCount.suggestContinueAsNew': 80 }, ['--sweep-seconds=3']);

  it('a canary waits at an approval through several runs (its Application\'s workflow too), then a promote sent to the Application passes it', async () => {
    await apply(approval(s.ns, 'wait', 'v2'));
    await waitWeights(s.ns, 'wait', 20, 120_000);
    await waitCanaryPhase(s.ns, 'wait', 'Paused');
    await eventually('the rollout continued as new 3 times', async () => ((await runsOf(s.client, rolloutWorkflowId(s.ns, 'wait'))) >= 4 ? true : undefined), { timeoutMs: 240_000, intervalMs: 1000 });
    // Spec changes make the Application's workflow pass and grow its history past the suggestion, rollout in flight.
    for (let i = 0; i < 12 && (await runsOf(s.client, applicationWorkflowId(s.ns, 'wait'))) < 2; i++) {
      await kube(['-n', s.ns, 'scale', 'application', 'wait', `--replicas=${2 + (i % 2)}`]);
      await waitForPhase(s.ns, 'wait', 'Running').catch(() => undefined);
    }
    assert.ok(await runsOf(s.client, applicationWorkflowId(s.ns, 'wait')) >= 2, 'the Application\'s workflow continued as new with the rollout in flight');
    const app = await getApp(s.ns, 'wait');
    assert.equal(app!.status.canary.phase, 'Paused');
    assert.equal(app!.status.canary.weight, 20);
    assert.equal(app!.status.canary.step, 1);
    assert.equal(await count(s.client, `WorkflowId = '${rolloutWorkflowId(s.ns, 'wait')}' AND ExecutionStatus = 'Terminated'`), 0, 'no run was terminated');
    const reasons = (await eventsOf(s.ns, app!.metadata.uid)).map((e) => e.reason);
    assert.equal(reasons.filter((r) => r === 'CanaryPaused').length, 1, `paused once, not once per run: ${reasons.join(', ')}`);

    await s.client.workflow.getHandle(applicationWorkflowId(s.ns, 'wait')).signal(controlSignals.promote, { by: 'morning-shift' });
    await assertPromoted(s.ns, 'wait', 'nginx:v2');
    const [story] = await eventually('the history of the rollout', async () => {
      const h = await rolloutHistory(s.client, s.ns, 'wait');
      return h[0]?.outcome ? h : undefined;
    }, { timeoutMs: 30_000 });
    assert.equal(story!.outcome?.phase, 'Promoted');
    assert.ok((story!.runs ?? 1) >= 4, `one rollout told over its ${story!.runs ?? 1} runs`);
    assert.ok(story!.entries.some((e) => e.kind === 'control' && /promote by morning-shift/.test(e.text)));
  });

  it('another waits through several runs and is aborted: all traffic back on stable', async () => {
    await apply(approval(s.ns, 'stop', 'v3'));
    await waitWeights(s.ns, 'stop', 20, 120_000);
    await eventually('the rollout continued as new twice', async () => ((await runsOf(s.client, rolloutWorkflowId(s.ns, 'stop'))) >= 3 ? true : undefined), { timeoutMs: 240_000, intervalMs: 1000 });
    const outcome = await control(s.client, 'abort', s.ns, 'stop', 'not today');
    assert.equal(outcome.accepted, true);
    const app = await waitCanaryPhase(s.ns, 'stop', 'Aborted');
    assert.match(app.status.canary.message, /aborted by .*: not today/);
    await assertSteadyState(s.ns, 'stop');
  });

  it('a rollout whose workflow is terminated by hand (after its Application\'s workflow moved on) is rolled back at once, and every place says so', async () => {
    await apply(approval(s.ns, 'cut', 'v4'));
    await waitWeights(s.ns, 'cut', 20, 120_000);
    for (let i = 0; i < 12 && (await runsOf(s.client, applicationWorkflowId(s.ns, 'cut'))) < 2; i++) {
      await kube(['-n', s.ns, 'scale', 'application', 'cut', `--replicas=${2 + (i % 2)}`]);
      await waitForPhase(s.ns, 'cut', 'Running').catch(() => undefined);
    }
    assert.ok(await runsOf(s.client, applicationWorkflowId(s.ns, 'cut')) >= 2, 'the Application\'s workflow no longer has the rollout as its own child');
    await s.client.workflow.getHandle(rolloutWorkflowId(s.ns, 'cut')).terminate('someone cleaning up');
    // The sweep (every 3 s here) tells the Application's workflow; it moves traffic back, then says so.
    const app = await waitCanaryPhase(s.ns, 'cut', 'RolledBack', 60_000);
    assert.equal(app.status.canary.reason, 'RolloutTerminated');
    assert.match(app.status.canary.message, /the rollout's workflow was terminated.*moved all traffic to stable and removed the canary/);
    assert.equal(app.status.canary.weight, 0);
    const cond = app.status.conditions.find((c: Json) => c.type === 'CanaryProgressing');
    assert.deepEqual([cond?.status, cond?.reason], ['False', 'RolloutTerminated']);
    await assertSteadyState(s.ns, 'cut');
    const events = await eventsOf(s.ns, app.metadata.uid);
    assert.ok(events.some((e) => e.reason === 'RolloutTerminated' && e.type === 'Warning' && /canary v4/.test(e.note)), 'a Warning Event');
    await assert.rejects(control(s.client, 'promote', s.ns, 'cut'), /promote rejected: the rollout of v4 is already RolledBack: its workflow was terminated \(someone cleaning up\)/);
    await new Promise((r) => setTimeout(r, 2000));
    assert.equal((await getDeployment(s.ns, 'cut-canary')), null, 'not started again');
  });
});

describe('Temporal\'s state lost mid-rollout (its database replaced by an empty one)', () => {
  const s = ownTemporalSuite('lost', {}, ['--sweep-seconds=3']);

  it('the operator notices within a sweep, starts the Application\'s workflow again, and the rollout is taken up from status', async (t) => {
    await apply(approval(s.ns, 'amnesia', 'v2'));
    await waitWeights(s.ns, 'amnesia', 20, 120_000);
    await waitCanaryPhase(s.ns, 'amnesia', 'Paused');
    const routes = recordRoutes(s.ns);
    // A failing assertion must not leave the recorder polling (it would keep the test process alive).
    t.after(() => routes.stop());
    const before = await s.temporal.client();
    const lost = [applicationWorkflowId(s.ns, 'amnesia'), rolloutWorkflowId(s.ns, 'amnesia')];
    const runIds = await Promise.all(lost.map(async (id) => (await before.workflow.getHandle(id).describe()).runId));
    await s.temporal.restart({ emptyDatabase: true });
    const client = await s.temporal.client();
    // The runs that were there are gone (the operator may already have started new ones: its sweep is 3 s).
    for (const [i, id] of lost.entries()) {
      await assert.rejects(client.workflow.getHandle(id, runIds[i]).describe(), WorkflowNotFoundError, `Temporal remembers nothing of ${id}`);
    }
    await eventually('the Application\'s workflow running again', async () => ((await count(client, `WorkflowId = '${applicationWorkflowId(s.ns, 'amnesia')}' AND ExecutionStatus = 'Running'`)) >= 1 ? true : undefined), { timeoutMs: 60_000, intervalMs: 500 });
    // Status says "taken up again" only until the step it was taken up at says what it waits for (a moment later):
    // the Event stays.
    const uid = (await getApp(s.ns, 'amnesia'))!.metadata.uid;
    const recovered = await eventually('an Event says the rollout was taken up again', async () =>
      (await eventsOf(s.ns, uid)).find((e) => e.reason === 'RolloutRecovered' && e.type === 'Warning'), { timeoutMs: 60_000, intervalMs: 500 });
    assert.match(recovered.note, /taken up again at step 2\/2/);
    const app = await waitForObject('paused again at the step status said', () => getApp(s.ns, 'amnesia'), (a) => a?.status?.canary?.phase === 'Paused', 30_000);
    assert.equal(app!.status.canary.step, 1, 'at the step status said, not from the start');
    assert.equal(readRouteWeights(await virtualService(s.ns, 'amnesia'))?.canary, 20, 'traffic stayed where it was');
    const record = await routes.stop();
    assert.deepEqual(record.violations, []);
    assert.ok((await s.op.logs()).includes('no workflow runs for Application'), 'the operator\'s log says what it noticed');
    await control(client, 'promote', s.ns, 'amnesia');
    await assertPromoted(s.ns, 'amnesia', 'nginx:v2');
  });
});
