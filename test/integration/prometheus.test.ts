// Proof that the stack's Prometheus is real: it finds a target through a file written by addScrapeTarget, scrapes the
// server below, and its query API answers with what that server served. A fake Prometheus would never scrape it.
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { after, before, describe, it } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { addScrapeTarget, removeScrapeTarget, type StackInfo } from '../../stack/stack.ts';
import { prometheusRelease } from '../../stack/versions.ts';
import { testEnv } from '../../testkit/env.ts';
import { eventually } from '../../lib/poll.ts';

interface Sample { metric: Record<string, string>; value: [number, string] }

/** An instant query against the real API; throws on anything but success, so `eventually` reports what went wrong. */
async function query(prometheusUrl: string, promql: string): Promise<Sample[]> {
  const res = await fetch(`${prometheusUrl}/api/v1/query?${new URLSearchParams({ query: promql }).toString()}`);
  const body = await res.json() as { status: string; error?: string; data?: { resultType: string; result: Sample[] } };
  if (body.status !== 'success' || body.data?.resultType !== 'vector') throw new Error(`query ${promql}: HTTP ${res.status} ${body.error ?? JSON.stringify(body)}`);
  return body.data.result;
}

async function activeTargets(prometheusUrl: string): Promise<any[]> {
  const res = await fetch(`${prometheusUrl}/api/v1/targets?state=active`);
  if (!res.ok) throw new Error(`/api/v1/targets: HTTP ${res.status}`);
  return ((await res.json()) as { data: { activeTargets: any[] } }).data.activeTargets;
}

describe('local Prometheus', () => {
  // Unique per run, so runs sharing one stack (STACK_STATE_DIR) never see each other's job.
  const job = `proof-${randomBytes(3).toString('hex')}`;
  let prometheusUrl: string;
  let stack: Pick<StackInfo, 'stateDir'> | undefined;
  let server: Server | undefined;
  let target: string;
  let served = 0;
  let scrapes = 0;

  before(async () => {
    const env = await testEnv();
    prometheusUrl = env.prometheusUrl;
    stack = env.stack ?? assert.fail('STACK_STATE_DIR is not set: scrape targets are files in the stack state folder; run with `npm test`');
    server = createServer((req, res) => {
      if (req.url !== '/metrics') return void res.writeHead(404).end();
      scrapes++;
      res.writeHead(200, { 'Content-Type': 'text/plain; version=0.0.4; charset=utf-8' });
      res.end(`# HELP proof_served_total Requests the test says it served.\n# TYPE proof_served_total counter\nproof_served_total ${served}\n`);
    });
    const listening = server;
    await new Promise<void>((resolve) => listening.listen(0, '127.0.0.1', resolve));
    target = `127.0.0.1:${(listening.address() as AddressInfo).port}`;
  });

  after(async () => {
    if (stack) await removeScrapeTarget(stack, job);
    await new Promise((resolve) => (server ? server.close(resolve) : resolve(undefined)));
  });

  it('is the pinned release and scrapes itself', async () => {
    const info = await (await fetch(`${prometheusUrl}/api/v1/status/buildinfo`)).json() as { data: { version: string } };
    assert.equal(info.data.version, prometheusRelease());
    const up = await eventually('prometheus scraping itself', async () => {
      const r = await query(prometheusUrl, 'up{job="prometheus"}');
      return r.length ? r : undefined;
    }, { timeoutMs: 30_000 });
    assert.equal(up[0]!.value[1], '1');
  });

  it('scrapes a target added with addScrapeTarget, with the labels from its file', async () => {
    served = 42;
    await addScrapeTarget(stack!, { job, targets: [target], labels: { team: 'proof' } });
    const t = await eventually(`target ${target} healthy in /api/v1/targets`, async () => {
      const found = (await activeTargets(prometheusUrl)).find((x) => x.labels.job === job);
      if (found && found.health !== 'up') throw new Error(`target ${target} health ${found.health}: ${found.lastError}`);
      return found;
    }, { timeoutMs: 30_000 });
    assert.equal(t.scrapeUrl, `http://${target}/metrics`);
    assert.equal(t.labels.instance, target);
    assert.equal(t.labels.team, 'proof');
    assert.ok(scrapes > 0, 'the test server was scraped');

    const [sample] = await eventually('the served value in a query', async () => {
      const r = await query(prometheusUrl, `proof_served_total{job="${job}"}`);
      return r[0]?.value[1] === '42' ? r : undefined;
    }, { timeoutMs: 30_000 });
    assert.deepEqual(sample!.metric, { __name__: 'proof_served_total', job, instance: target, team: 'proof' });
  });

  it('follows the counter as the test increments it', async () => {
    served += 1000;
    await eventually('the incremented value in a query', async () => {
      const r = await query(prometheusUrl, `proof_served_total{job="${job}"}`);
      return r[0]?.value[1] === String(served) ? r : undefined;
    }, { timeoutMs: 30_000 });
    const [increase] = await query(prometheusUrl, `increase(proof_served_total{job="${job}"}[5m])`);
    // increase() extrapolates to the window's edges, so it is at least what was added, never less.
    assert.ok(Number(increase?.value[1]) >= 1000, `increase over 5m: ${JSON.stringify(increase)}`);
  });

  it('stops scraping a target removed with removeScrapeTarget', async () => {
    await removeScrapeTarget(stack!, job);
    await eventually(`job ${job} gone from /api/v1/targets`, async () => {
      return (await activeTargets(prometheusUrl)).some((x) => x.labels.job === job) ? undefined : true;
    }, { timeoutMs: 30_000 });
    // A dropped target's series are marked stale at once, so an instant query no longer returns them.
    await eventually(`up{job="${job}"} stale`, async () => ((await query(prometheusUrl, `up{job="${job}"}`)).length === 0 ? true : undefined), { timeoutMs: 30_000 });
    const before = scrapes;
    await sleep(3000);
    assert.equal(scrapes, before, 'no scrape after the target was removed');
  });
});
