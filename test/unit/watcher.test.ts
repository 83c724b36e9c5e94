// The watcher's coalescing, against a scripted API server and a recording Temporal client: a lone change is
// signalled at once; a burst within the window becomes one more signal at its end, with the strongest reason.
import type { Client } from '@temporalio/client';
import assert from 'node:assert/strict';
import type { ServerResponse } from 'node:http';
import { describe, test } from 'node:test';
import { API_VERSION, KIND } from '../../api/constants.ts';
import { Kube } from '../../kube/client.ts';
import { RecentObjects } from '../../kube/recent.ts';
import { eventually } from '../../lib/poll.ts';
import { createLogger } from '../../operator/log.ts';
import { Watcher } from '../../watcher/watcher.ts';
import type { ChangeSignal } from '../../workflows/contract.ts';
import { fakeApiServer } from '../fixtures/fake-api-server.ts';

const app = (generation: number, rv: number) => ({ apiVersion: API_VERSION, kind: KIND, metadata: { name: 'shop', namespace: 'ns', generation, resourceVersion: String(rv), uid: 'u1' } });

const namespace = (deleting: boolean, rv: number) => ({ apiVersion: 'v1', kind: 'Namespace', metadata: { name: 'ns', resourceVersion: String(rv), ...(deleting ? { deletionTimestamp: '2026-12-03T00:00:00Z' } : {}) } });

/**
 * A watcher of namespace `ns` against a fake API server that lists `applications` (and the namespace, not being
 * deleted, at `listVersion`), records PATCHes (answered with `patchAnswer`) and the signals to Temporal; `send`
 * writes a watch event on the watch whose path ends with `end`.
 */
async function namespaceScenario(o: { applications: unknown[]; patchAnswer: unknown; listVersion: number; recent?: RecentObjects }) {
  const watches = new Map<string, ServerResponse>();
  const patches: { path: string; body: unknown }[] = [];
  const api = await fakeApiServer((req, res, url) => {
    res.setHeader('Content-Type', 'application/json');
    if (req.method === 'PATCH') {
      let body = '';
      req.on('data', (c: Buffer) => { body += c.toString(); });
      req.on('end', () => {
        patches.push({ path: url.pathname, body: JSON.parse(body) as unknown });
        res.end(JSON.stringify(o.patchAnswer));
      });
      return;
    }
    if (!url.pathname.includes('/namespaces/') && !url.pathname.endsWith('/namespaces')) {
      res.end(JSON.stringify({ resources: [{ name: 'services' }, { name: 'deployments' }] }));
      return;
    }
    if (url.searchParams.get('watch') !== '1') {
      const items = url.pathname.endsWith('/applications') ? o.applications : url.pathname === '/api/v1/namespaces' ? [namespace(false, o.listVersion)] : [];
      res.end(JSON.stringify({ items, metadata: { resourceVersion: String(o.listVersion) } }));
      return;
    }
    res.writeHead(200);
    watches.set(url.pathname, res);
  });
  const signals: ChangeSignal[] = [];
  const record = (sig: ChangeSignal) => {
    signals.push(sig);
    return Promise.resolve();
  };
  const temporal = {
    workflow: {
      signalWithStart: (_type: string, w: { signalArgs: [ChangeSignal] }) => record(w.signalArgs[0]),
      getHandle: () => ({ signal: (_s: unknown, arg: ChangeSignal) => record(arg) }),
    },
  } as unknown as Client;
  const watcher = new Watcher({ kube: new Kube(api.kc), temporal, taskQueue: 'q', namespaces: ['ns'], coalesceMs: 200, ...(o.recent ? { recent: o.recent } : {}), log: createLogger('silent') });
  const send = (end: string, type: string, obj: unknown) => [...watches.entries()].find(([k]) => k.endsWith(end))![1].write(`${JSON.stringify({ type, object: obj })}\n`);
  return { api, watches, patches, signals, watcher, send };
}

