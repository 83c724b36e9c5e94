// The Reflector against a scripted API server: paged lists, watches resumed from the last version, a relist after
// an expired version that reports what was deleted meanwhile, metadata-only collections, and retries.
import assert from 'node:assert/strict';
import type { ServerResponse } from 'node:http';
import { describe, test } from 'node:test';
import { Kube, type KubeObject } from '../../kube/client.ts';
import { Reflector, type ReflectorEvent } from '../../kube/reflector.ts';
import { eventually } from '../../lib/poll.ts';
import { fakeApiServer } from '../fixtures/fake-api-server.ts';

const path = '/api/v1/namespaces/ns/services';
const obj = (name: string, rv: number): KubeObject => ({ apiVersion: 'v1', kind: 'Service', metadata: { name, namespace: 'ns', resourceVersion: String(rv), managedFields: [{ manager: 'm' }] } });

/** What the scripted server answers: list pages, and for each watch (in order) the events to send before it ends the stream. */
interface Script {
  pages: { items: KubeObject[]; rv: number; continue?: string }[][];
  watches: ({ type: string; object: unknown }[] | 'hold')[];
}

function serve(script: Script) {
  const requests: { watch: boolean; query: Record<string, string>; accept: string }[] = [];
  let lists = 0;
  let watches = 0;
  const api = fakeApiServer((req, res, url) => {
    const query = Object.fromEntries(url.searchParams);
    const watch = query['watch'] === '1';
    requests.push({ watch, query, accept: req.headers.accept ?? '' });
    res.setHeader('Content-Type', 'application/json');
    if (!watch) {
      const list = script.pages[Math.min(lists, script.pages.length - 1)]!;
      // The first page, or the one after the page whose continue token came back.
      const index = query['continue'] ? list.findIndex((p) => p.continue === query['continue']) + 1 : 0;
      const page = list[index]!;
      if (!page.continue) lists++;
      res.end(JSON.stringify({ items: page.items, metadata: { resourceVersion: String(page.rv), ...(page.continue ? { continue: page.continue } : {}) } }));
      return;
    }
    const events = script.watches[watches++] ?? 'hold';
    if (events === 'hold') return hold(res);
    res.end(events.map((e) => `${JSON.stringify(e)}\n`).join(''));
  });
  return { api, requests };
}

/** Keeps a watch open without events (as a quiet collection does). */
function hold(res: ServerResponse): void {
  res.writeHead(200, { 'Content-Type': 'application/json' });
  res.write('');
}

async function record(script: Script, opts: { metadataOnly?: boolean } = {}) {
  const { api, requests } = serve(script);
  const server = await api;
  const events: [ReflectorEvent, string, string][] = [];
  const errors: string[] = [];
  const reflector = new Reflector({
    kube: new Kube(server.kc), path, pageSize: 2, ...opts,
    onEvent: (type, o) => events.push([type, o.metadata.name, o.metadata.resourceVersion ?? '']),
    onError: (err) => errors.push(err.message),
  });
  return { server, requests, events, errors, reflector };
}

describe('Reflector', () => {
  test('lists in pages, then watches from the list\'s version, resuming from the last version seen (bookmarks too)', async () => {
    const r = await record({
      pages: [[{ items: [obj('a', 1), obj('b', 2)], rv: 10, continue: 'next' }, { items: [obj('c', 3)], rv: 10 }]],
      watches: [
        [{ type: 'MODIFIED', object: obj('a', 11) }, { type: 'ADDED', object: obj('d', 12) }, { type: 'BOOKMARK', object: { metadata: { resourceVersion: '15' } } }],
        [{ type: 'DELETED', object: obj('b', 16) }],
        'hold',
      ],
    });
    try {
      await r.reflector.start();
      await eventually('every event', () => Promise.resolve(r.events.length === 6 ? true : undefined), { timeoutMs: 5000, intervalMs: 10 });
      assert.deepEqual(r.events, [['add', 'a', '1'], ['add', 'b', '2'], ['add', 'c', '3'], ['update', 'a', '11'], ['add', 'd', '12'], ['delete', 'b', '16']]);
      assert.equal(r.reflector.synced, true);
      const lists = r.requests.filter((q) => !q.watch);
      assert.deepEqual(lists.map((q) => q.query['continue'] ?? ''), ['', 'next']);
      assert.equal(lists[0]!.query['limit'], '2');
      await eventually('third watch', () => Promise.resolve(r.requests.filter((q) => q.watch).length === 3 ? true : undefined), { timeoutMs: 5000, intervalMs: 10 });
      assert.deepEqual(r.requests.filter((q) => q.watch).map((q) => q.query['resourceVersion']), ['10', '15', '16']);
      assert.deepEqual(r.errors, []);
    } finally {
      await r.reflector.stop();
      await r.server.close();
    }
  });

  test('an expired version (410) relists at once and reports what was deleted meanwhile, with its last metadata', async () => {
    const r = await record({
      pages: [[{ items: [obj('a', 1), obj('b', 2)], rv: 10 }], [{ items: [obj('a', 1), obj('c', 20)], rv: 20 }]],
      watches: [[{ type: 'ERROR', object: { kind: 'Status', code: 410, reason: 'Expired', message: 'too old resource version' } }], 'hold'],
    });
    try {
      await r.reflector.start();
      await eventually('relisted', () => Promise.resolve(r.events.length === 4 ? true : undefined), { timeoutMs: 5000, intervalMs: 10 });
      // a is unchanged: no event; c is new; b went while the version was expired.
      assert.deepEqual(r.events, [['add', 'a', '1'], ['add', 'b', '2'], ['add', 'c', '20'], ['delete', 'b', '2']]);
      assert.deepEqual(r.errors, [], 'a relist is not an error');
    } finally {
      await r.reflector.stop();
      await r.server.close();
    }
  });

  test('asks for metadata only when that is all it needs', async () => {
    const r = await record({ pages: [[{ items: [obj('a', 1)], rv: 10 }]], watches: ['hold'] }, { metadataOnly: true });
    try {
      await r.reflector.start();
      await eventually('watching', () => Promise.resolve(r.requests.some((q) => q.watch) ? true : undefined), { timeoutMs: 5000, intervalMs: 10 });
      for (const q of r.requests) assert.match(q.accept, /as=PartialObjectMetadata(List)?;g=meta\.k8s\.io;v=v1/);
    } finally {
      await r.reflector.stop();
      await r.server.close();
    }
  });

  test('a list that fails is reported and tried again; start() does not wait for it to succeed', async () => {
    let fail = true;
    const api = await fakeApiServer((req, res, url) => {
      if (url.searchParams.get('watch') === '1') return hold(res);
      if (fail) {
        res.statusCode = 503;
        res.end(JSON.stringify({ kind: 'Status', reason: 'ServiceUnavailable', message: 'storage is (re)initializing' }));
        return;
      }
      res.end(JSON.stringify({ items: [obj('a', 1)], metadata: { resourceVersion: '5' } }));
    });
    const errors: number[] = [];
    const names: string[] = [];
    const reflector = new Reflector({ kube: new Kube(api.kc), path, onEvent: (_t, o) => names.push(o.metadata.name), onError: (_e, retryInMs) => errors.push(retryInMs) });
    try {
      await reflector.start();
      assert.equal(reflector.synced, false);
      assert.deepEqual(errors, [1000]);
      fail = false;
      await eventually('listed after the retry', () => Promise.resolve(reflector.synced ? true : undefined), { timeoutMs: 5000, intervalMs: 20 });
      assert.deepEqual(names, ['a']);
    } finally {
      await reflector.stop();
      await api.close();
    }
  });
});
