// Traces end to end: an operator with tracing on (OTLP to the stack's Jaeger), a create and a canary step, and the
// traces read back from Jaeger's query API: spans of the operator (the watcher's signal, the pass, its API requests),
// of Temporal's interceptors (the workflow's start or signal handling, the activity), and of the API server and etcd, which
// the request's traceparent joined to the trace. The trace id is on the operator's log lines, in the history and in
// the workflow's current details; `npm run stack -- trace <app>` prints the tree.
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { readFile } from 'node:fs/promises';
import { join, resolve } from 'node:path';
import { describe, it } from 'node:test';
import { promisify } from 'node:util';
import { applicationWorkflowId } from '../../workflows/contract.ts';
import { appManifest, kube, temporalClient, waitForPhase, type Json } from '../../testkit/apps.ts';
import { waitCanaryPhase } from '../../testkit/canary.ts';
import { eventually } from '../../lib/poll.ts';
import { operatorSuite } from '../../testkit/suite.ts';
import { findTraces, getTrace, linkedTraces, type JaegerTrace } from '../../stack/trace-tree.ts';

const root = resolve(import.meta.dirname, '..', '..');

function jaeger(): { otlp: string; query: string } {
  const otlp = process.env['JAEGER_OTLP_URL'];
  const query = process.env['JAEGER_QUERY_URL'];
  if (!otlp || !query) throw new Error('JAEGER_OTLP_URL and JAEGER_QUERY_URL are not set: the tracing tests need the run\'s stack with its trace backend (npm test starts one; a reused stack needs `up --tracing`)');
  return { otlp, query };
}

const apply = (obj: Json) => kube(['apply', '--server-side', '--field-manager=test-user', '--force-conflicts', '-f', '-'], JSON.stringify(obj));
const services = (t: JaegerTrace, more: JaegerTrace[] = []) => new Set([t, ...more].flatMap((x) => x.spans.map((s) => x.processes[s.processID]?.serviceName ?? '?')));
const names = (t: JaegerTrace) => t.spans.map((s) => s.operationName);