describe('Watcher coalescing', () => {
  test('a namespace marked for deletion: its Applications\' finalizers are released ahead, except one with a rollout in flight', async () => {
    const fin = ['myapp.example.com/finalizer'];
    const shop = (rv: number, finalizers = fin) => ({ apiVersion: API_VERSION, kind: KIND, metadata: { name: 'shop', namespace: 'ns', generation: 1, resourceVersion: String(rv), uid: 'u1', finalizers }, status: { phase: 'Running' } });
    const cart = { apiVersion: API_VERSION, kind: KIND, metadata: { name: 'cart', namespace: 'ns', generation: 1, resourceVersion: '2', uid: 'u2', finalizers: fin }, status: { canary: { phase: 'Progressing' } } };
    const { api, watches, patches, signals, watcher, send } = await namespaceScenario({ applications: [shop(1), cart], patchAnswer: shop(10, []), listVersion: 3, recent: new RecentObjects() });
    try {
      await watcher.start();
      await eventually('watching', () => Promise.resolve(['/applications', '/v1/namespaces'].every((end) => [...watches.keys()].some((k) => k.endsWith(end))) ? true : undefined), { timeoutMs: 5000, intervalMs: 10 });
      await new Promise((r) => setTimeout(r, 500));
      const before = signals.length;
      assert.equal(patches.length, 0, 'nothing released while the namespace stays');
      send('/v1/namespaces', 'MODIFIED', namespace(true, 4));
      await eventually('shop\'s finalizer released', () => Promise.resolve(patches.length === 1 ? true : undefined), { timeoutMs: 5000, intervalMs: 10 });
      assert.deepEqual(patches, [{ path: '/apis/myapp.example.com/v1/namespaces/ns/applications/shop', body: { metadata: { resourceVersion: '1', finalizers: [] } } }],
        'released on the version in hand, before the namespace controller reaches it; cart\'s rollout keeps its finalizer');
      // The release's own echo changes nothing; the deletion, which no finalizer holds now, is the workflow's news.
      send('/applications', 'MODIFIED', shop(10, []));
      await new Promise((r) => setTimeout(r, 400));
      assert.equal(signals.length, before, 'no signal for the release');
      send('/applications', 'DELETED', shop(10, []));
      await eventually('the deletion signalled', () => Promise.resolve(signals.length === before + 1 ? true : undefined), { timeoutMs: 5000, intervalMs: 10 });
      assert.deepEqual(signals[before], { reason: 'deleted', namespaceGoing: true });
      await new Promise((r) => setTimeout(r, 300));
      assert.equal(patches.length, 1, 'one release, not a second when the deletion arrives');
    } finally {
      await watcher.stop();
      await api.close();
    }
  });

  test('the first change after a quiet spell is signalled at once; a burst within the window becomes one more signal', async () => {
    let appWatch: ServerResponse | undefined;
    const api = await fakeApiServer((_req, res, url) => {
      res.setHeader('Content-Type', 'application/json');
      const watch = url.searchParams.get('watch') === '1';
      if (!watch) {
        res.end(JSON.stringify({ items: url.pathname.endsWith('/applications') ? [app(1, 1)] : [], metadata: { resourceVersion: '1' } }));
        return;
      }
      res.writeHead(200);
      if (url.pathname.endsWith('/applications')) appWatch = res;
    });
    const signals: { at: number; signal: ChangeSignal }[] = [];
    const temporal = {
      workflow: {
        signalWithStart: (_type: string, o: { signalArgs: [ChangeSignal] }) => {
          signals.push({ at: Date.now(), signal: o.signalArgs[0] });
          return Promise.resolve();
        },
      },
    } as unknown as Client;
    const windowMs = 3000;
    const watcher = new Watcher({ kube: new Kube(api.kc), temporal, taskQueue: 'q', namespaces: ['ns'], coalesceMs: windowMs, log: createLogger('silent') });
    try {
      await watcher.start();
      await eventually('the resync of the listed app', () => Promise.resolve(signals.length === 1 ? true : undefined), { timeoutMs: 5000, intervalMs: 10 });
      assert.equal(signals[0]!.signal.reason, 'resync');
      await eventually('watching', () => Promise.resolve(appWatch ? true : undefined), { timeoutMs: 5000, intervalMs: 10 });
      // Quiet for a window; then a spec change goes out at once.
      await new Promise((r) => setTimeout(r, windowMs));
      const sent = Date.now();
      appWatch!.write(`${JSON.stringify({ type: 'MODIFIED', object: app(2, 2) })}\n`);
      await eventually('the spec change signalled', () => Promise.resolve(signals.length === 2 ? true : undefined), { timeoutMs: 5000, intervalMs: 10 });
      assert.ok(signals[1]!.at - sent < windowMs / 2, `signalled ${signals[1]!.at - sent} ms after the event, not at the end of the window`);
      // Two more changes right after: one signal, once the window since the last one has passed.
      appWatch!.write(`${JSON.stringify({ type: 'MODIFIED', object: app(3, 3) })}\n`);
      appWatch!.write(`${JSON.stringify({ type: 'MODIFIED', object: app(4, 4) })}\n`);
      await eventually('the burst signalled', () => Promise.resolve(signals.length === 3 ? true : undefined), { timeoutMs: 5000, intervalMs: 10 });
      assert.ok(signals[2]!.at - signals[1]!.at >= windowMs - 50, 'the burst waited for the window');
      await new Promise((r) => setTimeout(r, windowMs));
      assert.deepEqual(signals.map((s) => s.signal.reason), ['resync', 'spec', 'spec']);
    } finally {
      await watcher.stop();
      await api.close();
    }
  });

  test('a burst of child edits and deletions is one signal naming every child, whatever its strongest reason', async () => {
    const watches = new Map<string, ServerResponse>();
    const api = await fakeApiServer((_req, res, url) => {
      res.setHeader('Content-Type', 'application/json');
      // Discovery (/api/v1, /apis/apps/v1...): only Services and Deployments are served, so only they are watched.
      if (!url.pathname.includes('/namespaces/') && !url.pathname.endsWith('/namespaces')) {
        res.end(JSON.stringify({ resources: [{ name: 'services' }, { name: 'deployments' }] }));
        return;
      }
      if (url.searchParams.get('watch') !== '1') {
        res.end(JSON.stringify({ items: url.pathname.endsWith('/applications') ? [app(1, 1)] : [], metadata: { resourceVersion: '1' } }));
        return;
      }
      res.writeHead(200);
      watches.set(url.pathname, res);
    });
    const signals: ChangeSignal[] = [];
    const temporal = {
      workflow: {
        signalWithStart: (_type: string, o: { signalArgs: [ChangeSignal] }) => {
          signals.push(o.signalArgs[0]);
          return Promise.resolve();
        },
      },
    } as unknown as Client;
    const watcher = new Watcher({ kube: new Kube(api.kc), temporal, taskQueue: 'q', namespaces: ['ns'], coalesceMs: 1000, log: createLogger('silent') });
    const owned = { ownerReferences: [{ apiVersion: API_VERSION, kind: KIND, name: 'shop', uid: 'u1', controller: true }] };
    const child = (apiVersion: string, kind: string, generation: number, rv: number) => ({ apiVersion, kind, metadata: { name: 'shop', namespace: 'ns', generation, resourceVersion: String(rv), uid: `${kind}-u`, ...owned } });
    const send = (path: string, type: string, obj: unknown) => watches.get(path)!.write(`${JSON.stringify({ type, object: obj })}\n`);
    try {
      await watcher.start();
      await eventually('watching the app and its children', () => Promise.resolve(
        ['/applications', '/services', '/deployments'].every((end) => [...watches.keys()].some((k) => k.endsWith(end))) ? true : undefined), { timeoutMs: 5000, intervalMs: 10 });
      const path = (end: string) => [...watches.keys()].find((k) => k.endsWith(end))!;
      // The children as the watch first sees them, then the spec change that goes out at once.
      send(path('/services'), 'ADDED', child('v1', 'Service', 1, 2));
      send(path('/deployments'), 'ADDED', child('apps/v1', 'Deployment', 1, 3));
      await new Promise((r) => setTimeout(r, 1100));
      send(path('/applications'), 'MODIFIED', app(2, 4));
      await eventually('the spec change', () => Promise.resolve(signals.some((x) => x.reason === 'spec') ? true : undefined), { timeoutMs: 5000, intervalMs: 10 });
      // Within the window: the Service deleted, the Deployment edited by hand, then the spec changed again.
      send(path('/services'), 'DELETED', child('v1', 'Service', 1, 5));
      send(path('/deployments'), 'MODIFIED', child('apps/v1', 'Deployment', 2, 6));
      send(path('/applications'), 'MODIFIED', app(3, 7));
      await eventually('the burst signalled', () => Promise.resolve(signals.filter((x) => x.reason === 'spec').length === 2 ? true : undefined), { timeoutMs: 5000, intervalMs: 10 });
      const burst = signals.at(-1)!;
      assert.equal(burst.reason, 'spec', 'the strongest reason');
      assert.deepEqual(burst.drifted?.sort(), ['Deployment/shop', 'Service/shop'], 'and every child the burst saw changed');
    } finally {
      await watcher.stop();
      await api.close();
    }
  });

  test('in a namespace being deleted, children going are no drift, the watcher releases the finalizer, and the deletion signal says the namespace goes', async () => {
    const { api, watches, patches, signals, watcher, send } = await namespaceScenario({
      applications: [{ ...app(1, 1), metadata: { ...app(1, 1).metadata, finalizers: ['myapp.example.com/finalizer'] } }], patchAnswer: app(1, 10), listVersion: 1,
    });
    const owned = { ownerReferences: [{ apiVersion: API_VERSION, kind: KIND, name: 'shop', uid: 'u1', controller: true }] };
    const child = (apiVersion: string, kind: string, rv: number) => ({ apiVersion, kind, metadata: { name: 'shop', namespace: 'ns', generation: 1, resourceVersion: String(rv), uid: `${kind}-u`, ...owned } });
    try {
      await watcher.start();
      await eventually('watching', () => Promise.resolve(
        ['/applications', '/services', '/deployments', '/v1/namespaces'].every((end) => [...watches.keys()].some((k) => k.endsWith(end))) ? true : undefined), { timeoutMs: 5000, intervalMs: 10 });
      await eventually('the start\'s resync', () => Promise.resolve(signals.length === 1 ? true : undefined), { timeoutMs: 5000, intervalMs: 10 });
      send('/services', 'ADDED', child('v1', 'Service', 2));
      await new Promise((r) => setTimeout(r, 300));
      // What the watches see, once listed: what a pass may take as existing or gone without a read.
      const service = { apiVersion: 'v1', kind: 'Service', namespace: 'ns', name: 'shop' };
      assert.equal(watcher.present(service), true);
      assert.equal(watcher.present({ apiVersion: API_VERSION, kind: KIND, namespace: 'ns', name: 'shop' }), true);
      assert.equal(watcher.present({ apiVersion: API_VERSION, kind: KIND, namespace: 'ns', name: 'other' }), false);
      assert.equal(watcher.present({ ...service, namespace: 'elsewhere' }), undefined, 'a namespace not watched here');
      assert.equal(watcher.present({ apiVersion: 'traefik.io/v1alpha1', kind: 'TraefikService', namespace: 'ns', name: 'shop' }), undefined, 'a kind not watched');
      // Before the namespace goes, a deleted Service is drift.
      send('/services', 'DELETED', child('v1', 'Service', 3));
      await eventually('the drift signalled', () => Promise.resolve(signals.length === 2 ? true : undefined), { timeoutMs: 5000, intervalMs: 10 });
      assert.equal(signals[1]!.reason, 'child');
      assert.equal(watcher.present(service), false);
      await new Promise((r) => setTimeout(r, 300));
      // The namespace is deleted: its controller deletes the children first, then the Application.
      send('/v1/namespaces', 'MODIFIED', namespace(true, 4));
      send('/services', 'ADDED', child('v1', 'Service', 5));
      send('/services', 'DELETED', child('v1', 'Service', 6));
      send('/deployments', 'ADDED', child('apps/v1', 'Deployment', 7));
      send('/deployments', 'DELETED', child('apps/v1', 'Deployment', 8));
      const deleting = { ...app(1, 9), metadata: { ...app(1, 9).metadata, finalizers: ['myapp.example.com/finalizer'], deletionTimestamp: '2026-12-03T00:00:01Z' } };
      send('/applications', 'MODIFIED', deleting);
      // No rollout in flight: the finalizer is released at once, on the version the watch delivered.
      await eventually('the finalizer released', () => Promise.resolve(patches.length === 1 ? true : undefined), { timeoutMs: 5000, intervalMs: 10 });
      assert.deepEqual(patches, [{ path: '/apis/myapp.example.com/v1/namespaces/ns/applications/shop', body: { metadata: { resourceVersion: '9', finalizers: [] } } }]);
      await new Promise((r) => setTimeout(r, 300));
      assert.equal(signals.length, 2, 'the workflow is told once the watch has seen the Application go, not before');
      // The DELETED event carries the object as last stored (etcd's previous value): our finalizer still on it.
      send('/applications', 'DELETED', deleting);
      await eventually('the deletion signalled', () => Promise.resolve(signals.length >= 3 ? true : undefined), { timeoutMs: 5000, intervalMs: 10 });
      await new Promise((r) => setTimeout(r, 500));
      assert.deepEqual(signals.slice(2), [{ reason: 'deleted', namespaceGoing: true }], 'one signal: the deletion, saying the namespace goes');
      assert.equal(watcher.present({ apiVersion: API_VERSION, kind: KIND, namespace: 'ns', name: 'shop' }), false, 'gone, as a pass will find it');
      // With a rollout in flight, the workflow aborts and compensates it first: the watcher leaves the finalizer alone.
      const canary = (rv: number, deletionTimestamp?: string) => ({
        apiVersion: API_VERSION, kind: KIND, status: { canary: { phase: 'Progressing' } },
        metadata: { name: 'cart', namespace: 'ns', generation: 1, resourceVersion: String(rv), uid: 'u2', finalizers: ['myapp.example.com/finalizer'], ...(deletionTimestamp ? { deletionTimestamp } : {}) },
      });
      send('/applications', 'ADDED', canary(11));
      await eventually('cart signalled', () => Promise.resolve(signals.length === 4 ? true : undefined), { timeoutMs: 5000, intervalMs: 10 });
      send('/applications', 'MODIFIED', canary(12, '2026-12-03T00:00:02Z'));
      await eventually('cart\'s deletion signalled', () => Promise.resolve(signals.length === 5 ? true : undefined), { timeoutMs: 5000, intervalMs: 10 });
      assert.deepEqual(signals[4], { reason: 'deleted', namespaceGoing: true });
      await new Promise((r) => setTimeout(r, 300));
      assert.equal(patches.length, 1, 'no release of cart\'s finalizer');
    } finally {
      await watcher.stop();
      await api.close();
    }
  });
});
