// Disruptive: the operator SIGKILLed while notifications are being sent (the receiver on 127.0.0.1 holds the
// requests open, unanswered). Temporal retries each delivery once the operator is back: every notification the
// rollout made arrives at least once, and deduplicated by its id exactly once, numbered without a gap.
import assert from 'node:assert/strict';
import { createServer, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { after, before, describe, it } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { control } from '../../client/control.ts';
import { appManifest, closeTemporal, kube, temporalClient, type Json } from '../../testkit/apps.ts';
import { waitCanaryPhase } from '../../testkit/canary.ts';
import { eventually } from '../../lib/poll.ts';
import { operatorSuite } from '../../testkit/suite.ts';

const apply = (obj: Json) => kube(['apply', '--server-side', '--field-manager=test-user', '--force-conflicts', '-f', '-'], JSON.stringify(obj));

describe('notifications survive an operator crash', () => {
  /** Requests answered 2xx: what the receiver took. */
  const taken: { id: string; body: Record<string, unknown> }[] = [];
  /** Requests held open, unanswered, while the receiver hangs. */
  const held: ServerResponse[] = [];
  let hanging = true;
  const server = createServer((req, res) => {
    let body = '';
    req.on('data', (c: Buffer) => { body += c.toString(); });
    req.on('end', () => {
      if (hanging) {
        held.push(res);
        return;
      }
      taken.push({ id: String(req.headers['idempotency-key']), body: JSON.parse(body) as Record<string, unknown> });
      res.writeHead(204).end();
    });
  });
  let base = '';
  before(async () => {
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  });
  after(async () => {
    for (const r of held) r.destroy();
    server.closeAllConnections();
    await new Promise<void>((resolve) => server.close(() => resolve()));
  });
  const s = operatorSuite('notifycrash');

  it('SIGKILL with deliveries in flight: each notification arrives, each id once after dedup', async () => {
    await apply(appManifest(s.ns, 'shop', {
      image: 'nginx:1.25', replicas: 1,
      serviceMesh: { enabled: true, canary: { enabled: true, canaryVersion: 'v2', weight: 20, healthGates: { interval: '1s', failureThreshold: 3, initialDelay: '2s' } } },
      notifications: [{ name: 'team', url: `${base}/hook` }],
    }));
    await waitCanaryPhase(s.ns, 'shop', 'Paused');
    // The paused notification's request is in flight (held open) when the operator dies.
    await eventually('deliveries in flight', () => Promise.resolve(held.length >= 2 ? true : undefined), { timeoutMs: 30_000, intervalMs: 100 });
    assert.equal(taken.length, 0, 'nothing taken before the crash');
    await s.op.stop('SIGKILL');
    await closeTemporal();
    hanging = false;
    await sleep(1000);
    await s.op.restart();
    // An attempt cut off by the crash is retried once its start-to-close timeout (30 s) passes.
    await eventually('started and paused taken after the crash', () => Promise.resolve(
      taken.some((t) => t.body['event'] === 'started') && taken.some((t) => t.body['event'] === 'paused') ? true : undefined), { timeoutMs: 120_000, intervalMs: 250 });
    await control(await temporalClient(), 'promote', s.ns, 'shop');
    await waitCanaryPhase(s.ns, 'shop', 'Promoted');
    await eventually('promoted taken', () => Promise.resolve(taken.some((t) => t.body['event'] === 'promoted') ? true : undefined), { timeoutMs: 60_000, intervalMs: 250 });

    const unique = [...new Map(taken.map((t) => [t.id, t.body])).values()].sort((a, b) => Number(a['seq']) - Number(b['seq']));
    assert.equal(unique[0]?.['event'], 'started');
    assert.equal(unique.at(-1)?.['event'], 'promoted');
    assert.ok(unique.some((m) => m['event'] === 'paused'));
    assert.deepEqual(unique.map((m) => m['seq']), unique.map((_, i) => i + 1), `every notification arrived: ${JSON.stringify(unique.map((m) => m['event']))}`);
  });
});
