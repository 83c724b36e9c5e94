// The reconciler end to end: a real operator process (watcher + worker) against the run's API server and Temporal.
import { Client } from '@temporalio/client';
import proto from '@temporalio/proto';
import { NativeConnection, Worker } from '@temporalio/worker';
import { randomUUID } from 'node:crypto';
import assert from 'node:assert/strict';
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { parse } from 'yaml';
import { API_VERSION, FINALIZER, KIND, LABEL_MANAGED_BY, LABEL_NAME, MANAGED_BY } from '../../api/constants.ts';
import { applicationWorkflowId, rolloutWorkflowId } from '../../workflows/contract.ts';
import { appManifest, eventsOf, getApp, getDeployment, getObject, kube, kubeApi, kubeJson, temporalClient, testNamespace, waitForObject, waitForPhase, type Json } from '../../testkit/apps.ts';
import { testEnv, workflowBundle } from '../../testkit/env.ts';
import { startOperator, testFlags } from '../../testkit/operator.ts';
import { virtualService, waitCanaryPhase, waitWeights } from '../../testkit/canary.ts';
import { readRouteWeights } from '../../render/istio.ts';
import { eventually } from '../../lib/poll.ts';
import { operatorSuite } from '../../testkit/suite.ts';
import { createLogger } from '../../operator/log.ts';
import type { StartOutcome } from '../../watcher/change.ts';
import { Watcher } from '../../watcher/watcher.ts';

const apply = (obj: Json) => kube(['apply', '--server-side', '--field-manager=test-user', '-f', '-'], JSON.stringify(obj));
/** A payload of a history (JSON, no codec in these tests). */
const payload = (p: { data?: Uint8Array | null } | undefined | null) => JSON.parse(Buffer.from(p?.data ?? []).toString()) as Json;

