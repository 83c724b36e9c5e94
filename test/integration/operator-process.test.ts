// The operator as a process, as Kubernetes runs it: SIGTERM stops it promptly in every phase (connecting to an
// unreachable Temporal, leading while its watcher waits for Temporal, running, and stopping), it exits with the
// documented code (0 once stopped; 1 at a second signal or past --shutdown-timeout-seconds), and /readyz says why
// the watcher has not synced when the API server cannot be reached.
import assert from 'node:assert/strict';
import { readFile, writeFile } from 'node:fs/promises';
import { connect, createServer, type Server, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { parse, stringify } from 'yaml';
import { freePort } from '../../lib/net.ts';
import { eventually } from '../../lib/poll.ts';
import { closeTemporal, kubeApi, testNamespace, type Json } from '../../testkit/apps.ts';
import { testEnv } from '../../testkit/env.ts';
import { startOperator, type OperatorProcess } from '../../testkit/operator.ts';

/** The run's admin kubeconfig, pointed at another API server address. */
async function kubeconfigFor(server: string): Promise<string> {
  const kc = parse(await readFile((await testEnv()).kubeconfigPath, 'utf8')) as { clusters: { cluster: { server: string } }[] };
  for (const c of kc.clusters) c.cluster.server = server;
  const path = join(tmpdir(), `kubeconfig-${server.replace(/\W+/g, '-')}-${process.pid}`);
  await writeFile(path, stringify(kc), { mode: 0o600 });
  return path;
}

/**
 * A TCP proxy to the run's API server that can be frozen: from then on it passes no byte either way and accepts new
 * connections without forwarding them, as an API server that hangs.
 */
async function freezableProxy(target: { host: string; port: number }): Promise<{ port: number; freeze: () => void; close: () => Promise<void> }> {
  const sockets = new Set<Socket>();
  let frozen = false;
  const track = (s: Socket) => {
    sockets.add(s);
    s.on('close', () => sockets.delete(s));
    s.on('error', () => s.destroy());
  };
  const server: Server = createServer((client) => {
    track(client);
    if (frozen) return;
    const upstream = connect(target.port, target.host);
    track(upstream);
    client.pipe(upstream);
    upstream.pipe(client);
    client.on('close', () => upstream.destroy());
    upstream.on('close', () => client.destroy());
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', () => r()));
  const address = server.address();
  return {
    port: typeof address === 'object' && address ? address.port : 0,
    freeze: () => {
      frozen = true;
      for (const s of sockets) {
        s.unpipe();
        s.pause();
      }
    },
    close: () => new Promise<void>((r) => {
      for (const s of sockets) s.destroy();
      server.close(() => r());
    }),
  };
}

/** Signals the operator and measures how long it takes to exit, and how. */
async function signalAndTime(op: OperatorProcess, signal: NodeJS.Signals, withinMs: number): Promise<{ code: number | null; signal: NodeJS.Signals | null; ms: number }> {
  const t0 = Date.now();
  const exited = op.exited();
  op.signal(signal);
  const timeout = new Promise<'timeout'>((r) => setTimeout(() => r('timeout'), withinMs).unref());
  const outcome = await Promise.race([exited, timeout]);
  if (outcome === 'timeout') {
    await op.stop('SIGKILL');
    assert.fail(`still running ${withinMs / 1000} s after ${signal}; log ${op.logFile}:\n${(await op.logs()).slice(-3000)}`);
  }
  return { ...outcome, ms: Date.now() - t0 };
}

const logHas = (op: OperatorProcess, what: string | RegExp, timeoutMs = 60_000) =>
  eventually(`operator log to show ${what}`, async () => {
    const logs = await op.logs();
    return (typeof what === 'string' ? logs.includes(what) : what.test(logs)) ? true : undefined;
  }, { timeoutMs, intervalMs: 100 });

describe('the operator process and its signals', () => {
  let ns: { name: string; cleanup: () => Promise<void> };
  const started: OperatorProcess[] = [];
  const start = async (opts: Parameters<typeof startOperator>[0]) => {
    const op = await startOperator(opts);
    started.push(op);
    return op;
  };
  before(async () => {
    ns = await testNamespace('signals');
  });
  after(async () => {
    for (const op of started) await op.stop('SIGKILL');
    await closeTemporal();
    await ns?.cleanup();
  });

  it('exits 0 within seconds of SIGTERM while it keeps failing to reach Temporal at start', async () => {
    const closed = await freePort();
    const op = await start({ namespaces: [ns.name], temporalAddress: `127.0.0.1:${closed}`, waitReady: false });
    // The third failure is followed by a 4 s wait: the signal lands in the middle of the backoff.
    await logHas(op, '"attempt":3');
    const r = await signalAndTime(op, 'SIGTERM', 5000);
    assert.deepEqual({ code: r.code, signal: r.signal }, { code: 0, signal: null }, `exit after ${r.ms} ms`);
    assert.match(await op.logs(), /SIGTERM: stopping/);
  });

  it('exits 0 within seconds of SIGINT too, from the same phase', async () => {
    const closed = await freePort();
    const op = await start({ namespaces: [ns.name], temporalAddress: `127.0.0.1:${closed}`, waitReady: false });
    await logHas(op, '"attempt":2');
    const r = await signalAndTime(op, 'SIGINT', 5000);
    assert.deepEqual({ code: r.code, signal: r.signal }, { code: 0, signal: null });
  });

  it('exits 0 within seconds of SIGTERM while it leads and its watcher waits for Temporal, and releases the Lease', async () => {
    const closed = await freePort();
    const lease = `signals-${Date.now()}`;
    const op = await start({
      namespaces: [ns.name], mode: 'watcher', temporalAddress: `127.0.0.1:${closed}`, waitReady: false,
      extraArgs: ['--leader-elect', `--lease-namespace=${ns.name}`, `--lease-name=${lease}`],
    });
    await logHas(op, 'started leading');
    // After the third failure the watcher waits 4 s before trying again.
    await logHas(op, /"attempt":3[^\n]*watcher: cannot reach Temporal/);
    const r = await signalAndTime(op, 'SIGTERM', 5000);
    assert.deepEqual({ code: r.code, signal: r.signal }, { code: 0, signal: null });
    const held = await (await kubeApi()).get<Json>({ apiVersion: 'coordination.k8s.io/v1', kind: 'Lease', namespace: ns.name, name: lease });
    assert.equal(held?.['spec']?.holderIdentity, undefined, 'the Lease is released for the next replica');
    assert.doesNotMatch(await op.logs(), /could not start the leader-only work/, 'a stop is not a failure to start');
  });

  it('exits 0 within seconds of SIGTERM once running', async () => {
    const op = await start({ namespaces: [ns.name] });
    const r = await signalAndTime(op, 'SIGTERM', 10000);
    assert.deepEqual({ code: r.code, signal: r.signal }, { code: 0, signal: null });
    const logs = await op.logs();
    for (const step of ['stopping the watcher', 'stopping the worker', 'stopping the HTTP server', '"msg":"stopped"']) assert.ok(logs.includes(step), `log says ${step}`);
    // Started as the image starts it (operator/runtime.ts): its workflow thread took the calls into workflow code over.
    assert.match(logs, /calls into workflow code run without a watchdog thread each/);
    assert.match(logs, /workflow promises keep no stack trace each/);
    assert.doesNotMatch(logs, /keeps a stack trace per promise of workflow code/);
    assert.doesNotMatch(logs, /started without operator\/sandbox-calls\.ts preloaded/);
  });

  describe('when the API server stops answering just before the stop', () => {
    const proxies: Awaited<ReturnType<typeof freezableProxy>>[] = [];
    after(async () => {
      for (const p of proxies) await p.close();
    });

    /** A leading watcher-only operator whose API server then hangs: releasing the Lease at stop waits its 5 s timeout. */
    const leadThenFreeze = async (extraArgs: string[] = []) => {
      const api = new URL((await testEnv()).kc.getCurrentCluster()!.server);
      const proxy = await freezableProxy({ host: api.hostname, port: Number(api.port) });
      proxies.push(proxy);
      const kubeconfig = await kubeconfigFor(`https://127.0.0.1:${proxy.port}`);
      const op = await start({ namespaces: [ns.name], mode: 'watcher', kubeconfig, waitReady: false, extraArgs: ['--leader-elect', `--lease-namespace=${ns.name}`, `--lease-name=hang-${Date.now()}`, ...extraArgs] });
      await logHas(op, 'watcher started');
      proxy.freeze();
      return op;
    };

    it('exits 1 at once on a second SIGTERM', async () => {
      const op = await leadThenFreeze();
      op.signal('SIGTERM');
      await logHas(op, 'watcher stopped');
      const r = await signalAndTime(op, 'SIGTERM', 3000);
      assert.deepEqual({ code: r.code, signal: r.signal }, { code: 1, signal: null });
      assert.match(await op.logs(), /SIGTERM again while stopping: exiting now/);
    });

    it('exits 1 once stopping outlasts --shutdown-timeout-seconds, naming what it waited for', async () => {
      const op = await leadThenFreeze(['--shutdown-timeout-seconds=2']);
      const r = await signalAndTime(op, 'SIGTERM', 6000);
      assert.deepEqual({ code: r.code, signal: r.signal }, { code: 1, signal: null });
      assert.ok(r.ms >= 1900, `waited the timeout (${r.ms} ms)`);
      assert.match(await op.logs(), /did not stop within 2 s \(still stopping leader election and the watcher\)/);
    });
  });

  it('says in /readyz why the watcher has not synced when the API server refuses connections', async () => {
    const closed = await freePort();
    const apiServer = `https://127.0.0.1:${closed}`;
    const op = await start({ namespaces: [ns.name], kubeconfig: await kubeconfigFor(apiServer), waitReady: false });
    const detail = await eventually('/readyz to name the API server and the error', async () => {
      const r = await fetch(`${op.metricsUrl}/readyz`);
      const text = await r.text();
      return r.status === 503 && text.includes('ECONNREFUSED') ? text : undefined;
    }, { timeoutMs: 30_000 });
    assert.match(detail, /^watcher not synced: \d+ of \d+ collections not listed yet \(applications\//);
    assert.match(detail, new RegExp(`failing since \\S+Z \\(\\d+ failed attempts\\), last: GET /\\S+: connect ECONNREFUSED 127\\.0\\.0\\.1:${closed}`));
    assert.ok(detail.includes(`(API server ${apiServer})`), detail);
  });
});
