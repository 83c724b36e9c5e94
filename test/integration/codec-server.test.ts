// The codec server over HTTP: what it encodes is the operator's own format (AesGcmPayloadCodec decodes it) and
// decodes back to the original; another key gets an error, never ciphertext passed off as data; a bad body is a
// 400 that says why; CORS answers the Temporal UI's origin and no other; the bearer token is enforced. Then the real
// clients: the `application-operator codec-server` command, the Temporal CLI encoding a workflow's input through it
// and showing the history decoded, and the Temporal dev server's UI pointed at it the way the local stack does it.
import type { Payload } from '@temporalio/common';
import { Client, Connection } from '@temporalio/client';
import assert from 'node:assert/strict';
import { execFile, spawn } from 'node:child_process';
import { randomBytes, randomUUID } from 'node:crypto';
import { mkdtemp, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { promisify } from 'node:util';
import { AesGcmPayloadCodec, type EncryptionKey } from '../../operator/codec.ts';
import { allowedRequestHeaders, startCodecServer, type RunningCodecServer } from '../../operator/codec-server.ts';
import { freePort } from '../../lib/net.ts';
import { eventually } from '../../lib/poll.ts';
import { withUiCodecEndpoint } from '../../stack/stack.ts';
import { artifactPaths } from '../../stack/versions.ts';
import { testEnv } from '../../testkit/env.ts';

const exec = promisify(execFile);
const root = resolve(import.meta.dirname, '..', '..');
const uiOrigin = 'http://localhost:8080';
const keyA: EncryptionKey = { id: 'key-a', key: randomBytes(32) };
const b64 = (s: string | Uint8Array) => Buffer.from(s).toString('base64');
const jsonPayload = (value: unknown) => ({ metadata: { encoding: b64('json/plain') }, data: b64(JSON.stringify(value)) });
/** A payload in the protocol's JSON form, from the SDK's form. */
const toJson = (p: Payload) => ({
  metadata: Object.fromEntries(Object.entries(p.metadata ?? {}).map(([k, v]) => [k, b64(v)])),
  ...(p.data?.length ? { data: b64(p.data) } : {}),
});
const fromJson = (p: { metadata: Record<string, string>; data?: string }): Payload => ({
  metadata: Object.fromEntries(Object.entries(p.metadata).map(([k, v]) => [k, Buffer.from(v, 'base64')])),
  data: Buffer.from(p.data ?? '', 'base64'),
});

interface Answer {
  status: number;
  headers: Headers;
  body: any;
}

async function call(server: RunningCodecServer, path: string, init: { method?: string; body?: unknown; headers?: Record<string, string> } = {}): Promise<Answer> {
  const r = await fetch(`${server.url}${path}`, {
    method: init.method ?? 'POST',
    headers: { 'Content-Type': 'application/json', ...init.headers },
    ...(init.body === undefined ? {} : { body: typeof init.body === 'string' ? init.body : JSON.stringify(init.body) }),
  });
  const text = await r.text();
  let body: unknown = text;
  try {
    body = JSON.parse(text);
  } catch {
    // not JSON: kept as text
  }
  return { status: r.status, headers: r.headers, body };
}

describe('the codec server', () => {
  const servers: RunningCodecServer[] = [];
  const serve = async (keys: EncryptionKey[], opts: { authToken?: string; corsOrigins?: string[] } = {}) => {
    const s = await startCodecServer({ listen: '127.0.0.1:0', corsOrigins: opts.corsOrigins ?? [uiOrigin], ...(opts.authToken ? { authToken: opts.authToken } : {}) }, new AesGcmPayloadCodec(keys));
    servers.push(s);
    return s;
  };
  let server: RunningCodecServer;
  before(async () => {
    server = await serve([keyA]);
  });
  after(async () => {
    for (const s of servers) await s.close();
  });

  const original = [jsonPayload({ password: 'hunter2', replicas: 3 }), { metadata: { encoding: b64('binary/null') } }];

  it('encodes into the operator\'s format, and decodes back to the original payloads', async () => {
    const encoded = await call(server, '/encode', { body: { payloads: original }, headers: { 'X-Namespace': 'default' } });
    assert.equal(encoded.status, 200, JSON.stringify(encoded.body));
    assert.equal(encoded.headers.get('content-type'), 'application/json');
    assert.equal(encoded.body.payloads.length, 2);
    for (const p of encoded.body.payloads) {
      assert.deepEqual(Object.keys(p.metadata).sort(), ['encoding', 'encryption-key-id']);
      assert.equal(Buffer.from(p.metadata.encoding, 'base64').toString(), 'binary/encrypted');
      assert.equal(Buffer.from(p.metadata['encryption-key-id'], 'base64').toString(), 'key-a');
      assert.ok(!Buffer.from(p.data, 'base64').includes('hunter2'), 'ciphertext holds no plaintext');
    }
    // The operator's codec reads what the server wrote...
    const byOperator = await new AesGcmPayloadCodec([keyA]).decode(encoded.body.payloads.map(fromJson));
    assert.deepEqual(byOperator.map(toJson), original);
    // ...and the server gives back exactly what was encoded.
    const decoded = await call(server, '/decode', { body: encoded.body });
    assert.equal(decoded.status, 200, JSON.stringify(decoded.body));
    assert.deepEqual(decoded.body, { payloads: original });
  });

  it('decodes what the operator encrypted, and passes payloads that were never encrypted through untouched', async () => {
    const [byOperator] = await new AesGcmPayloadCodec([keyA]).encode([fromJson(jsonPayload('from a workflow'))]);
    const decoded = await call(server, '/default/decode', { body: { payloads: [toJson(byOperator!), original[0]] } });
    assert.equal(decoded.status, 200, JSON.stringify(decoded.body));
    assert.deepEqual(decoded.body, { payloads: [jsonPayload('from a workflow'), original[0]] });
  });

  it('with another key answers 422 and says which key is missing, rather than handing back ciphertext', async () => {
    const encoded = (await call(server, '/encode', { body: { payloads: original } })).body;
    const otherId = await serve([{ id: 'key-b', key: randomBytes(32) }]);
    const wrongId = await call(otherId, '/decode', { body: encoded });
    assert.equal(wrongId.status, 422);
    assert.match(wrongId.body.message, /encrypted with key key-a, which is not among the configured keys \(key-b\)/);
    // The same id on another key (a key replaced by mistake) fails authentication instead.
    const sameId = await serve([{ id: 'key-a', key: randomBytes(32) }]);
    const wrongKey = await call(sameId, '/decode', { body: encoded });
    assert.equal(wrongKey.status, 422);
    assert.match(wrongKey.body.message, /failed authentication/);
    // A server that has the old key among its keys (after a rotation) still decodes.
    const rotated = await serve([{ id: 'key-c', key: randomBytes(32) }, keyA]);
    assert.deepEqual((await call(rotated, '/decode', { body: encoded })).body, { payloads: original });
  });

  it('answers a bad request with 400 and a message that says what is wrong', async () => {
    const cases: [unknown, RegExp][] = [
      ['{"payloads": [', /the body is not JSON/],
      [{ payload: [] }, /^payloads .*expected \{"payloads"/],
      [{ payloads: 'abc' }, /^payloads /],
      [{ payloads: [{ metadata: { encoding: 'json/plain!' } }] }, /^payloads\[0\]\.metadata\.encoding is not base64/],
      [{ payloads: [{ data: 42 }] }, /^payloads\[0\]\.data /],
    ];
    for (const [body, message] of cases) {
      const r = await call(server, '/decode', { body });
      assert.equal(r.status, 400, JSON.stringify(body));
      assert.match(r.body.message, message, JSON.stringify(body));
    }
    assert.equal((await call(server, '/decode', { method: 'GET' })).status, 405);
    assert.equal((await call(server, '/nowhere', { body: { payloads: [] } })).status, 404);
  });

  it('answers the Temporal UI\'s CORS preflight for its origin only', async () => {
    const preflight = (origin: string) => call(server, '/decode', {
      method: 'OPTIONS', headers: { Origin: origin, 'Access-Control-Request-Method': 'POST', 'Access-Control-Request-Headers': 'content-type,x-namespace,authorization' },
    });
    const allowed = await preflight(uiOrigin);
    assert.equal(allowed.status, 204);
    assert.equal(allowed.headers.get('access-control-allow-origin'), uiOrigin);
    assert.match(allowed.headers.get('access-control-allow-methods') ?? '', /\bPOST\b/);
    const headers = (allowed.headers.get('access-control-allow-headers') ?? '').toLowerCase().split(/,\s*/);
    for (const h of allowedRequestHeaders) assert.ok(headers.includes(h.toLowerCase()), `allows ${h}`);
    const denied = await preflight('http://evil.example');
    assert.equal(denied.headers.get('access-control-allow-origin'), null);
    assert.equal(denied.headers.get('access-control-allow-headers'), null);
    // The request itself carries the header for the allowed origin only.
    const from = async (origin: string) => (await call(server, '/decode', { body: { payloads: [] }, headers: { Origin: origin } })).headers.get('access-control-allow-origin');
    assert.deepEqual([await from(uiOrigin), await from('http://evil.example')], [uiOrigin, null]);
  });

  it('with a token, refuses encode and decode without it (401) and serves them with it', async () => {
    const token = randomBytes(16).toString('hex');
    const guarded = await serve([keyA], { authToken: token });
    const body = { payloads: original };
    const without = await call(guarded, '/encode', { body, headers: { Origin: uiOrigin } });
    assert.equal(without.status, 401);
    assert.equal(without.headers.get('www-authenticate'), 'Bearer');
    assert.equal(without.headers.get('access-control-allow-origin'), uiOrigin, 'the UI can read the 401');
    assert.equal((await call(guarded, '/decode', { body, headers: { Authorization: `Bearer ${token}x` } })).status, 401);
    assert.equal((await call(guarded, '/decode', { body, headers: { Authorization: token } })).status, 401, 'only the Bearer scheme');
    assert.equal((await call(guarded, '/encode', { body, headers: { Authorization: `Bearer ${token}` } })).status, 200);
    // Neither a browser's preflight (which never carries credentials) nor the health check needs it.
    assert.equal((await call(guarded, '/decode', { method: 'OPTIONS', headers: { Origin: uiOrigin, 'Access-Control-Request-Method': 'POST' } })).status, 204);
    assert.equal((await call(guarded, '/healthz', { method: 'GET' })).status, 200);
  });

  it('runs as `application-operator codec-server` with the operator\'s key file, flags and environment', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'codec-server-'));
    const keyFile = join(dir, 'keys');
    await writeFile(keyFile, `# current first\n${keyA.id}:${keyA.key.toString('base64')}\n`);
    const port = await freePort();
    const token = randomBytes(16).toString('hex');
    const child = spawn(process.execPath, [join(root, 'bin', 'application-operator.ts'), 'codec-server', `--listen=127.0.0.1:${port}`, `--cors-origin=${uiOrigin}`, `--payload-encryption-key-file=${keyFile}`], {
      cwd: root, env: { ...process.env, CODEC_AUTH_TOKEN: token, PAYLOAD_ENCRYPTION_KEY: '' }, stdio: ['ignore', 'pipe', 'pipe'],
    });
    let output = '';
    child.stdout.on('data', (d: Buffer) => (output += d.toString()));
    child.stderr.on('data', (d: Buffer) => (output += d.toString()));
    try {
      const url = `http://127.0.0.1:${port}`;
      await eventually('codec-server serving', async () => {
        if (child.exitCode !== null) throw new Error(`exited ${child.exitCode}: ${output}`);
        return (await fetch(`${url}/healthz`).catch(() => null))?.ok ? true : undefined;
      }, { timeoutMs: 30_000 });
      const [encrypted] = await new AesGcmPayloadCodec([keyA]).encode([fromJson(original[0]!)]);
      const r = await fetch(`${url}/decode`, { method: 'POST', headers: { Authorization: `Bearer ${token}`, 'Content-Type': 'application/json' }, body: JSON.stringify({ payloads: [toJson(encrypted!)] }) });
      assert.equal(r.status, 200);
      assert.deepEqual(await r.json(), { payloads: [original[0]] });
      assert.equal((await fetch(`${url}/decode`, { method: 'POST', body: '{"payloads":[]}' })).status, 401, 'CODEC_AUTH_TOKEN is read');
      assert.match(output, /"currentKeyId":"key-a"/);
      assert.doesNotMatch(output, new RegExp(keyA.key.toString('base64').replace(/[+/=]/g, '.')), 'the key is never logged');
    } finally {
      child.kill('SIGTERM');
    }
    // Without keys it refuses to start and says why.
    const noKeys = await exec(process.execPath, [join(root, 'bin', 'application-operator.ts'), 'codec-server', '--listen=127.0.0.1:0'], { cwd: root, env: { ...process.env, PAYLOAD_ENCRYPTION_KEY: '', PAYLOAD_ENCRYPTION_KEY_FILE: '' } })
      .then(() => ({ code: 0, stderr: '' }), (err: { code: number; stderr: string }) => err);
    assert.notEqual(noKeys.code, 0);
    assert.match(noKeys.stderr, /needs the operator's payload keys/);
  });

  it('serves the Temporal CLI: a workflow input encoded through it is stored encrypted, and `workflow show` decodes it', async () => {
    const env = await testEnv();
    const token = randomBytes(16).toString('hex');
    const guarded = await serve([keyA], { authToken: token });
    const workflowId = `codec-cli-${randomUUID()}`;
    const secret = `db-password-${randomBytes(6).toString('hex')}`;
    const temporal = (args: string[]) => exec(artifactPaths().temporal, [...args, `--address=${env.temporalAddress}`, `--namespace=${env.temporalNamespace}`], { maxBuffer: 16 << 20 });
    // The CLI fills {namespace} into its endpoint: any path before /encode and /decode works.
    const codecFlags = [`--codec-endpoint=${guarded.url}/{namespace}`, `--codec-auth=Bearer ${token}`];
    const connection = await Connection.connect({ address: env.temporalAddress });
    const plain = new Client({ connection, namespace: env.temporalNamespace });
    try {
      // Nobody runs this type: the workflow just waits, with its input in the history.
      await temporal(['workflow', 'start', '--type=NoWorker', `--task-queue=codec-cli-${randomUUID()}`, `--workflow-id=${workflowId}`, `--input=${JSON.stringify({ secret })}`, ...codecFlags]);
      const history = await plain.workflow.getHandle(workflowId).fetchHistory();
      const input = history.events?.[0]?.workflowExecutionStartedEventAttributes?.input?.payloads?.[0];
      assert.ok(input, 'the started event has an input');
      assert.equal(Buffer.from(input.metadata?.['encoding'] ?? []).toString(), 'binary/encrypted', 'stored encrypted');
      assert.ok(!Buffer.from(input.data ?? []).includes(secret), 'no plaintext in the history');
      const [decoded] = await new AesGcmPayloadCodec([keyA]).decode([input]);
      assert.deepEqual(JSON.parse(Buffer.from(decoded!.data!).toString()), { secret }, 'the operator\'s codec reads what the CLI stored');

      // `workflow show -o json` prints payloads in the protocol's JSON form: decoded through the codec server, plain JSON.
      const shownInput = async (flags: string[]) => {
        const shown = JSON.parse((await temporal(['workflow', 'show', `--workflow-id=${workflowId}`, '--output=json', ...flags])).stdout);
        return fromJson(shown.events[0].workflowExecutionStartedEventAttributes.input.payloads[0]);
      };
      const viaServer = await shownInput(codecFlags);
      assert.equal(Buffer.from(viaServer.metadata!['encoding']!).toString(), 'json/plain');
      assert.deepEqual(JSON.parse(Buffer.from(viaServer.data!).toString()), { secret }, 'workflow show through the codec server shows the input');
      const raw = await shownInput([]);
      assert.equal(Buffer.from(raw.metadata!['encoding']!).toString(), 'binary/encrypted', 'control: without the codec server it does not');
    } finally {
      await plain.workflow.getHandle(workflowId).terminate('codec-server test finished').catch(() => undefined);
      await connection.close();
    }
  });

  it('is where the Temporal UI sends payloads when the stack points it there (up --codec-endpoint)', async () => {
    const [grpc, ui, http, metrics] = [await freePort(), await freePort(), await freePort(), await freePort()];
    const uiUrl = `http://127.0.0.1:${ui}`;
    const codecServer = await serve([keyA], { corsOrigins: [uiUrl] });
    // The dev server with the arguments the stack gives it: the UI reads its codec endpoint from its settings.
    const args = withUiCodecEndpoint(['server', 'start-dev', '--ip=127.0.0.1', `--port=${grpc}`, `--ui-port=${ui}`, `--http-port=${http}`, `--metrics-port=${metrics}`, '--log-level=error'], codecServer.url);
    const dev = spawn(artifactPaths().temporal, args, { stdio: 'ignore' });
    try {
      const settings = await eventually('the Temporal UI\'s settings', async () => {
        if (dev.exitCode !== null) throw new Error(`temporal dev server exited ${dev.exitCode}`);
        const r = await fetch(`${uiUrl}/api/v1/settings`).catch(() => null);
        return r?.ok ? await r.json() as { Codec: { Endpoint: string } } : undefined;
      }, { timeoutMs: 60_000 });
      assert.equal(settings.Codec.Endpoint, codecServer.url);
      // A browser on that UI may call the codec server.
      const preflight = await call(codecServer, '/decode', { method: 'OPTIONS', headers: { Origin: uiUrl, 'Access-Control-Request-Method': 'POST', 'Access-Control-Request-Headers': 'content-type,x-namespace' } });
      assert.equal(preflight.headers.get('access-control-allow-origin'), uiUrl);
      assert.deepEqual(withUiCodecEndpoint(args, ''), args.filter((a) => !a.startsWith('--ui-codec-endpoint=')), 'an empty endpoint removes it');
    } finally {
      dev.kill('SIGTERM');
    }
  });
});