describe('reconciler', () => {
  const s = operatorSuite('recon');

  it('creates every child with the right fields and owner references, and reaches Running', async () => {
    await apply(appManifest(s.ns, 'web', {
      image: 'nginx:1.25', replicas: 2,
      env: [{ name: 'MODE', value: 'demo' }],
      service: { type: 'ClusterIP', ports: [{ name: 'http', port: 8080 }] },
      autoscaling: { enabled: true, minReplicas: 2, maxReplicas: 5, targetCPU: 60 },
      serviceMesh: { enabled: true, trafficPolicy: { connectionTimeout: '5s', loadBalancer: 'LEAST_REQUEST' } },
      storage: { size: '1Gi' },
    }));
    const app = await waitForPhase(s.ns, 'web', 'Running');
    assert.ok(app.metadata.finalizers.includes(FINALIZER));
    assert.equal(app.status.workflowId, applicationWorkflowId(s.ns, 'web'));
    assert.match(app.status.temporalUI, /\/workflows\/application%2F/);
    const ready = app.status.conditions.find((c: Json) => c.type === 'Ready');
    assert.equal(ready.status, 'True');
    assert.equal(ready.reason, 'AllReplicasReady');

    const owner = { apiVersion: 'myapp.example.com/v1', kind: 'Application', name: 'web', uid: app.metadata.uid, controller: true, blockOwnerDeletion: true };
    const kinds: [string, string][] = [
      ['apps/v1', 'Deployment'], ['v1', 'Service'], ['v1', 'PersistentVolumeClaim'], ['autoscaling/v2', 'HorizontalPodAutoscaler'],
      ['networking.istio.io/v1', 'VirtualService'], ['networking.istio.io/v1', 'DestinationRule'],
    ];
    for (const [apiVersion, kind] of kinds) {
      const child = await getObject(apiVersion, kind, s.ns, 'web');
      assert.ok(child, `${kind} web exists`);
      assert.deepEqual(child.metadata.ownerReferences, [owner], `${kind} is owned by the Application`);
      assert.equal(child.metadata.labels['app.kubernetes.io/name'], 'web');
      assert.equal(child.metadata.labels['app.kubernetes.io/managed-by'], 'application-operator');
    }
    const d = await getDeployment(s.ns, 'web');
    const c = d!.spec.template.spec.containers[0];
    assert.equal(c.image, 'nginx:1.25');
    assert.deepEqual(c.env, [{ name: 'MODE', value: 'demo' }]);
    assert.equal(d!.spec.selector.matchLabels.version, 'stable');
    assert.equal(d!.spec.template.metadata.annotations['sidecar.istio.io/inject'], 'true');
    assert.ok(d!.spec.template.spec.volumes.some((v: Json) => v.persistentVolumeClaim?.claimName === 'web'));
    const svc = await getObject('v1', 'Service', s.ns, 'web');
    assert.deepEqual(svc!.spec.ports.map((p: Json) => p.port), [8080]);
    assert.deepEqual(svc!.spec.selector, { 'app.kubernetes.io/name': 'web' });
    const dr = await getObject('networking.istio.io/v1', 'DestinationRule', s.ns, 'web');
    assert.equal(dr!.spec.trafficPolicy.loadBalancer.simple, 'LEAST_REQUEST');
    assert.equal(dr!.spec.trafficPolicy.connectionPool.tcp.connectTimeout, '5s');
    const vs = await getObject('networking.istio.io/v1', 'VirtualService', s.ns, 'web');
    const weights = vs!.spec.http[0].route.map((r: Json) => r.weight ?? 100);
    assert.equal(weights.reduce((a: number, b: number) => a + b, 0), 100);
    // With autoscaling on, the HPA (not us) owns replicas: our field manager must not own spec.replicas.
    const ours = d!.metadata.managedFields.find((m: Json) => m.manager === 'application-operator' && m.operation === 'Apply');
    assert.ok(ours, 'Deployment applied with our field manager');
    assert.ok(!('f:replicas' in (ours.fieldsV1['f:spec'] ?? {})), 'replicas not owned by the operator');
  });

  // The watcher starts a new Application's workflow with a plain start over the worker's own connection, so that
  // Temporal hands the first workflow task back in its answer instead of through its task queue; the change that
  // a signal-with-start carried is in the workflow's input.
  it('starts a new Application\'s workflow eagerly, with the change in its input and no signal', async () => {
    await apply(appManifest(s.ns, 'eager', { image: 'nginx:1.25' }));
    await waitForPhase(s.ns, 'eager', 'Running');
    const events = (await (await temporalClient()).workflow.getHandle(applicationWorkflowId(s.ns, 'eager')).fetchHistory()).events ?? [];
    const input = payload(events[0]?.workflowExecutionStartedEventAttributes?.input?.payloads?.[0]);
    assert.deepEqual(input['change'], { reason: 'spec' });
    const firstPass = events.findIndex((e) => e.markerRecordedEventAttributes?.markerName === 'core_local_activity');
    assert.ok(firstPass > 0, 'a first pass');
    assert.deepEqual(events.slice(0, firstPass).filter((e) => e.workflowExecutionSignaledEventAttributes), [], 'no signal before the first pass');
    // The first pass ran for the change in the input, not only for the resync every run starts with.
    assert.match(Buffer.from(events[firstPass]!.userMetadata?.summary?.data ?? []).toString(), /apply children \(resync, spec changed\)/);
    const metrics = await (await fetch(`${s.op.metricsUrl}/metrics`)).text();
    const eager = Number(/application_operator_watch_starts_total\{first_task="eager"\} (\d+)/.exec(metrics)?.[1]);
    assert.ok(eager >= 1, `started eagerly: ${metrics.split('\n').filter((l) => l.startsWith('application_operator_watch_starts_total')).join('; ')}`);
  });

  // The Temporal SDK captures a stack trace for every promise workflow code creates, for its __stack_trace query (the
  // Temporal UI's Stack Trace tab): a third of the workflow thread's CPU. The operator runs without it unless asked,
  // and the query then says so instead of answering with nothing; with --workflow-stack-traces it shows where the
  // workflow waits (operator/sandbox-calls.ts).
  it('keeps no stack trace per workflow promise unless --workflow-stack-traces, and the stack-trace query says which', async () => {
    await apply(appManifest(s.ns, 'stacks', { image: 'nginx:1.25' }));
    await waitForPhase(s.ns, 'stacks', 'Running');
    const handle = (await temporalClient()).workflow.getHandle(applicationWorkflowId(s.ns, 'stacks'));
    await assert.rejects(handle.query('__stack_trace'), /Workflow stack traces are not enabled on this worker/);
    assert.match(await s.op.logs(), /workflow promises keep no stack trace each/);
    await s.op.stop();
    // Given no prebuilt bundle, as `npm start` and the demo run it: the workflows are bundled at start, without the
    // sources' text in the source map (operator/workflow-bundle.ts), whose mappings still name our files.
    const traced = await startOperator({ namespaces: [s.ns], taskQueue: s.op.taskQueue, logName: 'stack-traces', extraArgs: ['--workflow-stack-traces'], bundleAtStart: true });
    try {
      // Answered by the new worker, which replays the history with the hook installed.
      const stack = await handle.query<string>('__stack_trace');
      assert.match(stack, /at \w+ \(\S*workflows\/application\.ts:\d+:\d+\)/, `the stack names where the workflow waits, in our source: ${stack}`);
      assert.doesNotMatch(await traced.logs(), /workflow promises keep no stack trace each/);
    } finally {
      await traced.stop();
      await s.op.restart();
    }
  });

  it('rolls an image change out to the Deployment', async () => {
    await apply(appManifest(s.ns, 'img', { image: 'nginx:1.25', replicas: 1 }));
    await waitForPhase(s.ns, 'img', 'Running');
    await kube(['-n', s.ns, 'patch', 'application', 'img', '--type=merge', '-p', JSON.stringify({ spec: { image: 'nginx:1.27' } })]);
    await waitForObject('deployment image updated', () => getDeployment(s.ns, 'img'), (d) => d?.spec.template.spec.containers[0].image === 'nginx:1.27');
    const app = await waitForPhase(s.ns, 'img', 'Running');
    assert.equal(app.status.observedGeneration, 2);
  });

  it('scales through the scale subresource (kubectl scale)', async () => {
    await apply(appManifest(s.ns, 'scale', { image: 'nginx:1.25', replicas: 1 }));
    await waitForPhase(s.ns, 'scale', 'Running');
    await kube(['-n', s.ns, 'scale', 'application/scale', '--replicas=3']);
    await waitForObject('deployment scaled to 3', () => getDeployment(s.ns, 'scale'), (d) => d?.spec.replicas === 3);
    const app = await waitForPhase(s.ns, 'scale', 'Running');
    assert.equal(app.status.availableReplicas, 3);
    assert.equal(app.status.replicas, 3);
  });

  it('puts back a deleted child and a hand-edited field, and leaves the HPA-owned replica count alone', async () => {
    await apply(appManifest(s.ns, 'drift', {
      image: 'nginx:1.25', replicas: 1, autoscaling: { enabled: true, minReplicas: 3, maxReplicas: 6, targetCPU: 50 },
    }));
    await waitForPhase(s.ns, 'drift', 'Running');
    // The HPA controller raises replicas to its minimum through the scale subresource.
    await waitForObject('HPA scaled the Deployment to 3', () => getDeployment(s.ns, 'drift'), (d) => d?.spec.replicas === 3);
    const uid = (await getApp(s.ns, 'drift'))!.metadata.uid;
    const repairs = async () => (await eventsOf(s.ns, uid)).filter((e) => e.reason === 'DriftRepaired').map((e) => e.note);
    await sleep(1500);
    assert.deepEqual(await repairs(), [], 'the HPA\'s scaling (a change the apply does not undo) is no repair');

    const svcBefore = await getObject('v1', 'Service', s.ns, 'drift');
    await kube(['-n', s.ns, 'delete', 'service', 'drift']);
    const svcAfter = await waitForObject('service recreated', () => getObject('v1', 'Service', s.ns, 'drift'), (s) => s !== null && s.metadata.uid !== svcBefore!.metadata.uid);
    assert.ok(svcAfter);

    await kube(['-n', s.ns, 'patch', 'deployment', 'drift', '--type=json', '-p', JSON.stringify([{ op: 'replace', path: '/spec/template/spec/containers/0/image', value: 'evil:latest' }])]);
    await waitForObject('image put back', () => getDeployment(s.ns, 'drift'), (d) => d?.spec.template.spec.containers[0].image === 'nginx:1.25');
    await sleep(1500);
    const d = await getDeployment(s.ns, 'drift');
    assert.equal(d!.spec.replicas, 3, 'the operator did not fight the HPA over replicas');
    // Each repair says what it put back and how it had changed.
    const said = await eventually('the repair Events', async () => {
      const notes = await repairs();
      return notes.some((n) => /Deployment\/drift \(edited\)/.test(n)) ? notes : undefined;
    }, { timeoutMs: 10_000 });
    assert.ok(said.some((n) => /^put back what was changed outside the Application: .*Service\/drift \(deleted\)/.test(n)), said.join(' | '));
    assert.ok(!said.some((n) => /HorizontalPodAutoscaler/.test(n)), said.join(' | '));
  });

  it('puts back a Deployment scaled by hand through /scale (kubectl scale), which leaves no writer of its own in managedFields', async () => {
    await apply(appManifest(s.ns, 'hand-scaled', { image: 'nginx:1.25', replicas: 2 }));
    await waitForPhase(s.ns, 'hand-scaled', 'Running');
    const uid = (await getApp(s.ns, 'hand-scaled'))!.metadata.uid;
    await kube(['-n', s.ns, 'scale', 'deployment', 'hand-scaled', '--replicas=0']);
    await waitForObject('replicas put back', () => getDeployment(s.ns, 'hand-scaled'), (d) => d?.spec.replicas === 2 && d.status?.readyReplicas === 2, 20_000);
    const said = await eventually('the repair Event', async () => {
      const notes = (await eventsOf(s.ns, uid)).filter((e) => e.reason === 'DriftRepaired').map((e) => e.note);
      return notes.some((n) => /Deployment\/hand-scaled \(edited\)/.test(n)) ? notes : undefined;
    }, { timeoutMs: 10_000 });
    assert.ok(said.length >= 1);
    await waitForObject('status says 2 of 2 again', () => getApp(s.ns, 'hand-scaled'), (a) => a?.status?.phase === 'Running' && a.status.availableReplicas === 2, 10_000);
  });

  it('reports a child the API server rejects as a Failed phase with a reason, applying nothing', async () => {
    // Passes the CRD schema but not Deployment validation (an unsupported downward-API field): only the API server can tell.
    await apply(appManifest(s.ns, 'rejected', {
      image: 'nginx:1.25', replicas: 1, env: [{ name: 'WHO', valueFrom: { fieldRef: { fieldPath: 'spec.bogus' } } }],
    }));
    const app = await waitForPhase(s.ns, 'rejected', 'Failed');
    const degraded = app.status.conditions.find((c: Json) => c.type === 'Degraded');
    assert.equal(degraded.status, 'True');
    assert.equal(degraded.reason, 'ApplyFailed');
    assert.match(degraded.message, /fieldPath|spec\.bogus/);
    assert.equal(await getDeployment(s.ns, 'rejected'), null, 'nothing half-applied');
    assert.equal(await getObject('v1', 'Service', s.ns, 'rejected'), null, 'nothing half-applied');
    // Fixing the spec recovers.
    await kube(['-n', s.ns, 'patch', 'application', 'rejected', '--type=merge', '-p', JSON.stringify({ spec: { env: [{ name: 'WHO', valueFrom: { fieldRef: { fieldPath: 'metadata.name' } } }] } })]);
    await waitForPhase(s.ns, 'rejected', 'Running');
  });

  it('a pass that keeps failing gives way to a deletion at once, instead of waiting out its backoff (up to a minute)', async (t) => {
    // A webhook that is down (nothing listens at its address; failurePolicy Fail) for this app's Deployment: every
    // pass fails with a 500 and is retried with a growing delay.
    const policy = `down-${s.ns}`;
    await apply({
      apiVersion: 'admissionregistration.k8s.io/v1', kind: 'ValidatingWebhookConfiguration', metadata: { name: policy },
      webhooks: [{
        name: 'down.application-operator.test', clientConfig: { url: 'https://127.0.0.1:1/validate' },
        rules: [{ apiGroups: ['apps'], apiVersions: ['v1'], operations: ['CREATE', 'UPDATE'], resources: ['deployments'] }],
        namespaceSelector: { matchLabels: { 'kubernetes.io/metadata.name': s.ns } }, objectSelector: { matchLabels: { [LABEL_NAME]: 'stuck' } },
        failurePolicy: 'Fail', sideEffects: 'None', admissionReviewVersions: ['v1'], timeoutSeconds: 2,
      }],
    });
    t.after(() => kube(['delete', 'validatingwebhookconfiguration', policy, '--ignore-not-found']));
    const probe = { apiVersion: 'apps/v1', kind: 'Deployment', metadata: { name: 'probe', namespace: s.ns, labels: { [LABEL_NAME]: 'stuck' } },
      spec: { selector: { matchLabels: { probe: 'x' } }, template: { metadata: { labels: { probe: 'x' } }, spec: { containers: [{ name: 'c', image: 'nginx' }] } } } };
    await eventually('the webhook in force', () => kube(['create', '--dry-run=server', '-f', '-'], JSON.stringify(probe)).then(() => undefined, (err: unknown) => (String(err).includes('failed calling webhook') ? true : undefined)));
    await apply(appManifest(s.ns, 'stuck', { image: 'nginx:1.25' }));
    const handle = (await temporalClient()).workflow.getHandle(applicationWorkflowId(s.ns, 'stuck'));
    const pending = await eventually('the pass retrying as an activity, its next try well ahead', async () => {
      const p = (await handle.describe()).raw.pendingActivities?.find((a) => a.activityType?.name === 'reconcileApplication');
      return p && (p.attempt ?? 0) >= 8 && p.nextAttemptScheduleTime ? p : undefined;
    }, { timeoutMs: 90_000, intervalMs: 500 });
    assert.match(pending.lastFailure?.message ?? '', /failed calling webhook/);
    const nextTry = Number(pending.nextAttemptScheduleTime!.seconds) * 1000 + (pending.nextAttemptScheduleTime!.nanos ?? 0) / 1e6;
    await kube(['-n', s.ns, 'delete', 'application', 'stuck', '--wait=false']);
    await waitForObject('stuck gone', () => getApp(s.ns, 'stuck'), (a) => a === null, 90_000);
    const goneAt = Date.now();
    assert.ok(goneAt < nextTry, `gone ${nextTry - goneAt} ms before the failing pass's next try, not after it`);
    assert.equal(await handle.result(), 'deleted');
    const events = (await handle.fetchHistory()).events ?? [];
    assert.ok(events.some((e) => e.eventType === proto.temporal.api.enums.v1.EventType.EVENT_TYPE_ACTIVITY_TASK_CANCEL_REQUESTED), 'the retrying pass was cancelled');
  });

  it('a rejected child after the first leaves nothing applied, not even the first (a first apply takes back what it created)', async () => {
    // The PVC comes first in apply order, the Deployment the API server refuses second.
    await apply(appManifest(s.ns, 'rejected-second', {
      image: 'nginx:1.25', storage: { size: '1Gi' }, env: [{ name: 'WHO', valueFrom: { fieldRef: { fieldPath: 'spec.bogus' } } }],
    }));
    const app = await waitForPhase(s.ns, 'rejected-second', 'Failed');
    assert.equal(app.status.conditions.find((c: Json) => c.type === 'Degraded')?.reason, 'ApplyFailed');
    // Said in the first failure's Event (the PVC's deletion then wakes a pass that dry-runs, and says only the refusal).
    await eventually('the Event saying what was taken back', async () => ((await eventsOf(s.ns, app.metadata.uid))
      .some((e) => e.reason === 'ApplyFailed' && /removed what this first apply had created: PersistentVolumeClaim\/rejected-second/.test(e.note)) ? true : undefined));
    assert.equal(await getDeployment(s.ns, 'rejected-second'), null, 'nothing half-applied');
    // Deleted at once; the PVC protection finalizer lets it go as soon as its controller sees no pod uses it.
    await eventually('the PVC taken back', async () => ((await getObject('v1', 'PersistentVolumeClaim', s.ns, 'rejected-second')) === null ? true : undefined), { timeoutMs: 30_000 });
  });

  it('a rejected child of a changed spec leaves the children as they were (the children after the first are dry-run first)', async () => {
    await apply(appManifest(s.ns, 'rejected-change', { image: 'nginx:1.25', storage: { size: '1Gi' } }));
    const running = await waitForPhase(s.ns, 'rejected-change', 'Running');
    const pvc = await getObject('v1', 'PersistentVolumeClaim', s.ns, 'rejected-change');
    const before = await getDeployment(s.ns, 'rejected-change');
    await kube(['-n', s.ns, 'patch', 'application', 'rejected-change', '--type=merge', '-p', JSON.stringify({
      spec: { image: 'nginx:1.26', env: [{ name: 'WHO', valueFrom: { fieldRef: { fieldPath: 'spec.bogus' } } }] },
    })]);
    const failed = await waitForPhase(s.ns, 'rejected-change', 'Failed');
    assert.equal(failed.status.conditions.find((c: Json) => c.type === 'Degraded')?.reason, 'ApplyFailed');
    assert.doesNotMatch(failed.status.conditions.find((c: Json) => c.type === 'Degraded')?.message ?? '', /removed/, 'nothing taken back from an app that ran');
    const after = await getDeployment(s.ns, 'rejected-change');
    assert.equal(after!.metadata.resourceVersion, before!.metadata.resourceVersion, 'the Deployment untouched');
    assert.equal(after!.spec.template.spec.containers[0].image, 'nginx:1.25');
    const pvcAfter = await getObject('v1', 'PersistentVolumeClaim', s.ns, 'rejected-change');
    assert.equal(pvcAfter?.metadata.uid, pvc?.metadata.uid, 'the PVC kept');
    assert.ok(running.metadata.uid);
  });

  it('on delete removes the children, releases the finalizer and completes the workflow; recreate works', async () => {
    await apply(appManifest(s.ns, 'gone', { image: 'nginx:1.25', serviceMesh: { enabled: true } }));
    const first = await waitForPhase(s.ns, 'gone', 'Running');
    await kube(['-n', s.ns, 'delete', 'application', 'gone', '--wait=true', '--timeout=60s']);
    assert.equal(await getApp(s.ns, 'gone'), null);
    for (const [apiVersion, kind] of [['apps/v1', 'Deployment'], ['v1', 'Service'], ['networking.istio.io/v1', 'VirtualService'], ['networking.istio.io/v1', 'DestinationRule']] as const) {
      assert.equal(await getObject(apiVersion, kind, s.ns, 'gone'), null, `${kind} removed`);
    }
    const client = await temporalClient();
    const handle = client.workflow.getHandle(applicationWorkflowId(s.ns, 'gone'));
    assert.equal(await handle.result(), 'deleted');

    await apply(appManifest(s.ns, 'gone', { image: 'nginx:1.25' }));
    const second = await waitForPhase(s.ns, 'gone', 'Running');
    assert.notEqual(second.metadata.uid, first.metadata.uid);
    const d = await getDeployment(s.ns, 'gone');
    assert.equal(d!.metadata.ownerReferences[0].uid, second.metadata.uid);
  });

  it("applies the seed's sample cleanly", async () => {
    const sample = parse(await readFile(join(import.meta.dirname, '..', '..', 'samples', 'demo-app.yaml'), 'utf8'));
    sample.metadata.namespace = s.ns;
    await apply(sample);
    const app = await waitForPhase(s.ns, 'demo-app', 'Running');
    assert.ok(app.status.endpoints.length > 0);
    assert.ok(await getObject('autoscaling/v2', 'HorizontalPodAutoscaler', s.ns, 'demo-app'));
    assert.ok(await getObject('networking.istio.io/v1', 'VirtualService', s.ns, 'demo-app'));
  });

  it('replays every workflow history of this file deterministically', async () => {
    const client = await temporalClient();
    const histories = client.workflow.list({ query: `TaskQueue = '${s.op.taskQueue}'` }).intoHistories();
    let replayed = 0;
    for await (const r of Worker.runReplayHistories({ workflowBundle: await workflowBundle() }, histories)) {
      assert.equal(r.error, undefined, `${r.workflowId}: ${String(r.error)}`);
      replayed++;
    }
    assert.ok(replayed >= 5, `replayed ${replayed} histories`);
  });
});

