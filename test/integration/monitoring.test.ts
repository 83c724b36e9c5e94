// deploy/monitoring against the stack's real Prometheus scraping real operator processes: the rule file loads (as
// rule_files) and every rule evaluates; every dashboard panel and every rule parses and reads only metrics the
// operator exports; and alerts fire for what they are about: a watcher the API server refuses, a Failed
// Application, and, with the worker killed, a task queue nobody polls and a rollout stuck past its deadline; then
// resolve once the worker is back.
//
// The operator runs as a watcher process and a worker process on one task queue (--mode), so killing the worker
// leaves the watcher reporting the rollout it can no longer advance. The rules are loaded twice: as shipped, to
// prove Prometheus takes them and evaluates each without error, and in a copy with every `for` at 0s (nothing else
// changed), so that an alert fires within the test rather than minutes later.
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { mkdtemp, readFile, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { parse, stringify } from 'yaml';
import { eventually } from '../../lib/poll.ts';
import { addScrapeTarget, removeScrapeTarget, unreadyImage, type StackInfo } from '../../stack/stack.ts';
import { appManifest, applyAsUser, closeTemporal, kubeApi, temporalClient, testNamespace, waitForPhase, type Json } from '../../testkit/apps.ts';
import { waitCanaryPhase } from '../../testkit/canary.ts';
import { testEnv } from '../../testkit/env.ts';
import { startOperator, type OperatorProcess } from '../../testkit/operator.ts';
import { alerts, exportedNames, loadRules, metricNames, query, ruleGroups, unloadRules, type Alert } from '../../testkit/prometheus.ts';

const monitoringDir = new URL('../../deploy/monitoring/', import.meta.url);

interface RuleFile { groups: { name: string; rules: { alert: string; expr: string; for?: string; labels?: Record<string, string> }[] }[] }
interface Panel { id: number; type: string; title: string; targets?: { expr: string }[] }
interface Dashboard { panels: Panel[]; templating: { list: { name: string; type: string; query?: unknown }[] } }

/** Grafana's variables as a user with this job selected sees them (the panels use no others). */
const grafanaVariables = (job: string): Record<string, string> => ({ '$job': job, '$__rate_interval': '1m', '$__range': '1h' });
const substitute = (expr: string, vars: Record<string, string>) => Object.entries(vars).reduce((e, [k, v]) => e.replaceAll(k, v), expr);

/** A kubeconfig with the stack's cluster and a token the API server refuses: a watcher that can list nothing. */
async function refusedKubeconfig(kubeconfigPath: string): Promise<string> {
  const kc = parse(await readFile(kubeconfigPath, 'utf8')) as Json;
  kc.users = kc.users.map((u: Json) => ({ name: u.name, user: { token: 'refused' } }));
  const file = join(await mkdtemp(join(tmpdir(), 'monitoring-')), 'kubeconfig');
  await writeFile(file, stringify(kc), { mode: 0o600 });
  return file;
}

const hostOf = (op: OperatorProcess) => new URL(op.metricsUrl).host;

describe('dashboards and alerts, on the stack\'s Prometheus scraping a real operator', () => {
  // Unique per run, so runs sharing one stack never see each other's series or alerts.
  const job = `monitoring-${randomBytes(3).toString('hex')}`;
  const fastCopy = `${job}-for-0s`;
  let stack: StackInfo;
  let prometheusUrl: string;
  let ns: { name: string; cleanup: () => Promise<void> };
  let watcher: OperatorProcess;
  let worker: OperatorProcess;
  let blind: OperatorProcess;
  let rules: RuleFile;
  let dashboard: Dashboard;

  /** The alerts of the fast copy firing now whose labels include `labels`. */
  const firing = async (alertname: string, labels: Record<string, string>): Promise<Alert[]> =>
    (await alerts(prometheusUrl)).filter((a) => a.state === 'firing' && a.labels['rules_copy'] === 'for-0s' && a.labels['alertname'] === alertname
      && Object.entries(labels).every(([k, v]) => a.labels[k] === v));
  const waitFiring = (alertname: string, labels: Record<string, string>, timeoutMs = 60_000) =>
    eventually(`${alertname} firing for ${JSON.stringify(labels)}`, async () => ((await firing(alertname, labels)).length ? true : undefined), { timeoutMs, intervalMs: 500 });
  const waitResolved = (alertname: string, labels: Record<string, string>, timeoutMs = 60_000) =>
    eventually(`${alertname} resolved for ${JSON.stringify(labels)}`, async () => ((await firing(alertname, labels)).length ? undefined : true), { timeoutMs, intervalMs: 500 });
  /** The panel queries (with this job's variables) that have shown data at some point of the scenario. */
  const panelsWithData = new Set<string>();
  const panelQueries = () => dashboard.panels.filter((p) => p.type !== 'row')
    .flatMap((p) => (p.targets ?? []).map((t, i) => ({ key: `panel "${p.title}" query ${i + 1}`, expr: substitute(t.expr, grafanaVariables(job)) })));
  /** Notes which panels show data now: each series a panel reads appears at some moment (a failure, a rollout's end), not all at once. */
  const notePanelData = async () => {
    for (const q of panelQueries()) if ((await query(prometheusUrl, q.expr).catch(() => [])).length) panelsWithData.add(q.key);
  };
  /** Waits until Prometheus holds a sample of `promql` from this job. */
  const waitSeries = (promql: string, timeoutMs = 60_000) =>
    eventually(`Prometheus has ${promql}`, async () => ((await query(prometheusUrl, promql)).length ? true : undefined), { timeoutMs, intervalMs: 500 });

  before(async () => {
    const env = await testEnv();
    stack = env.stack ?? assert.fail('STACK_STATE_DIR is not set: scrape targets and rule files live in the stack\'s state folder; run with `npm test`');
    prometheusUrl = env.prometheusUrl;
    rules = parse(await readFile(new URL('prometheus-rules.yaml', monitoringDir), 'utf8')) as RuleFile;
    dashboard = JSON.parse(await readFile(new URL('grafana-dashboard.json', monitoringDir), 'utf8')) as Dashboard;
    ns = await testNamespace('monitoring');
    watcher = await startOperator({ namespaces: [ns.name], mode: 'watcher', logName: 'watcher' });
    worker = await startOperator({ namespaces: [ns.name], mode: 'worker', taskQueue: watcher.taskQueue, logName: 'worker' });
    blind = await startOperator({ namespaces: [ns.name], mode: 'watcher', kubeconfig: await refusedKubeconfig(env.kubeconfigPath), waitReady: false, logName: 'blind' });
    await addScrapeTarget(stack, { job, targets: [watcher, worker, blind].map(hostOf) });
  });

  after(async () => {
    for (const op of [worker, watcher, blind]) await op?.stop('SIGKILL');
    if (stack) {
      await removeScrapeTarget(stack, job);
      for (const name of [job, fastCopy]) await unloadRules(stack, name).catch(() => undefined);
    }
    if (ns) {
      // No operator is left to release the finalizers or to end the workflows: do both, then drop the namespace.
      const api = await kubeApi();
      for (const name of ['steady', 'rejected', 'paused', 'stuck']) {
        await api.mergePatch({ apiVersion: 'myapp.example.com/v1', kind: 'Application', namespace: ns.name, name }, { metadata: { finalizers: null } }).catch(() => null);
      }
      const client = await temporalClient();
      for await (const wf of client.workflow.list({ query: `TaskQueue = '${watcher?.taskQueue ?? ''}' AND ExecutionStatus = 'Running'` })) {
        await client.workflow.getHandle(wf.workflowId, wf.runId).terminate('monitoring test finished').catch(() => undefined);
      }
      await ns.cleanup();
    }
    await closeTemporal();
  });

  it('loads the rule file into Prometheus, which evaluates every rule without error, and refuses a broken one', async () => {
    const file = await readFile(new URL('prometheus-rules.yaml', monitoringDir), 'utf8');
    const loaded = await loadRules(stack, job, file);
    assert.deepEqual(loaded.flatMap((g) => g.rules.map((r) => r.name)), rules.groups.flatMap((g) => g.rules.map((r) => r.alert)));
    const copy = structuredClone(rules);
    for (const rule of copy.groups.flatMap((g) => g.rules)) Object.assign(rule, { for: '0s', labels: { ...rule.labels, rules_copy: 'for-0s' } });
    await loadRules(stack, fastCopy, stringify(copy));
    await eventually('every rule evaluated, without error', async () => {
      const evaluated = (await ruleGroups(prometheusUrl)).filter((g) => g.file.endsWith(`/${job}.yml`)).flatMap((g) => g.rules);
      const failed = evaluated.filter((r) => r.health === 'err');
      if (failed.length) throw new Error(failed.map((r) => `${r.name}: ${r.lastError ?? ''}`).join('; '));
      return evaluated.length > 0 && evaluated.every((r) => r.health === 'ok') ? true : undefined;
    }, { timeoutMs: 30_000 });
    // Control: a rule Prometheus cannot parse is refused at load, with the parser's message.
    await assert.rejects(loadRules(stack, `${job}-broken`, stringify({ groups: [{ name: 'broken', rules: [{ alert: 'Broken', expr: 'sum(rate(x[5m])' }] }] })), /parse error|unclosed/);
  });

  it('sees reconciles, a Failed Application and rollouts in a timed pause and progressing', async () => {
    const gates = { interval: '1s', failureThreshold: 3, initialDelay: '1s' };
    await applyAsUser(appManifest(ns.name, 'steady', { image: 'nginx:1.25', replicas: 1 }));
    // Passes the CRD's schema, not the Deployment's validation: only the API server can refuse it.
    await applyAsUser(appManifest(ns.name, 'rejected', { image: 'nginx:1.25', replicas: 1, env: [{ name: 'WHO', valueFrom: { fieldRef: { fieldPath: 'spec.bogus' } } }] }));
    await applyAsUser(appManifest(ns.name, 'paused', {
      image: 'nginx:1.25', replicas: 1,
      serviceMesh: { enabled: true, canary: { enabled: true, canaryVersion: 'v2', healthGates: gates, steps: [{ setWeight: 10 }, { pause: { duration: '10m' } }] } },
    }));
    await Promise.all([waitForPhase(ns.name, 'steady', 'Running'), waitForPhase(ns.name, 'rejected', 'Failed'), waitCanaryPhase(ns.name, 'paused', 'Paused')]);
    await waitSeries(`application_operator_application_failed{job="${job}", namespace="${ns.name}", name="rejected", reason="ApplyFailed"}`);
    await waitSeries(`application_operator_rollout_pause_end_timestamp_seconds{job="${job}", namespace="${ns.name}", name="paused"}`);
    await waitSeries(`application_operator_reconciliations_total{job="${job}", namespace="${ns.name}", name="steady", phase="Running"}`);
    // A pass the API server refuses fails as a local activity (reconcile passes run as local activities first).
    await waitSeries(`temporal_local_activity_execution_failed{job="${job}", activity_type="reconcileApplication"}`);
    await notePanelData();
  });

  it('fires for a watcher that cannot list and a Failed Application, and not for the healthy processes', async () => {
    await waitFiring('ApplicationOperatorWatcherNotSynced', { job, instance: hostOf(blind) });
    await waitFiring('ApplicationReconcileFailed', { namespace: ns.name, name: 'rejected', reason: 'ApplyFailed' });
    // The same rules, the same moment: the healthy watcher and the polling worker raise nothing.
    assert.deepEqual(await firing('ApplicationOperatorWatcherNotSynced', { instance: hostOf(watcher) }), []);
    assert.deepEqual(await firing('ApplicationOperatorNoWorkerPolling', { task_queue: worker.taskQueue }), []);
    assert.deepEqual(await firing('ApplicationOperatorNoWatcher', { job }), []);
    assert.deepEqual(await firing('ApplicationRolloutPastDeadline', { namespace: ns.name }), []);
    assert.deepEqual(await firing('ApplicationReconcileFailed', { namespace: ns.name, name: 'steady' }), []);
  });

  it('with the worker killed, fires for the task queue nobody polls and for a rollout stuck past its deadline, not for a paused one', async () => {
    // The canary never becomes ready, so the rollout waits at 0%; its 30 s deadline would roll it back, but the
    // worker that would do it is killed first.
    await applyAsUser(appManifest(ns.name, 'stuck', {
      image: 'nginx:1.25', replicas: 1,
      serviceMesh: { enabled: true, canary: { enabled: true, canaryVersion: 'v2', image: unreadyImage, weight: 20, progressDeadline: '30s', healthGates: { interval: '1s', failureThreshold: 3, initialDelay: '10m' } } },
    }));
    await waitCanaryPhase(ns.name, 'stuck', 'Progressing');
    await worker.stop('SIGKILL');
    await waitFiring('ApplicationOperatorNoWorkerPolling', { task_queue: worker.taskQueue });
    await waitFiring('ApplicationRolloutPastDeadline', { namespace: ns.name, name: 'stuck', version: 'v2', phase: 'Progressing' }, 90_000);
    assert.deepEqual(await firing('ApplicationRolloutPastDeadline', { namespace: ns.name, name: 'paused' }), [], 'time in a pause does not count against the deadline');
    await notePanelData();
  });

  it('with the worker back, the stuck rollout rolls itself back and both alerts resolve', async () => {
    await worker.restart();
    const app = await waitCanaryPhase(ns.name, 'stuck', 'RolledBack', 120_000);
    assert.equal(app.status.canary.reason, 'ProgressDeadlineExceeded');
    await waitResolved('ApplicationOperatorNoWorkerPolling', { task_queue: worker.taskQueue });
    await waitResolved('ApplicationRolloutPastDeadline', { namespace: ns.name, name: 'stuck' });
    // The counter had a series at 0 from the start, so its first rollback is an increase the dashboard shows.
    await waitSeries(`sum(increase(application_operator_rollouts_total{job="${job}", outcome="RolledBack"}[10m])) > 0.5`);
    await notePanelData();
  });

  it('every dashboard panel and every rule parses and reads only metrics the operator exports; every panel has shown data', async () => {
    const panels = dashboard.panels.filter((p) => p.type !== 'row');
    assert.ok(panels.length >= 20, `the dashboard has only ${panels.length} panels`);
    const expressions = [
      ...panelQueries().map((q) => ({ where: q.key, expr: q.expr })),
      ...rules.groups.flatMap((g) => g.rules.map((r) => ({ where: `alert ${r.alert}`, expr: r.expr }))),
    ];
    assert.deepEqual(panels.filter((p) => !p.targets?.length).map((p) => p.title), [], 'panels without a query');
    // A variable's query names a metric too.
    const variableMetrics = dashboard.templating.list.flatMap((v) => (typeof v.query === 'string' ? [...v.query.matchAll(/label_values\((\w+),/g)].map((m) => m[1]!) : []));
    assert.ok(variableMetrics.length > 0, 'the job variable reads a metric');

    const exported = await exportedNames(prometheusUrl, `{job="${job}"}`);
    // The SDK creates its activity failure counter at the first failed attempt. Reconcile passes run as local
    // activities (whose failures this run has), and no rollout activity fails here, so the counter of activities
    // proper stands on its sibling from the same worker.
    const activityWorker = [...exported].some((n) => n.startsWith('temporal_activity_execution_latency'));
    if (activityWorker && exported.has('temporal_local_activity_execution_failed')) exported.add('temporal_activity_execution_failed');
    const problems: string[] = [];
    for (const e of expressions) {
      assert.doesNotMatch(e.expr, /\$/, `${e.where} uses a variable this test does not know`);
      try {
        const missing = (await metricNames(prometheusUrl, e.expr)).filter((n) => !exported.has(n));
        if (missing.length) problems.push(`${e.where} reads ${missing.join(', ')}, which the operator does not export`);
        await query(prometheusUrl, e.expr);
      } catch (err) {
        problems.push(`${e.where}: ${(err as Error).message}`);
      }
    }
    for (const m of variableMetrics) if (!exported.has(m)) problems.push(`the dashboard's variables read ${m}, which the operator does not export`);
    await notePanelData();
    for (const q of panelQueries()) if (!panelsWithData.has(q.key)) problems.push(`${q.key} never showed data: ${q.expr}`);
    assert.deepEqual(problems, []);

    // Controls: the same checks catch a misspelled metric and a parse error.
    assert.deepEqual((await metricNames(prometheusUrl, 'rate(application_operator_reconcilations_total[5m])')).filter((n) => !exported.has(n)), ['application_operator_reconcilations_total']);
    await assert.rejects(metricNames(prometheusUrl, 'sum by (phase (application_operator_applications)'), /parse error/);
  });
});
