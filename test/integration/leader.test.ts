// The Lease elector against the real API server: one leader at a time, a released Lease changes hands at once, a
// dead holder's Lease only after it expired.
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { createLogger } from '../../operator/log.ts';
import { LeaderElector, runWhileLeader } from '../../operator/leader.ts';
import { kube, kubeApi, testNamespace, type Json } from '../../testkit/apps.ts';
import { eventually } from '../../lib/poll.ts';

const log = createLogger('silent');
const until = (what: string, ok: () => boolean, opts: { timeoutMs: number; intervalMs?: number }) => eventually(what, () => Promise.resolve(ok() ? true : undefined), opts);
const timings = { leaseDurationSeconds: 3, renewDeadlineSeconds: 2, retryPeriodSeconds: 1 };

describe('LeaderElector', () => {
  let ns: { name: string; cleanup: () => Promise<void> };
  const electors: LeaderElector[] = [];
  before(async () => {
    ns = await testNamespace('leader');
  });
  // A failed assertion must not leave a campaign running (it would keep the test process alive).
  after(async () => {
    for (const e of electors) await e.stop();
    await ns?.cleanup();
  });

  const lease = async (name: string): Promise<Json | null> => (await kubeApi()).get<Json>({ apiVersion: 'coordination.k8s.io/v1', kind: 'Lease', namespace: ns.name, name });

  const candidate = async (name: string, identity: string) => {
    const elector = new LeaderElector({ kube: await kubeApi(), namespace: ns.name, name, identity, log, ...timings });
    electors.push(elector);
    const events: string[] = [];
    elector.start({ onStartedLeading: () => void events.push('started'), onStoppedLeading: () => void events.push('stopped') });
    return { elector, events };
  };

  it('elects one leader; on stop it releases the Lease and the other takes over without waiting for expiry', async () => {
    const a = await candidate('pair', 'a');
    await until('a leads', () => a.elector.leading, { timeoutMs: 10_000 });
    const b = await candidate('pair', 'b');
    // Several lease durations: a keeps renewing, so b never leads.
    for (let i = 0; i < 8; i++) {
      await sleep(1000);
      assert.equal(b.elector.leading, false, 'b never leads while a renews');
      assert.equal(a.elector.leading, true);
    }
    const held = await lease('pair');
    assert.equal(held!.spec.holderIdentity, 'a');
    assert.equal(held!.spec.leaseDurationSeconds, 3);

    await a.elector.stop();
    assert.deepEqual(a.events, ['started', 'stopped']);
    // Released, not left to expire: once stop() returns the Lease names no holder (or b, already), so b may take it
    // at its next try instead of a lease duration later. (Asserted on the Lease, not on the clock: a loaded machine
    // delays b's next try, not the release: a loaded CI run took longer than 2.6 s here.)
    const released = await lease('pair');
    assert.ok([undefined, '', 'b'].includes(released!.spec.holderIdentity as string | undefined), `holder after stop: ${String(released!.spec.holderIdentity)}`);
    await until('b leads', () => b.elector.leading, { timeoutMs: 10_000, intervalMs: 50 });
    const taken = await lease('pair');
    assert.equal(taken!.spec.holderIdentity, 'b');
    assert.equal(taken!.spec.leaseTransitions, 1, 'one change of holder');
    await b.elector.stop();
    assert.equal((await lease('pair'))!.spec.holderIdentity, undefined, 'released on stop');
  });

  it("takes a dead holder's Lease only after a lease duration without renewal", async () => {
    await kube(['-n', ns.name, 'create', '-f', '-'], JSON.stringify({
      apiVersion: 'coordination.k8s.io/v1', kind: 'Lease', metadata: { name: 'ghost', namespace: ns.name },
      spec: { holderIdentity: 'dead-replica', leaseDurationSeconds: 3, renewTime: new Date().toISOString().replace('Z', '000Z'), leaseTransitions: 2 },
    }));
    const startedAt = Date.now();
    const c = await candidate('ghost', 'c');
    try {
      await until('c leads', () => c.elector.leading, { timeoutMs: 10_000, intervalMs: 50 });
      const waited = Date.now() - startedAt;
      assert.ok(waited >= 3_000, `waited only ${waited} ms for a 3 s lease`);
      const taken = await lease('ghost');
      assert.equal(taken!.spec.holderIdentity, 'c');
      assert.equal(taken!.spec.leaseTransitions, 3);
    } finally {
      await c.elector.stop();
    }
  });

  it('a replica whose leader-only work cannot start resigns, and another takes over', async () => {
    const a = new LeaderElector({ kube: await kubeApi(), namespace: ns.name, name: 'resign', identity: 'a', log, ...timings });
    electors.push(a);
    let starts = 0;
    const leading = runWhileLeader(a, () => {
      starts++;
      return Promise.reject(new Error('watcher could not start'));
    }, log);
    await until('a tried to start', () => starts > 0, { timeoutMs: 10_000 });
    const b = await candidate('resign', 'b');
    await until('b leads', () => b.elector.leading, { timeoutMs: 10_000, intervalMs: 50 });
    assert.equal((await lease('resign'))!.spec.holderIdentity, 'b');
    assert.equal(starts, 1, 'a stood aside instead of taking the Lease straight back');
    await leading.stop();
    await b.elector.stop();
  });

  // A CI run caught the leader keeping the Lease after stop(): the renewal in flight when stop() aborted it had
  // landed, so the release was sent with an older resourceVersion, got 409 and gave up. Here another writer changes
  // the Lease between the leader's renewals (a long retry period keeps a renewal from refreshing its copy first).
  it('releases the Lease on stop even when its copy of it is stale', async () => {
    const slow = new LeaderElector({ kube: await kubeApi(), namespace: ns.name, name: 'stale', identity: 'e', log, leaseDurationSeconds: 60, renewDeadlineSeconds: 40, retryPeriodSeconds: 30 });
    electors.push(slow);
    slow.start({ onStartedLeading: () => undefined, onStoppedLeading: () => undefined });
    await until('e leads', () => slow.leading, { timeoutMs: 10_000, intervalMs: 50 });
    await kube(['-n', ns.name, 'label', 'lease', 'stale', 'touched=yes']);
    await slow.stop();
    const released = await lease('stale');
    assert.equal(released!.spec.holderIdentity, undefined, 'released on stop');
    assert.equal(released!.metadata.labels.touched, 'yes', "the other writer's change kept");
  });

  it('steps down when another writer takes the Lease away', async () => {
    const d = await candidate('stolen', 'd');
    try {
      await until('d leads', () => d.elector.leading, { timeoutMs: 10_000 });
      await kube(['-n', ns.name, 'patch', 'lease', 'stolen', '--type=merge', '-p', JSON.stringify({ spec: { holderIdentity: 'intruder', leaseDurationSeconds: 60 } })]);
      await until('d stepped down', () => !d.elector.leading, { timeoutMs: 5_000, intervalMs: 50 });
      assert.deepEqual(d.events, ['started', 'stopped']);
    } finally {
      await d.elector.stop();
    }
    assert.equal((await lease('stolen'))!.spec.holderIdentity, 'intruder', 'a replica that lost the Lease does not release it');
  });
});