// The plain start's other outcomes, with a watcher of the test's own and no worker on its task queue (so no pass
// gives the Application a phase): Temporal queues the first task, and a second change before any status finds the
// workflow running and signals it. A child's event before the first status (a pass created the child, its status
// write not seen yet) is a signal with no start tried (230 of 1,000 creates in a benchmark tried one first).
describe('admission that refuses a child (a ValidatingAdmissionPolicy, as a policy engine or a quota does: 403 Forbidden)', () => {
  const vap = (ns: string, max: number) => ({
    apiVersion: 'v1', kind: 'List', items: [{
      apiVersion: 'admissionregistration.k8s.io/v1', kind: 'ValidatingAdmissionPolicy', metadata: { name: `max-replicas-${ns}` },
      spec: {
        failurePolicy: 'Fail',
        matchConstraints: {
          namespaceSelector: { matchLabels: { 'kubernetes.io/metadata.name': ns } },
          resourceRules: [{ apiGroups: ['apps'], apiVersions: ['v1'], operations: ['CREATE', 'UPDATE'], resources: ['deployments'] }],
        },
        validations: [{ expression: `object.spec.replicas <= ${max}`, message: `at most ${max} replicas in this namespace`, reason: 'Forbidden' }],
      },
    }, {
      apiVersion: 'admissionregistration.k8s.io/v1', kind: 'ValidatingAdmissionPolicyBinding', metadata: { name: `max-replicas-${ns}` },
      spec: { policyName: `max-replicas-${ns}`, validationActions: ['Deny'] },
    }],
  });
  let bound = '';
  const retrySeconds = 20;
  const s = operatorSuite('denied', {
    operator: { extraArgs: [`--refused-retry-seconds=${retrySeconds}`] },
    setUp: async (ns) => {
      bound = ns;
      await kube(['apply', '-f', '-'], JSON.stringify(vap(ns, 3)));
    },
    tearDown: async () => {
      if (bound) await kube(['delete', 'validatingadmissionpolicybindings,validatingadmissionpolicies', `max-replicas-${bound}`, '--ignore-not-found']);
    },
  });
  const degraded = (a: Json | null) => a?.status?.conditions?.find((c: Json) => c.type === 'Degraded');

  it('a refused change says so at once (Failed, ApplyFailed, the policy\'s words), leaves the running Deployment as it was, and its fix applies at once', async () => {
    await apply(appManifest(s.ns, 'capped', { image: 'nginx:1.25', replicas: 2 }));
    await waitForPhase(s.ns, 'capped', 'Running');
    const before = await getDeployment(s.ns, 'capped');
    await apply(appManifest(s.ns, 'capped', { image: 'nginx:1.25', replicas: 5 }));
    // Before, a 403 was retried without end while status said Running, "no problems".
    const app = await waitForObject('the refusal in status', () => getApp(s.ns, 'capped'), (a) => a?.status?.phase === 'Failed', 15_000);
    const refusedAt = Date.now();
    assert.equal(degraded(app)?.status, 'True');
    assert.equal(degraded(app)?.reason, 'ApplyFailed');
    assert.match(degraded(app)?.message ?? '', /ValidatingAdmissionPolicy 'max-replicas-[a-z0-9-]+' .*denied request: at most 3 replicas in this namespace/);
    const after = await getDeployment(s.ns, 'capped');
    assert.equal(after!.metadata.resourceVersion, before!.metadata.resourceVersion, 'the running Deployment untouched');
    // A fix is a change: applied at once, not at the retry the timer makes 20 s after the refusal.
    await apply(appManifest(s.ns, 'capped', { image: 'nginx:1.25', replicas: 3 }));
    await waitForObject('the fix applied', () => getDeployment(s.ns, 'capped'), (d) => d?.spec?.replicas === 3, 15_000);
    assert.ok(Date.now() - refusedAt < (retrySeconds - 5) * 1000, 'applied on the change, not on the retry timer');
    await waitForObject('Running again, no longer degraded', () => getApp(s.ns, 'capped'), (a) => a?.status?.phase === 'Running' && degraded(a)?.status === 'False', 15_000);
  });

  it('a canary the policy refuses is rolled back at once with the policy\'s words, not retried until its deadline (30 min)', async () => {
    const mesh = (canary?: Json) => appManifest(s.ns, 'tall', {
      image: 'nginx:1.25', replicas: 2, serviceMesh: { enabled: true, ...(canary ? { canary: { enabled: true, ...canary } } : {}) },
    });
    await apply(mesh());
    await waitForPhase(s.ns, 'tall', 'Running');
    await apply(mesh({ canaryVersion: 'v2', replicas: 5, steps: [{ setWeight: 20 }] }));
    const app = await waitCanaryPhase(s.ns, 'tall', 'RolledBack', 30_000);
    assert.equal(app.status.canary.reason, 'ApplyRejected');
    assert.match(app.status.canary.message, /the API server refused the canary: .*denied request: at most 3 replicas in this namespace/);
    assert.equal(await getDeployment(s.ns, 'tall-canary'), null, 'no canary left');
    const vs = await virtualService(s.ns, 'tall');
    const w = readRouteWeights(vs);
    assert.deepEqual([w?.stable, w?.canary, w?.headerRoute, w?.mirror], [100, 0, false, 0], 'all traffic on stable');
    assert.doesNotMatch(JSON.stringify(vs?.spec ?? {}), /tall-canary|"subset":"canary"/, 'no route to the canary left');
    assert.equal((await getDeployment(s.ns, 'tall'))!.spec.template.spec.containers[0].image, 'nginx:1.25', 'stable untouched');
    await waitForPhase(s.ns, 'tall', 'Running');
  });

  it('a route the policy refuses mid-rollout rolls the canary back at once with the policy\'s words, instead of being retried with no gate and no deadline', async (t) => {
    const name = `max-canary-share-${s.ns}`;
    await kube(['apply', '-f', '-'], JSON.stringify({
      apiVersion: 'v1', kind: 'List', items: [{
        apiVersion: 'admissionregistration.k8s.io/v1', kind: 'ValidatingAdmissionPolicy', metadata: { name },
        spec: {
          failurePolicy: 'Fail',
          matchConstraints: {
            namespaceSelector: { matchLabels: { 'kubernetes.io/metadata.name': s.ns } },
            resourceRules: [{ apiGroups: ['networking.istio.io'], apiVersions: ['*'], operations: ['CREATE', 'UPDATE'], resources: ['virtualservices'] }],
          },
          validations: [{
            expression: "!has(object.spec.http) || object.spec.http.all(r, !has(r.route) || r.route.all(d, !has(d.weight) || d.weight <= 50 || !has(d.destination.subset) || d.destination.subset != 'canary'))",
            message: 'at most 50% of requests to a canary in this namespace', reason: 'Forbidden',
          }],
        },
      }, {
        apiVersion: 'admissionregistration.k8s.io/v1', kind: 'ValidatingAdmissionPolicyBinding', metadata: { name },
        spec: { policyName: name, validationActions: ['Deny'] },
      }],
    }));
    t.after(() => kube(['delete', 'validatingadmissionpolicybindings,validatingadmissionpolicies', name, '--ignore-not-found']));
    const mesh = (canary?: Json) => appManifest(s.ns, 'share', { image: 'nginx:1.25', serviceMesh: { enabled: true, ...(canary ? { canary: { enabled: true, ...canary } } : {}) } });
    await apply(mesh());
    await waitForPhase(s.ns, 'share', 'Running');
    await apply(mesh({ canaryVersion: 'v2', steps: [{ setWeight: 20 }, { setWeight: 80 }, { pause: {} }], healthGates: { interval: '1s', initialDelay: '0s' } }));
    const app = await waitCanaryPhase(s.ns, 'share', 'RolledBack', 60_000);
    assert.equal(app.status.canary.reason, 'ApplyRejected');
    assert.match(app.status.canary.message, /the API server refused the route \(80%\): .*at most 50% of requests to a canary in this namespace/);
    const w = readRouteWeights(await virtualService(s.ns, 'share'));
    assert.deepEqual([w?.stable, w?.canary], [100, 0], 'all traffic on stable');
    assert.equal(await getDeployment(s.ns, 'share-canary'), null, 'no canary left');
  });

  it('a first apply refused leaves nothing, and is applied by itself once the policy allows it', async () => {
    await apply(appManifest(s.ns, 'waits', { image: 'nginx:1.25', replicas: 5 }));
    const app = await waitForObject('the refusal in status', () => getApp(s.ns, 'waits'), (a) => degraded(a)?.reason === 'ApplyFailed', 15_000);
    assert.equal(app!.status.phase, 'Failed');
    assert.equal(await getDeployment(s.ns, 'waits'), null, 'nothing half-applied');
    assert.equal(await getObject('v1', 'Service', s.ns, 'waits'), null, 'nothing half-applied');
    const generation = app!.metadata.generation;
    await kube(['apply', '-f', '-'], JSON.stringify(vap(s.ns, 10)));
    // No change of the Application: the retry timer applies it (20 s, then 40 s...).
    await waitForObject('applied once the policy allows it', () => getDeployment(s.ns, 'waits'), (d) => d?.spec?.replicas === 5, (retrySeconds * 3 + 15) * 1000);
    const running = await waitForPhase(s.ns, 'waits', 'Running');
    assert.equal(running.metadata.generation, generation, 'nobody touched the Application');
    assert.equal(degraded(running)?.status, 'False');
  });
});

