// Rollout notifications end to end: a real operator (its allowlist set to 127.0.0.0/8) tells a receiver this test
// runs on 127.0.0.1 of a canary's start, pause and promotion, by a URL in the spec and by one in a Secret; each
// message arrives with a stable id, at least once, so deduplicated by id each is there exactly once, in order.
import assert from 'node:assert/strict';
import { createServer, type IncomingHttpHeaders } from 'node:http';
import type { AddressInfo } from 'node:net';
import { after, before, describe, it } from 'node:test';
import { control } from '../../client/control.ts';
import { appManifest, kube, temporalClient, type Json } from '../../testkit/apps.ts';
import { waitCanaryPhase } from '../../testkit/canary.ts';
import { eventually } from '../../lib/poll.ts';
import { operatorSuite } from '../../testkit/suite.ts';

interface Received {
  path: string;
  headers: IncomingHttpHeaders;
  body: Record<string, unknown>;
}

const apply = (obj: Json) => kube(['apply', '--server-side', '--field-manager=test-user', '--force-conflicts', '-f', '-'], JSON.stringify(obj));

describe('rollout notifications', () => {
  const received: Received[] = [];
  const server = createServer((req, res) => {
    let body = '';
    req.on('data', (c: Buffer) => { body += c.toString(); });
    req.on('end', () => {
      received.push({ path: req.url ?? '', headers: req.headers, body: JSON.parse(body) as Record<string, unknown> });
      res.writeHead(204).end();
    });
  });
  let base = '';
  before(async () => {
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  });
  after(() => new Promise<void>((resolve) => server.close(() => resolve())));
  const s = operatorSuite('notify', { operator: { extraArgs: ['--check-allowed-hosts=127.0.0.0/8'] } });

  /** What `path` received, deduplicated by Idempotency-Key (a redelivery counts once), in the order of the messages' seq. */
  const deduped = (path: string) => {
    const byId = new Map(received.filter((r) => r.path === path).map((r) => [String(r.headers['idempotency-key']), r]));
    return [...byId.values()];
  };
  const events = (path: string) => deduped(path).map((r) => r.body).sort((a, b) => Number(a['seq']) - Number(b['seq']));

  it('a canary tells of its start, pause and promotion, once per id, in order; a URL from a Secret works', async () => {
    await apply({ apiVersion: 'v1', kind: 'Secret', metadata: { name: 'hooks', namespace: s.ns }, stringData: { url: `${base}/from-secret` } });
    await apply(appManifest(s.ns, 'shop', {
      image: 'nginx:1.25', replicas: 1,
      serviceMesh: { enabled: true, canary: { enabled: true, canaryVersion: 'v2', weight: 20, healthGates: { interval: '1s', failureThreshold: 3, initialDelay: '2s' } } },
      notifications: [
        { name: 'team', url: `${base}/hook` },
        { name: 'chat', urlFrom: { secretKeyRef: { name: 'hooks', key: 'url' } }, format: 'slack', events: ['started', 'promoted'] },
      ],
    }));
    await waitCanaryPhase(s.ns, 'shop', 'Paused');
    await eventually('started and paused told', () => Promise.resolve(events('/hook').some((m) => m['event'] === 'paused') ? true : undefined), { timeoutMs: 30_000, intervalMs: 200 });
    await control(await temporalClient(), 'promote', s.ns, 'shop', 'looks good');
    await waitCanaryPhase(s.ns, 'shop', 'Promoted');
    await eventually('promoted told to both', () => Promise.resolve(
      events('/hook').some((m) => m['event'] === 'promoted') && deduped('/from-secret').length >= 2 ? true : undefined), { timeoutMs: 30_000, intervalMs: 200 });

    const told = events('/hook');
    assert.equal(told[0]?.['event'], 'started');
    assert.equal(told.at(-1)?.['event'], 'promoted');
    assert.ok(told.findIndex((m) => m['event'] === 'paused') > 0, JSON.stringify(told.map((m) => m['event'])));
    assert.deepEqual(told.map((m) => m['seq']), told.map((_, i) => i + 1), 'numbered without a gap');
    for (const m of told) {
      assert.equal(m['application'], 'shop');
      assert.equal(m['namespace'], s.ns);
      assert.equal(m['version'], 'v2');
      assert.equal(m['image'], 'nginx:v2');
      assert.match(String(m['id']), new RegExp(`^application/${s.ns}/shop/canary/v2@\\d+/${String(m['seq'])}-${String(m['event'])}$`));
    }
    assert.equal(told.at(-1)?.['phase'], 'Promoted');
    assert.match(String(told.at(-1)?.['message']), /looks good/);
    // Every request carried its id twice, as a header and in the body.
    for (const r of received.filter((x) => x.path === '/hook')) assert.equal(r.headers['idempotency-key'], r.body['id']);

    // The Secret's receiver: Slack messages, only the kinds it asked for, with the same ids.
    const chat = deduped('/from-secret');
    const ids = (e: string) => String(told.find((m) => m['event'] === e)?.['id']);
    assert.deepEqual(chat.map((r) => String(r.headers['idempotency-key'])).sort(), [ids('started'), ids('promoted')].sort());
    for (const r of chat) assert.match(String(r.body['text']), new RegExp(`^Rollout of ${s.ns}/shop v2 \\(nginx:v2\\) (started|promoted): `));
  });
});