describe('tracing', () => {
  const s = operatorSuite('tracing', {
    operator: { extraEnv: { OTEL_EXPORTER_OTLP_ENDPOINT: jaeger().otlp, OTEL_SERVICE_NAME: 'application-operator' }, logName: 'tracing', readyTimeoutMs: 180_000 },
  });

  /** The newest trace of the app whose spans satisfy `ok` (exported in batches: looked for until it is whole). */
  const traceOf = (app: string, what: string, ok: (t: JaegerTrace, linked: JaegerTrace[]) => boolean) => eventually(what, async () => {
    const found = await findTraces(jaeger().query, { service: 'application-operator', tags: { 'app.namespace': s.ns, 'app.name': app }, limit: 50 });
    for (const t of found) {
      const whole = await getTrace(jaeger().query, t.traceID);
      if (!whole) continue;
      const linked = await linkedTraces(jaeger().query, whole);
      if (ok(whole, linked)) return { trace: whole, linked };
    }
    return undefined;
  }, { timeoutMs: 60_000, intervalMs: 1000 });

  it('a create is one trace: the watcher\'s signal, the workflow, the pass, its API requests, and the API server\'s and etcd\'s spans', async () => {
    await apply(appManifest(s.ns, 'traced', { image: 'nginx:1.25', replicas: 1, serviceMesh: { enabled: true } }));
    await waitForPhase(s.ns, 'traced', 'Running');
    const { trace, linked } = await traceOf('traced', 'a trace of the create with every service', (t, l) => {
      const n = names(t);
      return n.some((x) => x.startsWith('signal spec: Application')) && n.some((x) => x.startsWith('reconcile pass')) && n.some((x) => /^PATCH \/apis\/apps\/v1\/namespaces\/.*\/deployments\/traced/.test(x))
        && services(t, l).has('apiserver') && services(t, l).has('etcd');
    });
    const seen = services(trace, linked);
    assert.ok(seen.has('application-operator'), [...seen].join(', '));
    assert.ok(seen.has('apiserver'), `the API server's spans joined the trace: ${[...seen].join(', ')}`);
    // Temporal's interceptors: the watcher started the workflow (a new Application's is a plain start, its change in
    // the input, no signal), which scheduled and ran the activity inside the same trace (the workflow's own span ends,
    // and is exported, only when the workflow does).
    assert.ok(names(trace).some((n) => n.startsWith('StartWorkflow:applicationWorkflow')), names(trace).join(' | '));
    assert.ok(names(trace).some((n) => n.startsWith('StartActivity:reconcileApplication')), names(trace).join(' | '));
    assert.ok(names(trace).some((n) => n.startsWith('RunActivity:reconcileApplication')), names(trace).join(' | '));
    // etcd's spans are the API server's children (etcd continues the context the API server sends it); etcd exports
    // in its own batches, so the trace is looked for until they are in.
    assert.ok(seen.has('etcd'), `etcd's spans joined too: ${[...seen].join(', ')}`);

    // The trace id is on the pass's log lines and in the workflow's current details (the Temporal UI's).
    const log = await readFile(s.op.logFile, 'utf8');
    assert.ok(log.split('\n').some((l) => l.includes(`"traceId":"${trace.traceID}"`)), 'a log line of the pass carries its trace id');
    const handle = (await temporalClient()).workflow.getHandle(applicationWorkflowId(s.ns, 'traced'));
    const details = await eventually('current details name a pass\'s trace', async () => {
      const meta = await handle.query<{ currentDetails?: string }>('__temporal_workflow_metadata');
      return /last pass's trace: [0-9a-f]{32}/.test(meta.currentDetails ?? '') ? meta.currentDetails : undefined;
    }, { timeoutMs: 10_000 });
    assert.match(details ?? '', /last pass's trace: [0-9a-f]{32}/);

    // The stack's CLI prints the tree: its newest trace of the app (the pass the Deployment's status woke, whose
    // API-server spans may still be in that server's export batch) ...
    const cli = (...args: string[]) => promisify(execFile)(process.execPath, [join(root, 'stack', 'cli.ts'), '--state-dir', process.env['STACK_STATE_DIR'] ?? '', 'trace', ...args], { cwd: root });
    assert.match((await cli('traced', '-n', s.ns)).stdout, /^trace [0-9a-f]{32}\n/);
    // ... or the one asked for, here the create's, known to be whole.
    const { stdout: tree } = await cli('traced', '-n', s.ns, '--trace-id', trace.traceID);
    assert.match(tree, new RegExp(`^trace ${trace.traceID}\n`));
    assert.match(tree, /signal .*Application .*\[application-operator\]/);
    assert.match(tree, /\n +\+[\d.]+ m?s +[\d.]+ m?s +\s+reconcile pass .*\[application-operator\]/);
    assert.match(tree, /\[apiserver\]/);
  });

  it('a canary step is a trace of its own: its gate checks and routes, down to the API server', async () => {
    await apply(appManifest(s.ns, 'stepped', { image: 'nginx:1.25', replicas: 1, serviceMesh: { enabled: true } }));
    await waitForPhase(s.ns, 'stepped', 'Running');
    await apply(appManifest(s.ns, 'stepped', {
      image: 'nginx:1.25', replicas: 1,
      serviceMesh: { enabled: true, canary: { enabled: true, canaryVersion: 'v2', healthGates: { interval: '1s', initialDelay: '1s' }, steps: [{ setWeight: 20 }, { pause: {} }] } },
    }));
    await waitCanaryPhase(s.ns, 'stepped', 'Paused');
    const { trace, linked } = await traceOf('stepped', 'a trace of step 1 with the API server\'s spans', (t, l) => names(t).some((n) => /^rollout v2 of .*: step 1\/2: set canary weight to 20%$/.test(n))
      && names(t).some((n) => n.startsWith('RunActivity:setCanaryRoute')) && services(t, l).has('apiserver'));
    assert.ok(names(trace).some((n) => /^PATCH \/apis\/networking\.istio\.io\/.*\/virtualservices\/stepped/.test(n)), names(trace).join(' | '));
    assert.ok(services(trace, linked).has('apiserver'));
    // The workflow's own log lines of that step carry its trace id too.
    const log = await readFile(s.op.logFile, 'utf8');
    assert.ok(log.split('\n').some((l) => l.includes('"module":"temporal-sdk"') && l.includes(`"traceId":"${trace.traceID}"`)), 'a workflow log line of the step carries its trace id');
    const { stdout: tree } = await promisify(execFile)(process.execPath, [join(root, 'stack', 'cli.ts'), '--state-dir', process.env['STACK_STATE_DIR'] ?? '', 'trace', 'stepped', '-n', s.ns, '--step'], { cwd: root });
    assert.match(tree, /rollout v2 of .*: step \d\/2/);
    // The history names the trace of the step that set each route.
    const { stdout: history } = await promisify(execFile)(process.execPath, [
      join(root, 'bin', 'application-operator.ts'), 'history', 'stepped', '-n', s.ns, `--kubeconfig=${process.env['KUBECONFIG']}`, `--temporal-address=${process.env['TEMPORAL_ADDRESS']}`,
    ], { cwd: root });
    assert.match(history, new RegExp(`20% .*\\(trace ${trace.traceID}\\)`), history);
  });
});