describe('the watcher\'s start of a new Application', () => {
  it('queues the first task when no worker of its connection polls, signals a workflow that runs already, and tries no start for a child\'s event', async () => {
    const ns = await testNamespace('starts');
    const env = await testEnv();
    const connection = await NativeConnection.connect({ address: env.temporalAddress });
    const client = new Client({ connection, namespace: env.temporalNamespace });
    const outcomes: StartOutcome[] = [];
    const watcher = new Watcher({
      kube: await kubeApi(), temporal: client, taskQueue: `no-worker-${randomUUID()}`, namespaces: [ns.name], eagerStart: true,
      coalesceMs: 100, sweepSeconds: 0, log: createLogger('silent'), onStart: (how) => outcomes.push(how),
    });
    const handle = client.workflow.getHandle(applicationWorkflowId(ns.name, 'twice'));
    const signalled = async () => ((await handle.fetchHistory()).events ?? [])
      .flatMap((e) => e.workflowExecutionSignaledEventAttributes?.input?.payloads ?? []).map((p) => payload(p)['reason'] as string);
    try {
      await watcher.start();
      await apply(appManifest(ns.name, 'twice', { image: 'nginx:1.25' }));
      await eventually('the first start', () => Promise.resolve(outcomes.length === 1 ? true : undefined));
      await kube(['-n', ns.name, 'patch', 'application', 'twice', '--type=merge', '-p', JSON.stringify({ spec: { image: 'nginx:1.27' } })]);
      await eventually('the second change sent', () => Promise.resolve(outcomes.length === 2 ? true : undefined));
      assert.deepEqual(outcomes, ['queued', 'running']);
      assert.deepEqual(await signalled(), ['spec'], 'the second change, signalled');
      assert.equal(((await handle.fetchHistory()).events ?? []).filter((e) => e.workflowExecutionStartedEventAttributes).length, 1, 'one run');
      // A Deployment as a pass would have made it: the controller-manager's status writes are child-status events.
      const app = await getApp(ns.name, 'twice');
      await apply({
        apiVersion: 'apps/v1', kind: 'Deployment',
        metadata: {
          name: 'twice', namespace: ns.name, labels: { [LABEL_NAME]: 'twice', [LABEL_MANAGED_BY]: MANAGED_BY },
          ownerReferences: [{ apiVersion: API_VERSION, kind: KIND, name: 'twice', uid: app!.metadata.uid, controller: true, blockOwnerDeletion: true }],
        },
        spec: { replicas: 1, selector: { matchLabels: { app: 'twice' } }, template: { metadata: { labels: { app: 'twice' } }, spec: { containers: [{ name: 'app', image: 'nginx:1.25' }] } } },
      });
      await eventually('the Deployment\'s status signalled', async () => ((await signalled()).includes('child-status') ? true : undefined), { timeoutMs: 60_000 });
      await sleep(1000); // (a start tried first would be counted after its signal)
      assert.deepEqual(outcomes, ['queued', 'running'], 'no start tried for the child\'s event');
    } finally {
      await watcher.stop();
      await handle.terminate('test over').catch(() => undefined);
      await connection.close();
      await ns.cleanup();
    }
  });
});

