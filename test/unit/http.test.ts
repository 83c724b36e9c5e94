// lib/http.ts: the one GET the stack's health checks use.
import assert from 'node:assert/strict';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { describe, test } from 'node:test';
import { httpGet } from '../../lib/http.ts';

describe('httpGet', () => {
  test('answers the status and body, whatever the status', async () => {
    const server = createServer((req, res) => res.writeHead(req.url === '/ok' ? 200 : 503).end(`at ${req.url}`));
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    const base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
    try {
      assert.deepEqual(await httpGet(`${base}/ok`), { url: `${base}/ok`, status: 200, body: 'at /ok' });
      assert.deepEqual(await httpGet(`${base}/down`), { url: `${base}/down`, status: 503, body: 'at /down' });
    } finally {
      await new Promise<void>((resolve) => server.close(() => resolve()));
    }
  });

  test('rejects naming the URL and the cause', async () => {
    const server = createServer();
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    const port = (server.address() as AddressInfo).port;
    await new Promise<void>((resolve) => server.close(() => resolve()));
    await assert.rejects(httpGet(`http://127.0.0.1:${port}/healthz`), new RegExp(`GET http://127.0.0.1:${port}/healthz: .*ECONNREFUSED`));
  });

  test('gives up on a server that does not answer', async () => {
    const server = createServer(() => { /* never answers */ });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/`;
    try {
      await assert.rejects(httpGet(url, { timeoutMs: 200 }), /no answer within 0.2 s/);
    } finally {
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    }
  });
});
