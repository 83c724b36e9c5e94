// The CLI's client commands: each --help shows that command's flags and the connection a client needs (not the
// operator process's), and who is asking is the caller's Kubernetes identity, with the OS user as the fallback.
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { mkdtemp, writeFile } from 'node:fs/promises';
import { createServer, type IncomingMessage } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, test } from 'node:test';
import { promisify } from 'node:util';
import { stringify } from 'yaml';
import { localUser, requester } from '../../client/control.ts';

const cli = join(import.meta.dirname, '../../bin/application-operator.ts');
const help = async (...args: string[]) => (await promisify(execFile)(process.execPath, [cli, ...args, '--help'])).stdout;

const operatorOnly = ['--mode', '--lease-duration-seconds', '--max-cached-workflows', '--task-queue', '--prometheus-address'];
const connection = ['--kubeconfig', '--temporal-address', '--temporal-namespace', '--temporal-tls-cert', '--temporal-api-key', '--payload-encryption-key-file'];

describe('client commands --help', () => {
  for (const args of [['promote'], ['status'], ['history'], ['release', 'abort'], ['release', 'status']]) {
    test(`${args.join(' ')}: its own flags and the connection, no operator-only flag`, async () => {
      const text = await help(...args);
      for (const flag of connection) assert.match(text, new RegExp(`${flag}\\b`), flag);
      for (const flag of operatorOnly) assert.doesNotMatch(text, new RegExp(`${flag}\\b`), flag);
      assert.match(text, /--namespace/);
      // The command's own flags come before the connection's.
      assert.ok(text.indexOf('--namespace') < text.indexOf('Connection:'));
    });
  }
  // parseInt took "1e2" as 1 and "abc" as NaN (every rollout, or none).
  test('history --limit takes a whole number only, and says so before connecting anywhere', async () => {
    for (const bad of ['1e2', 'abc', '-3', '2.5']) {
      await assert.rejects(promisify(execFile)(process.execPath, [cli, 'history', 'app', '--limit', bad]), (err: { code?: number; stderr?: string }) => {
        assert.equal(err.code, 1);
        assert.match(err.stderr ?? '', new RegExp(`not a non-negative integer: ${bad.replace('.', '\\.')}`));
        return true;
      });
    }
  });
  test('run still takes the operator flags', async () => {
    const text = await help('run');
    for (const flag of [...operatorOnly, ...connection]) assert.match(text, new RegExp(`${flag}\\b`), flag);
  });
});

/** A kubeconfig for an API server at `server` with a token. */
async function kubeconfigFor(server: string): Promise<string> {
  const d = await mkdtemp(join(tmpdir(), 'cli-client-test-'));
  const file = join(d, 'config');
  await writeFile(file, stringify({
    apiVersion: 'v1', kind: 'Config', 'current-context': 'ctx',
    clusters: [{ name: 'c', cluster: { server } }],
    users: [{ name: 'u', user: { token: 'tok' } }],
    contexts: [{ name: 'ctx', context: { cluster: 'c', user: 'u', namespace: 'team' } }],
  }));
  return file;
}

/** An API server on loopback that answers every request with `answer`; the requests it saw. */
async function apiServer(answer: (req: IncomingMessage, body: string) => { status: number; body?: unknown }) {
  const seen: { method: string; url: string; auth: string | undefined; body: string }[] = [];
  const server = createServer((req, res) => {
    let body = '';
    req.on('data', (c: Buffer) => (body += c.toString()));
    req.on('end', () => {
      seen.push({ method: req.method ?? '', url: req.url ?? '', auth: req.headers.authorization, body });
      const a = answer(req, body);
      res.writeHead(a.status, { 'Content-Type': 'application/json' }).end(JSON.stringify(a.body ?? {}));
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, seen, close: () => new Promise<void>((resolve) => server.close(() => resolve())) };
}

describe('requester', () => {
  test('the Kubernetes identity a SelfSubjectReview answers', async () => {
    const api = await apiServer(() => ({ status: 201, body: { apiVersion: 'authentication.k8s.io/v1', kind: 'SelfSubjectReview', status: { userInfo: { username: 'alice@example.com', groups: ['system:authenticated'] } } } }));
    try {
      assert.equal(await requester(await kubeconfigFor(api.url)), 'alice@example.com');
      assert.equal(api.seen.length, 1);
      assert.equal(api.seen[0]?.method, 'POST');
      assert.equal(api.seen[0]?.url, '/apis/authentication.k8s.io/v1/selfsubjectreviews');
      assert.equal(api.seen[0]?.auth, 'Bearer tok');
      assert.equal((JSON.parse(api.seen[0]?.body ?? '{}') as { kind?: string }).kind, 'SelfSubjectReview');
    } finally {
      await api.close();
    }
  });
  test('the OS user where the API server refuses (older than 1.28: 404) or says no name', async () => {
    for (const answer of [{ status: 404 }, { status: 403 }, { status: 201, body: { status: {} } }]) {
      const api = await apiServer(() => answer);
      try {
        assert.equal(await requester(await kubeconfigFor(api.url)), localUser(), JSON.stringify(answer));
      } finally {
        await api.close();
      }
    }
  });
  test('the OS user where there is no kubeconfig to be had', async () => {
    assert.equal(await requester(join(tmpdir(), 'no-such-kubeconfig')), localUser());
  });
});