describe('reconciler across an operator crash', () => {
  it('converges after the operator is SIGKILLed mid-reconcile and restarted', async () => {
    const ns = await testNamespace('crash');
    const op = await startOperator({ namespaces: [ns.name] });
    try {
      await apply(appManifest(ns.name, 'crashy', { image: 'nginx:1.25', replicas: 3, serviceMesh: { enabled: true } }));
      // Kill as soon as the operator has started working on it (finalizer added), before it can finish.
      await eventually('finalizer added', async () => ((await getApp(ns.name, 'crashy'))?.metadata.finalizers?.length ? true : undefined), { intervalMs: 20 });
      await op.stop('SIGKILL');
      await kube(['-n', ns.name, 'patch', 'application', 'crashy', '--type=merge', '-p', JSON.stringify({ spec: { image: 'nginx:1.27' } })]);
      await op.restart();
      const app = await waitForPhase(ns.name, 'crashy', 'Running');
      assert.equal(app.status.observedGeneration, 2);
      const d = await getDeployment(ns.name, 'crashy');
      assert.equal(d!.spec.template.spec.containers[0].image, 'nginx:1.27');
      assert.ok(await kubeJson(['-n', ns.name, 'get', 'virtualservice', 'crashy']));
    } finally {
      await op.stop();
      await ns.cleanup();
    }
  });
});

