// What a create costs the API server, counted by the operator process itself (bench/probe.ts, loaded into it as the
// benchmark does): the passes read the Application and its children from the watcher's events and their own
// answers (kube/recent.ts), and a first apply is not dry-run first.
import assert from 'node:assert/strict';
import { mkdtempSync } from 'node:fs';
import { readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, describe, it } from 'node:test';
import { appManifest, getApp, getObject, kube, temporalClient, testNamespace, waitForPhase, type Json } from '../../testkit/apps.ts';
import { operatorSuite } from '../../testkit/suite.ts';
import { startOperator } from '../../testkit/operator.ts';
import { eventually } from '../../lib/poll.ts';
import { applicationWorkflowId, rolloutWorkflowId } from '../../workflows/contract.ts';
import { getRelease } from '../../testkit/release.ts';
import { API_VERSION, FINALIZER, LABEL_MANAGED_BY, LABEL_NAME, MANAGED_BY, RELEASE_KIND } from '../../api/constants.ts';
import { finalizerPolicyLabel } from '../../stack/stack.ts';

const apply = (obj: Json) => kube(['apply', '--server-side', '--field-manager=test-user', '-f', '-'], JSON.stringify(obj));
const root = join(import.meta.dirname, '..', '..');

describe('requests per create', () => {
  const dir = mkdtempSync(join(tmpdir(), 'requests-'));
  const probeFile = join(dir, 'probe.json');
  const s = operatorSuite('requests', {
    operator: { nodeArgs: ['--import', join(root, 'bench', 'probe.ts')], extraEnv: { BENCH_PROBE_FILE: probeFile } },
  });
  after(() => rm(dir, { recursive: true, force: true }));

  /** The status of the Application's workflow once it no longer runs (or, after 30 s, the one it has then). */
  async function endedStatus(namespace: string, name: string): Promise<string> {
    const handle = (await temporalClient()).workflow.getHandle(applicationWorkflowId(namespace, name));
    return eventually(`${name}'s workflow ended`, async () => {
      const s = (await handle.describe()).status.name;
      return s === 'RUNNING' ? undefined : s;
    }, { timeoutMs: 30_000 }).catch(async () => (await handle.describe()).status.name);
  }

  /** The operator's requests by verb and resource, once they stopped changing (the probe writes them 4 times a second). */
  async function settledCounts(file = probeFile): Promise<Record<string, number>> {
    let last = '';
    return eventually('the operator\'s request counts settle', async () => {
      const text = await readFile(file, 'utf8').catch(() => '');
      const now = text ? JSON.stringify((JSON.parse(text) as { counts: Record<string, number> }).counts) : '';
      const settled = now !== '' && now === last;
      last = now;
      return settled ? JSON.parse(now) as Record<string, number> : undefined;
    }, { intervalMs: 1500, timeoutMs: 60_000 });
  }

  it('reads neither the Application nor its children back, and dry-runs nothing, on the way to Running', async () => {
    const before = await settledCounts();
    const names = ['a', 'b', 'c', 'd'];
    for (const name of names) await apply(appManifest(s.ns, name, { image: 'nginx:1.25' }));
    for (const name of names) await waitForPhase(s.ns, name, 'Running');
    const after = await settledCounts();
    const made = (key: string) => (after[key] ?? 0) - (before[key] ?? 0);
    const all = Object.keys(after).filter((k) => made(k) > 0).map((k) => `${k} ${made(k)}`).join(', ');
    // Without what is in hand, each create reads its Application twice and its Deployment and Service once.
    const reads = made('GET myapp.example.com/applications') + made('GET apps/deployments') + made('GET services');
    assert.ok(reads <= 1, `reads of what the watch already brought: ${reads} (${all})`);
    assert.equal(Object.keys(after).filter((k) => k.includes('dry-run') && made(k) > 0).length, 0, `no dry-run on a create (${all})`);
    assert.equal(made('APPLY apps/deployments'), names.length, all);
    assert.equal(made('APPLY services'), names.length, all);
    const requests = Object.keys(after).filter((k) => !k.startsWith('WATCH') && !k.startsWith('LIST') && !k.includes('leases')).reduce((n, k) => n + made(k), 0);
    assert.ok(requests <= names.length * 7 + 1, `at most 7 requests per create: ${requests} for ${names.length} (${all})`);
  });

  it('a spec change is applied once: the operator\'s own applies are no drift to put back', async () => {
    const before = await settledCounts();
    await kube(['-n', s.ns, 'patch', 'application', 'a', '--type=merge', '-p', JSON.stringify({ spec: { image: 'nginx:1.27' } })]);
    await eventually('the new image rolled out', async () => ((await getObject('apps/v1', 'Deployment', s.ns, 'a'))?.spec?.template?.spec?.containers?.[0]?.image === 'nginx:1.27' ? true : undefined));
    await waitForPhase(s.ns, 'a', 'Running');
    const after = await settledCounts();
    const made = (key: string) => (after[key] ?? 0) - (before[key] ?? 0);
    const all = Object.keys(after).filter((k) => made(k) > 0).map((k) => `${k} ${made(k)}`).join(', ');
    // Without telling its own writes from drift, the new generation of the Deployment woke a second pass, which
    // applied every child again.
    assert.equal(made('APPLY apps/deployments'), 1, all);
    assert.equal(made('APPLY services'), 1, all);
    // Nothing to prune: status.children says no other child was ever applied, so no kind is read back to find out.
    // (The Application itself is read when the watch's copy is behind the pass, as on a loaded machine.)
    const reads = Object.keys(after).filter((k) => k.startsWith('GET ') && !k.startsWith('GET myapp.example.com/') && made(k) > 0);
    assert.deepEqual(reads, [], all);
  });

  it('deleting deletes what the Application recorded as applied, not every kind it could have', async () => {
    const names = ['a', 'b', 'c', 'd'];
    const before = await settledCounts();
    await kube(['-n', s.ns, 'delete', 'application', ...names, '--wait=true', '--timeout=60s']);
    const after = await settledCounts();
    const made = (key: string) => (after[key] ?? 0) - (before[key] ?? 0);
    const all = Object.keys(after).filter((k) => made(k) > 0).map((k) => `${k} ${made(k)}`).join(', ');
    const deletes = Object.keys(after).filter((k) => k.startsWith('DELETE ')).reduce((n, k) => n + made(k), 0);
    assert.equal(made('DELETE apps/deployments'), names.length, all);
    assert.equal(made('DELETE services'), names.length, all);
    assert.equal(deletes, names.length * 2, `a Deployment and a Service each (${all})`);
    // With no rollout to compensate, the pass the deletion wakes finalizes at once: no Deleting status on the way out.
    assert.equal(made('PATCH myapp.example.com/applications/status'), 0, all);
    assert.equal(made('PATCH myapp.example.com/applications'), names.length, `one finalizer release each (${all})`);
    for (const name of names) assert.equal(await getObject('apps/v1', 'Deployment', s.ns, name), null);
  });

  it('deleting a namespace: each finalizer is released at once, nothing the namespace controller deletes anyway is deleted or put back, and every workflow ends', async () => {
    const file = join(dir, 'namespace.json');
    const ns = await testNamespace('requests-gone');
    const op = await startOperator({ namespaces: [ns.name], logName: 'namespace-gone', nodeArgs: ['--import', join(root, 'bench', 'probe.ts')], extraEnv: { BENCH_PROBE_FILE: file } });
    try {
      const names = ['a', 'b', 'c'];
      for (const name of names) await apply(appManifest(ns.name, name, { image: 'nginx:1.25' }));
      for (const name of names) await waitForPhase(ns.name, name, 'Running');
      const before = await settledCounts(file);
      await kube(['delete', 'namespace', ns.name, '--wait=true', '--timeout=120s']);
      const after = await settledCounts(file);
      const made = (key: string) => (after[key] ?? 0) - (before[key] ?? 0);
      const all = Object.keys(after).filter((k) => made(k) > 0).map((k) => `${k} ${made(k)}`).join(', ');
      // The namespace controller deletes pods, then Deployments and Services, then the Applications: none of it is
      // drift to put back (no apply, no status write), and finalizing deletes nothing itself.
      assert.equal(Object.keys(after).filter((k) => k.startsWith('DELETE ')).reduce((n, k) => n + made(k), 0), 0, all);
      assert.equal(Object.keys(after).filter((k) => k.startsWith('APPLY ')).reduce((n, k) => n + made(k), 0), 0, all);
      assert.equal(made('PATCH myapp.example.com/applications/status'), 0, all);
      assert.equal(made('PATCH myapp.example.com/applications'), names.length, `one finalizer release each (${all})`);
      // Each workflow's pass finds its Application gone in what the watch saw: no read of it.
      assert.equal(made('GET myapp.example.com/applications'), 0, all);
      // Told by the deletion's watch event, which comes before the namespace is gone: each ends about then.
      for (const name of names) assert.equal(await endedStatus(ns.name, name), 'COMPLETED', `${name}'s workflow`);
      // No rollout in flight: the watcher released each finalizer itself; each workflow's pass found its Application gone.
      const released = (await op.logs()).split('\n').filter((l) => l.includes('"msg":"released the finalizer: the namespace is being deleted'));
      assert.equal(released.length, names.length, 'each finalizer released by the watcher');
    } finally {
      await op.stop();
      await ns.cleanup();
    }
  });

  it('a canary\'s gate checks and status writes read the Application and the routes from what is in hand', async (t) => {
    const mesh = (canary?: Json) => appManifest(s.ns, 'r', { image: 'nginx:1.25', serviceMesh: { enabled: true, ...(canary ? { canary } : {}) } });
    await apply(mesh());
    await waitForPhase(s.ns, 'r', 'Running');
    const before = await settledCounts();
    await apply(mesh({ enabled: true, canaryVersion: 'v2', steps: [{ setWeight: 20 }, { pause: { duration: '12s' } }], healthGates: { interval: '1s', initialDelay: '1s' } }));
    await eventually('the rollout promoted', async () => ((await getApp(s.ns, 'r'))?.status?.canary?.phase === 'Promoted' ? true : undefined), { timeoutMs: 90_000 });
    const after = await settledCounts();
    const made = (key: string) => (after[key] ?? 0) - (before[key] ?? 0);
    const all = Object.keys(after).filter((k) => made(k) > 0).map((k) => `${k} ${made(k)}`).join(', ');
    // Every run of the rollout's workflow (a promoted rollout continues as new once), every gate check in them: a
    // local activity, whose marker carries the summary.
    const client = await temporalClient();
    let gateChecks = 0;
    const runs: string[] = [];
    for await (const run of client.workflow.list({ query: `WorkflowId = '${rolloutWorkflowId(s.ns, 'r')}'` })) {
      runs.push(run.runId);
      const history = await client.workflow.getHandle(run.workflowId, run.runId).fetchHistory();
      gateChecks += (history.events ?? []).filter((e) => e.markerRecordedEventAttributes?.markerName === 'core_local_activity'
        && Buffer.from(e.userMetadata?.summary?.data ?? []).toString().includes('gate check at')).length;
    }
    assert.ok(gateChecks >= 9, `a 12 s pause with gates every second: ${gateChecks} gate checks in ${runs.length} runs`);
    // Read from the API server, each gate check reads all three, and each status write the Application: at least
    // three times as many reads as gate checks (54 for 12 gate checks before). In hand, a copy at least as new as the
    // watch's is served, this process's own writes' answers included, so what is read does not grow with the gate
    // checks: the first reads, and what someone else changed (7 or 8 for 11 gate checks on a loaded machine; reading
    // only what the watch had confirmed, the status writes' answers were read back while the watch lagged: 12 for 10
    // in a loaded CI run).
    const reads = ['GET myapp.example.com/applications', 'GET networking.istio.io/virtualservices', 'GET networking.istio.io/destinationrules']
      .reduce((n, k) => n + made(k), 0);
    t.diagnostic(`${gateChecks} gate checks; reads: ${all}`);
    assert.ok(reads < gateChecks, `${reads} reads of the Application and routes for ${gateChecks} gate checks (${all})`);
    // The canary Deployment too (each gate check read it from the API server before: a GET per gate check), and the
    // stable one while the promote waits for it; what is read is the check right before a route reaches the canary.
    assert.ok(made('GET apps/deployments') < gateChecks / 2, `${made('GET apps/deployments')} reads of the Deployments for ${gateChecks} gate checks (${all})`);
  });

  // After a rollout status.children no longer says which children exist (a rollout's own are not recorded), and every
  // pass read each absent kind back: the preview, stable and canary Services, the canary Deployment, an HPA, the
  // HTTPRoute... Now a listed watch rules out what it does not see, and what it sees is still pruned.
  it('after a rollout, a pass reads back no child the watch does not see, and still prunes one it sees', async () => {
    const app = await getApp(s.ns, 'r');
    assert.ok(app?.status?.canary, 'r ran a rollout (the test above)');
    const patch = (spec: Json) => kube(['-n', s.ns, 'patch', 'application', 'r', '--type=merge', '-p', JSON.stringify({ spec })]);
    const replicasApplied = (n: number) => eventually(`replicas ${n} applied`, async () => ((await getObject('apps/v1', 'Deployment', s.ns, 'r'))?.spec?.replicas === n ? true : undefined));
    const before = await settledCounts();
    await patch({ replicas: 2 });
    await replicasApplied(2);
    await waitForPhase(s.ns, 'r', 'Running');
    const after = await settledCounts();
    const made = (key: string) => (after[key] ?? 0) - (before[key] ?? 0);
    const all = Object.keys(after).filter((k) => made(k) > 0).map((k) => `${k} ${made(k)}`).join(', ');
    // (7 before: the three Services, the canary Deployment, the HPA, the HTTPRoute and the TraefikService. No watch
    // follows the last, which exists only while a rollout mirrors through Traefik: it is still read.)
    const reads = Object.keys(after).filter((k) => k.startsWith('GET ') && !k.startsWith('GET myapp.example.com/') && made(k) > 0);
    assert.deepEqual(reads, ['GET traefik.io/traefikservices'], all);
    // An HPA this process never wrote, labelled and owned like the Application's own (as one a pass applied before a
    // restart): the watch sees it, the spec has none, so the next pass deletes it.
    await apply({
      apiVersion: 'autoscaling/v2', kind: 'HorizontalPodAutoscaler',
      metadata: {
        name: 'r', namespace: s.ns, labels: { [LABEL_NAME]: 'r', [LABEL_MANAGED_BY]: MANAGED_BY },
        ownerReferences: [{ apiVersion: API_VERSION, kind: 'Application', name: 'r', uid: app.metadata.uid, controller: true, blockOwnerDeletion: true }],
      },
      spec: { scaleTargetRef: { apiVersion: 'apps/v1', kind: 'Deployment', name: 'r' }, minReplicas: 1, maxReplicas: 3 },
    });
    await patch({ replicas: 3 });
    await replicasApplied(3);
    await eventually('the HPA pruned', async () => ((await getObject('autoscaling/v2', 'HorizontalPodAutoscaler', s.ns, 'r')) === null ? true : undefined), { timeoutMs: 20_000 });
  });

  it('a worker without a watcher in its process reads everything from the API server, and gets there all the same', async () => {
    const split = join(dir, 'split.json');
    const ns = await testNamespace('requests-split');
    const watcher = await startOperator({ namespaces: [ns.name], mode: 'watcher', logName: 'watcher' });
    const worker = await startOperator({
      namespaces: [ns.name], mode: 'worker', taskQueue: watcher.taskQueue, logName: 'worker',
      nodeArgs: ['--import', join(root, 'bench', 'probe.ts')], extraEnv: { BENCH_PROBE_FILE: split },
    });
    try {
      await apply(appManifest(ns.name, 'e', { image: 'nginx:1.25' }));
      await waitForPhase(ns.name, 'e', 'Running');
      const counts = await settledCounts(split);
      assert.ok((counts['GET myapp.example.com/applications'] ?? 0) >= 2, JSON.stringify(counts));
      await kube(['-n', ns.name, 'delete', 'application', 'e', '--wait=true', '--timeout=60s']);
    } finally {
      await worker.stop();
      await watcher.stop();
      await ns.cleanup();
    }
  });

  it('with the chart\'s finalizer policy bound to the namespace, the API server puts the finalizer on at create: the operator writes it neither there nor anywhere, and deleting still releases it', async () => {
    const file = join(dir, 'policy.json');
    const ns = await testNamespace('requests-policy');
    const op = await startOperator({ namespaces: [ns.name], logName: 'policy', nodeArgs: ['--import', join(root, 'bench', 'probe.ts')], extraEnv: { BENCH_PROBE_FILE: file } });
    try {
      const manifest = (name: string) => JSON.stringify(appManifest(ns.name, name, { image: 'nginx:1.25' }));
      await kube(['label', 'namespace', ns.name, `${finalizerPolicyLabel.key}=${finalizerPolicyLabel.value}`]);
      // Admission sees the namespace's label once its informer has: a server-side dry run goes through admission.
      await eventually('the policy applies in the namespace', async () => {
        const answer = JSON.parse(await kube(['create', '--dry-run=server', '-o', 'json', '-f', '-'], manifest('probe'))) as Json;
        return answer.metadata.finalizers?.includes(FINALIZER) ? true : undefined;
      });
      const before = await settledCounts(file);
      const names = ['a', 'b', 'c', 'd'];
      // Created with a POST and with a server-side apply (a create too, to admission; the finalizer is no field of
      // the applier's, so applying the manifest again does not take it away).
      for (const [i, name] of names.entries()) {
        const how = i % 2 ? ['apply', '--server-side', '--field-manager=test-user'] : ['create'];
        const created = JSON.parse(await kube([...how, '-o', 'json', '-f', '-'], manifest(name))) as Json;
        assert.deepEqual(created.metadata.finalizers, [FINALIZER], `the answer of ${how[0]} carries the finalizer`);
      }
      const again = JSON.parse(await kube(['apply', '--server-side', '--field-manager=test-user', '-o', 'json', '-f', '-'], manifest('b'))) as Json;
      assert.deepEqual(again.metadata.finalizers, [FINALIZER], 'applied again, the manifest leaves the finalizer on');
      for (const name of names) await waitForPhase(ns.name, name, 'Running');
      const after = await settledCounts(file);
      const made = (key: string) => (after[key] ?? 0) - (before[key] ?? 0);
      const all = Object.keys(after).filter((k) => made(k) > 0).map((k) => `${k} ${made(k)}`).join(', ');
      assert.equal(made('PATCH myapp.example.com/applications'), 0, `no finalizer patch (${all})`);
      const writes = Object.keys(after).filter((k) => /^(POST|PUT|PATCH|APPLY|DELETE)/.test(k) && !k.includes('leases')).reduce((n, k) => n + made(k), 0);
      assert.ok(writes <= names.length * 5, `at most 5 writes per create: ${writes} for ${names.length} (${all})`);
      // The finalizer is the operator's as much as if it had written it: deleting runs the operator's finalizing.
      const deleting = await settledCounts(file);
      await kube(['-n', ns.name, 'delete', 'application', ...names, '--wait=true', '--timeout=60s']);
      const done = await settledCounts(file);
      assert.equal((done['PATCH myapp.example.com/applications'] ?? 0) - (deleting['PATCH myapp.example.com/applications'] ?? 0), names.length, 'one finalizer release each');
      for (const name of names) assert.equal(await getObject('apps/v1', 'Deployment', ns.name, name), null);

      // A Release too: the policy's finalizer, no patch of the operator's; deleting it, the operator releases it.
      const beforeRelease = await settledCounts(file);
      const release = JSON.parse(await kube(['create', '-o', 'json', '-f', '-'], JSON.stringify({
        apiVersion: API_VERSION, kind: RELEASE_KIND, metadata: { name: 'rel', namespace: ns.name },
        spec: { steps: [{ setWeight: 50 }], waves: [{ applications: [{ name: 'absent', canaryVersion: '2.0' }] }] },
      }))) as Json;
      assert.deepEqual(release.metadata.finalizers, [FINALIZER], 'the Release\'s create answer carries the finalizer');
      await eventually('the Release has a status', async () => ((await getRelease(ns.name, 'rel'))?.status?.phase ? true : undefined));
      await kube(['-n', ns.name, 'delete', RELEASE_KIND.toLowerCase(), 'rel', '--wait=true', '--timeout=60s']);
      const afterRelease = await settledCounts(file);
      assert.equal((afterRelease['PATCH myapp.example.com/releases'] ?? 0) - (beforeRelease['PATCH myapp.example.com/releases'] ?? 0), 1, 'one patch of the Release: its finalizer\'s release');

      // Created and deleted while no operator ran: the finalizer the API server put on holds it until one runs, which
      // finalizes it (its workflow starts, finds it deleting, releases it and ends). Without the policy, nothing
      // would have held it, and its children, had a pass applied any, would have been left to the garbage collector.
      await op.stop();
      await kube(['create', '-f', '-'], manifest('unseen'));
      await kube(['-n', ns.name, 'delete', 'application', 'unseen', '--wait=false']);
      const held = await getApp(ns.name, 'unseen');
      assert.ok(held?.metadata.deletionTimestamp && held.metadata.finalizers?.includes(FINALIZER), 'held by the finalizer while no operator runs');
      await op.restart();
      await eventually('the operator finalized it', async () => ((await getApp(ns.name, 'unseen')) === null ? true : undefined), { timeoutMs: 60_000 });
      assert.equal(await endedStatus(ns.name, 'unseen'), 'COMPLETED');
    } finally {
      await op.stop();
      await ns.cleanup();
    }
  });
});
