// High availability: two operator processes on one task queue with leader election. Both run workers; only the Lease
// holder runs the watcher. SIGKILL the leader and the other takes over within the lease time; Applications created
// or changed around the kill still converge. A graceful stop hands the Lease over at once.
import { Client, Connection } from '@temporalio/client';
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { after, before, describe, it } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { appManifest, getDeployment, getObject, kube, testNamespace, waitForPhase, type Json } from '../../testkit/apps.ts';
import { testEnv } from '../../testkit/env.ts';
import { startOperator, type OperatorProcess } from '../../testkit/operator.ts';
import { eventually } from '../../lib/poll.ts';

const LEASE = 'ha-leader';
const LEASE_SECONDS = 4;
const RETRY_SECONDS = 1;

const apply = (obj: Json) => kube(['apply', '--server-side', '--field-manager=test-user', '-f', '-'], JSON.stringify(obj));

describe('two replicas with leader election', () => {
  let ns: { name: string; cleanup: () => Promise<void> };
  let connection: Connection;
  let client: Client;
  const taskQueue = `ha-${randomUUID()}`;
  const ops: OperatorProcess[] = [];

  const start = async (identity: string) => {
    const op = await startOperator({
      namespaces: [ns.name], taskQueue,
      extraArgs: [
        '--leader-elect', `--lease-namespace=${ns.name}`, `--lease-name=${LEASE}`, `--lease-duration-seconds=${LEASE_SECONDS}`,
        '--lease-renew-deadline-seconds=3', `--lease-retry-period-seconds=${RETRY_SECONDS}`,
      ],
      extraEnv: { POD_NAME: identity },
      logName: identity,
    });
    ops.push(op);
    return op;
  };
  const holder = async () => ((await getObject('coordination.k8s.io/v1', 'Lease', ns.name, LEASE))?.spec?.holderIdentity as string | undefined) ?? '';
  const waitHolder = (identity: string, timeoutMs: number) => eventually(`${identity} holds the Lease`, async () => {
    const h = await holder();
    if (h === identity) return true;
    throw new Error(`holder is ${h || 'nobody'}`);
  }, { timeoutMs, intervalMs: 100 });
  const watcherStarts = async (op: OperatorProcess) => (await op.logs()).split('\n').filter((l) => l.includes('"msg":"watcher started"')).length;
  /** Identities of the workers polling the shared task queue, as the Temporal server sees them. */
  const pollers = async () => {
    const tq = await client.workflowService.describeTaskQueue({ namespace: (await testEnv()).temporalNamespace, taskQueue: { name: taskQueue, kind: 1 }, taskQueueType: 1 });
    return (tq.pollers ?? []).map((p) => p.identity ?? '');
  };

  before(async () => {
    const env = await testEnv();
    ns = await testNamespace('ha');
    connection = await Connection.connect({ address: env.temporalAddress });
    client = new Client({ connection, namespace: env.temporalNamespace });
  });
  after(async () => {
    for (const op of ops) await op.stop('SIGKILL');
    await connection?.close();
    // No operator is left to release the finalizers; without this the namespace could never go away.
    for (const name of ['before', 'racing', 'after', 'last']) {
      await kube(['-n', ns.name, 'patch', 'application', name, '--type=merge', '-p', '{"metadata":{"finalizers":null}}']).catch(() => '');
    }
    await ns?.cleanup();
  });

  it('runs one watcher, fails over on SIGKILL within the lease time, loses no Application, and hands over at once on a graceful stop', async (t) => {
    const a = await start('op-a');
    await waitHolder('op-a', 10_000);
    const b = await start('op-b');
    // b is ready as a worker while standing by.
    for (let i = 0; i < 3; i++) {
      await sleep(LEASE_SECONDS * 1000 / 2);
      assert.equal(await holder(), 'op-a', 'a renews; b never takes the Lease from a live leader');
    }
    assert.equal(await watcherStarts(a), 1, 'the leader runs the watcher');
    assert.equal(await watcherStarts(b), 0, 'the standby does not');
    await eventually('both workers poll the task queue', async () => {
      const ids = await pollers();
      return [a.pid(), b.pid()].every((pid) => ids.some((id) => id.startsWith(`${pid}@`))) ? true : undefined;
    }, { timeoutMs: 15_000 });

    await apply(appManifest(ns.name, 'before', { image: 'nginx:1.25', replicas: 2 }));
    await waitForPhase(ns.name, 'before', 'Running');

    // Work in flight at the kill: an app created just before, and changes right after.
    await apply(appManifest(ns.name, 'racing', { image: 'nginx:1.25', serviceMesh: { enabled: true } }));
    await a.stop('SIGKILL');
    const killedAt = Date.now();
    await apply(appManifest(ns.name, 'after', { image: 'nginx:1.25', autoscaling: { enabled: true, minReplicas: 1, maxReplicas: 3, targetCPU: 50 } }));
    await kube(['-n', ns.name, 'patch', 'application', 'before', '--type=merge', '-p', JSON.stringify({ spec: { image: 'nginx:1.27' } })]);

    await waitHolder('op-b', 20_000);
    const takeoverMs = Date.now() - killedAt;
    // b saw a's last renewal at most a retry period before the kill, and tries every retry period (+20% jitter).
    assert.ok(takeoverMs <= (LEASE_SECONDS + 1.2 * RETRY_SECONDS) * 1000 + 1500, `took over after ${takeoverMs} ms`);
    assert.ok(takeoverMs >= (LEASE_SECONDS - RETRY_SECONDS) * 1000, `took over after only ${takeoverMs} ms: the Lease of a live-looking leader must be waited out`);
    t.diagnostic(`failover after SIGKILL: ${takeoverMs} ms (lease ${LEASE_SECONDS} s, retry ${RETRY_SECONDS} s)`);
    await eventually('b runs the watcher', async () => ((await watcherStarts(b)) === 1 ? true : undefined), { timeoutMs: 10_000 });

    for (const name of ['racing', 'after']) await waitForPhase(ns.name, name, 'Running');
    const before = await waitForPhase(ns.name, 'before', 'Running');
    assert.equal(before.status.observedGeneration, 2);
    assert.equal((await getDeployment(ns.name, 'before'))!.spec.template.spec.containers[0].image, 'nginx:1.27');
    assert.ok(await getObject('networking.istio.io/v1', 'VirtualService', ns.name, 'racing'));
    assert.ok(await getObject('autoscaling/v2', 'HorizontalPodAutoscaler', ns.name, 'after'));

    // a comes back as the standby; a graceful stop of b releases the Lease, so a leads without waiting it out.
    await a.restart();
    await sleep(LEASE_SECONDS * 1000 / 2);
    assert.equal(await holder(), 'op-b');
    assert.equal(await watcherStarts(a), 1, 'a restarted as standby: no new watcher');
    const stoppedAt = Date.now();
    await b.stop('SIGTERM');
    await waitHolder('op-a', 10_000);
    const handoverMs = Date.now() - stoppedAt;
    assert.ok(handoverMs < LEASE_SECONDS * 1000, `handed over after ${handoverMs} ms; a released Lease needs no expiry`);
    t.diagnostic(`handover on SIGTERM: ${handoverMs} ms`);
    await eventually('a runs the watcher again', async () => ((await watcherStarts(a)) === 2 ? true : undefined), { timeoutMs: 10_000 });
    await apply(appManifest(ns.name, 'last', { image: 'nginx:1.25' }));
    await waitForPhase(ns.name, 'last', 'Running');
  });
});