describe('reconciler across an operator restart', () => {
  it('a restarted operator leaves settled, untouched Applications alone and repairs what changed while it was down', async () => {
    const ns = await testNamespace('restart');
    const op = await startOperator({ namespaces: [ns.name] });
    const n = ns.name;
    try {
      for (const name of ['calm', 'edited', 'gone', 'respec']) await apply(appManifest(n, name, { image: 'nginx:1.25', replicas: 1, serviceMesh: { enabled: true } }));
      for (const name of ['calm', 'edited', 'gone', 'respec']) {
        const app = await waitForPhase(n, name, 'Running');
        const kinds = ((app.status.children ?? []) as { kind: string }[]).map((c) => c.kind).sort();
        assert.deepEqual(kinds, ['Deployment', 'DestinationRule', 'Service', 'VirtualService'], `${name}: status records the children applied`);
      }
      const client = await temporalClient();
      const signals = async (name: string) => ((await client.workflow.getHandle(applicationWorkflowId(n, name)).fetchHistory()).events ?? [])
        .filter((e) => e.workflowExecutionSignaledEventAttributes).length;
      const versions = async () => JSON.stringify(await Promise.all([
        getApp(n, 'calm'), getDeployment(n, 'calm'), getObject('v1', 'Service', n, 'calm'), getObject('networking.istio.io/v1', 'VirtualService', n, 'calm'),
      ].map(async (o) => (await o)?.metadata.resourceVersion)));
      await op.stop();
      const calm = { signals: await signals('calm'), versions: await versions() };
      // While no operator watches: a hand edit, a deleted child, a spec change.
      await kube(['-n', n, 'patch', 'deployment', 'edited', '--type=json', '-p', JSON.stringify([{ op: 'replace', path: '/spec/template/spec/containers/0/image', value: 'evil:latest' }])]);
      await kube(['-n', n, 'delete', 'service', 'gone']);
      await kube(['-n', n, 'patch', 'application', 'respec', '--type=merge', '-p', JSON.stringify({ spec: { image: 'nginx:1.27' } })]);
      await op.restart();
      await waitForObject('the hand edit put back', () => getDeployment(n, 'edited'), (d) => d?.spec.template.spec.containers[0].image === 'nginx:1.25');
      await waitForObject('the deleted Service made again', () => getObject('v1', 'Service', n, 'gone'), (o) => o !== null);
      await waitForObject('the spec change applied', () => getApp(n, 'respec'), (a) => a?.status?.observedGeneration === 2 && a.status.phase === 'Running');
      // The three others are done: the untouched one has had every chance to be woken.
      await sleep(2000);
      assert.equal(await signals('calm'), calm.signals, 'the untouched Application\'s workflow was not signalled');
      assert.equal(await versions(), calm.versions, 'nothing of the untouched Application was written');
      // The log goes on from the first start: its second such line is this start's.
      const started = await eventually('the watcher says what it found at start', async () => (await op.logs()).split('\n').filter((l) => l.includes('settled Applications unchanged'))[1], { timeoutMs: 30_000 });
      assert.match(started, /started: 1 settled Applications unchanged since their last pass \(not signalled\), 2 changed while away/);
    } finally {
      await op.stop();
      await ns.cleanup();
    }
  });

  it('an Application deleted while no operator watched (its finalizer removed by hand): the sweep tells its idle workflow, which ends; one with a rollout in flight ends too', async () => {
    const ns = await testNamespace('orphan');
    const n = ns.name;
    const op = await startOperator({ namespaces: [n], flags: [...testFlags, '--sweep-seconds=2'] });
    try {
      await apply(appManifest(n, 'plain', { image: 'nginx:1.25', replicas: 1 }));
      await apply(appManifest(n, 'canaried', {
        image: 'nginx:1.25', replicas: 1,
        serviceMesh: { enabled: true, canary: { enabled: true, canaryVersion: 'v2', steps: [{ setWeight: 20 }, { pause: {} }], healthGates: { interval: '1s', initialDelay: '1s' } } },
      }));
      await waitForPhase(n, 'plain', 'Running');
      await waitWeights(n, 'canaried', 20, 120_000);
      await waitCanaryPhase(n, 'canaried', 'Paused');
      const client = await temporalClient();
      const ids = [applicationWorkflowId(n, 'plain'), applicationWorkflowId(n, 'canaried'), rolloutWorkflowId(n, 'canaried')];
      const statuses = () => Promise.all(ids.map(async (id) => (await client.workflow.getHandle(id).describe()).status.name));
      assert.deepEqual(await statuses(), ['RUNNING', 'RUNNING', 'RUNNING']);
      await op.stop();
      for (const name of ['plain', 'canaried']) {
        await kube(['-n', n, 'patch', 'application', name, '--type=merge', '-p', JSON.stringify({ metadata: { finalizers: null } })]);
        await kube(['-n', n, 'delete', 'application', name, '--wait=true']);
      }
      // A sweep a while after this start (2 s apart, an orphan is taken for one at its second sighting) finds them.
      await sleep(3000);
      assert.deepEqual(await statuses(), ['RUNNING', 'RUNNING', 'RUNNING'], 'nothing told them while no operator ran');
      await op.restart();
      await eventually('every workflow of the deleted Applications ended', async () => ((await statuses()).every((st) => st === 'COMPLETED') ? true : undefined), { timeoutMs: 60_000, intervalMs: 500 });
      for (const name of ['plain', 'canaried']) assert.equal(await client.workflow.getHandle(applicationWorkflowId(n, name)).result(), 'gone');
      // The idle one waits for a signal: only the sweep's tells it. The rollout may find its canary gone first (the
      // garbage collector follows the Application) and end on its own, waking its Application's workflow itself.
      assert.match(await op.logs(), /a workflow runs for Application \S+\/plain, which no longer exists/);
    } finally {
      await op.stop();
      await ns.cleanup();
    }
  });
});

describe('reconciler: children applied by a pass that could not record them', () => {
  // A pass records in status.children what it applied, and later passes prune (and finalizing deletes) only what may
  // exist. A pass whose status write fails after its applies (a 409 when the user changes the spec at that moment, a
  // crash, here an admission policy refusing the write) recorded nothing: the children it created must still be found.
  const refuse = 'test.example.com/refuse-status';
  // The label is kubectl label's too: the apply takes it over.
  const applyForce = (obj: Json) => kube(['apply', '--server-side', '--field-manager=test-user', '--force-conflicts', '-f', '-'], JSON.stringify(obj));
  async function refusingStatusWrites(ns: string): Promise<() => Promise<void>> {
    const policy = `refuse-status-${ns}`;
    await applyForce({
      apiVersion: 'admissionregistration.k8s.io/v1', kind: 'ValidatingAdmissionPolicy', metadata: { name: policy },
      spec: {
        failurePolicy: 'Fail',
        matchConstraints: { resourceRules: [{ apiGroups: ['myapp.example.com'], apiVersions: ['v1'], operations: ['UPDATE'], resources: ['applications/status'] }] },
        validations: [{ expression: 'false', message: 'status writes refused by the test', reason: 'Forbidden' }],
      },
    });
    await applyForce({
      apiVersion: 'admissionregistration.k8s.io/v1', kind: 'ValidatingAdmissionPolicyBinding', metadata: { name: policy },
      spec: {
        policyName: policy, validationActions: ['Deny'],
        matchResources: { namespaceSelector: { matchLabels: { 'kubernetes.io/metadata.name': ns } }, objectSelector: { matchLabels: { [refuse]: 'true' } } },
      },
    });
    return async () => void (await kube(['delete', 'validatingadmissionpolicybinding,validatingadmissionpolicy', policy, '--ignore-not-found']));
  }
  const hpa = (ns: string, name: string) => getObject('autoscaling/v2', 'HorizontalPodAutoscaler', ns, name);
  const autoscaled = { enabled: true, minReplicas: 1, maxReplicas: 3, targetCPU: 80 };

  for (const restart of [false, true]) {
    it(`an HPA applied by a pass whose status write was refused is pruned once the spec drops it${restart ? ', by a restarted operator that never applied it' : ''}`, async () => {
      const ns = await testNamespace(restart ? 'unrec-restart' : 'unrec');
      const n = ns.name;
      const op = await startOperator({ namespaces: [n] });
      const removePolicy = await refusingStatusWrites(n);
      try {
        await apply(appManifest(n, 'web', { image: 'nginx:1.25' }));
        const running = await waitForPhase(n, 'web', 'Running');
        assert.deepEqual(running.status.children.map((c: Json) => c.kind), ['Deployment', 'Service']);
        // Labelled (no new generation, nothing for a pass to write), then the policy is in force once a dry-run status
        // write is refused: the API server takes a moment to load a new policy.
        await kube(['-n', n, 'label', 'application', 'web', `${refuse}=true`]);
        await eventually('the policy in force', () => kube(['-n', n, 'patch', 'application', 'web', '--subresource=status', '--type=merge', '--dry-run=server', '-p', JSON.stringify({ status: { message: 'probe' } })])
          .then(() => undefined, (err: unknown) => (String(err).includes('refused by the test') ? true : undefined)), { timeoutMs: 30_000, intervalMs: 500 });
        // Autoscaling on, with status writes refused: the pass applies the HPA, then cannot record it.
        await applyForce(appManifest(n, 'web', { image: 'nginx:1.25', autoscaling: autoscaled }, { labels: { [refuse]: 'true' } }));
        await waitForObject('the HPA applied', () => hpa(n, 'web'), (h) => h !== null);
        const app = await getApp(n, 'web');
        assert.deepEqual(app!.status.children.map((c: Json) => c.kind), ['Deployment', 'Service'], 'status did not record the HPA');
        if (restart) await op.stop('SIGKILL');
        // Autoscaling off again, status writes allowed again.
        await applyForce(appManifest(n, 'web', { image: 'nginx:1.25' }, { labels: { [refuse]: 'false' } }));
        if (restart) await op.restart();
        await eventually('the spec without autoscaling observed', async () => {
          const a = await getApp(n, 'web');
          return a?.status?.observedGeneration === a?.metadata.generation && a?.status?.phase === 'Running' ? true : undefined;
        }, { timeoutMs: 90_000, intervalMs: 250 });
        await eventually('the unrecorded HPA pruned', async () => ((await hpa(n, 'web')) === null ? true : undefined), { timeoutMs: 15_000, intervalMs: 250 });
      } finally {
        await removePolicy();
        await op.stop();
        await ns.cleanup();
      }
    });
  }
});
