// Our kubeconfig reader against client-node's, on the kubeconfigs an operator runs with: the same TLS material and
// credentials for every request, and client-node itself for what we do not read.
import { KubeConfig } from '@kubernetes/client-node';
import assert from 'node:assert/strict';
import { chmod, mkdtemp, writeFile } from 'node:fs/promises';
import type { RequestOptions } from 'node:https';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, test } from 'node:test';
import { stringify } from 'yaml';
import { KubeconfigCredentials, NoCurrentCluster, defaultNamespaceOf, kubeconfigFromText, loadKubeconfig } from '../../kube/config.ts';

const b64 = (s: string) => Buffer.from(s).toString('base64');

function kubeconfig(user: Record<string, unknown>, cluster: Record<string, unknown> = {}, context: Record<string, unknown> = {}) {
  return {
    apiVersion: 'v1', kind: 'Config', 'current-context': 'ctx',
    clusters: [{ name: 'c', cluster: { server: 'https://127.0.0.1:6443', 'certificate-authority-data': b64('CA'), ...cluster } }],
    users: [{ name: 'u', user }],
    contexts: [{ name: 'ctx', context: { cluster: 'c', user: 'u', ...context } }],
  };
}

async function dir(files: Record<string, string> = {}): Promise<string> {
  const d = await mkdtemp(join(tmpdir(), 'kubeconfig-test-'));
  for (const [name, text] of Object.entries(files)) await writeFile(join(d, name), text);
  return d;
}

/** What a request gets from a kubeconfig: TLS material as text, and the headers. */
async function applied(kc: { applyToHTTPSOptions(o: RequestOptions): Promise<void> }) {
  const o: RequestOptions = {};
  await kc.applyToHTTPSOptions(o);
  const text = (v: unknown) => (v === undefined ? undefined : Buffer.isBuffer(v) ? v.toString() : typeof v === 'string' ? v : JSON.stringify(v));
  return { ca: text(o.ca), cert: text(o.cert), key: text(o.key), rejectUnauthorized: o.rejectUnauthorized, servername: o.servername, authorization: (o.headers as Record<string, string> | undefined)?.['Authorization'], auth: o.auth };
}

async function clientNode(file: string) {
  const kc = new KubeConfig();
  kc.loadFromFile(file);
  return applied(kc);
}

describe('loadKubeconfig: the same credentials as client-node', () => {
  const cases: { name: string; files?: Record<string, string>; user: Record<string, unknown>; cluster?: Record<string, unknown> }[] = [
    { name: 'inline client certificate and key', user: { 'client-certificate-data': b64('CERT'), 'client-key-data': b64('KEY') } },
    { name: 'certificate files next to the kubeconfig', files: { 'ca.crt': 'CAFILE', 'c.crt': 'CERTFILE', 'c.key': 'KEYFILE' }, user: { 'client-certificate': 'c.crt', 'client-key': 'c.key' }, cluster: { 'certificate-authority': 'ca.crt', 'certificate-authority-data': undefined } },
    { name: 'a bearer token', user: { token: 'abc' } },
    { name: 'basic auth', user: { username: 'me', password: 'pw' } },
    { name: 'insecure, with a TLS server name', user: { token: 't' }, cluster: { 'insecure-skip-tls-verify': true, 'tls-server-name': 'api.example' } },
  ];
  for (const c of cases) {
    test(c.name, async () => {
      const d = await dir(c.files);
      const file = join(d, 'config');
      await writeFile(file, stringify(kubeconfig(c.user, c.cluster)));
      const ours = await loadKubeconfig(file, {});
      assert.ok(ours instanceof KubeconfigCredentials, 'read without client-node');
      assert.equal(ours.getCurrentCluster()?.server, 'https://127.0.0.1:6443');
      assert.deepEqual(await applied(ours), await clientNode(file));
    });
  }
});

describe('loadKubeconfig', () => {
  test('a token file is read again on every request (rotated tokens)', async () => {
    const d = await dir({ token: 'one' });
    const file = join(d, 'config');
    await writeFile(file, stringify(kubeconfig({ tokenFile: join(d, 'token') })));
    const kc = await loadKubeconfig(file, {});
    assert.equal((await applied(kc)).authorization, 'Bearer one');
    await writeFile(join(d, 'token'), 'two\n');
    assert.equal((await applied(kc)).authorization, 'Bearer two');
  });

  test('an exec plugin: its token is reused until it expires, and asked again after invalidate()', async () => {
    const d = await dir();
    const counter = join(d, 'runs');
    await writeFile(counter, '');
    const plugin = join(d, 'plugin.sh');
    await writeFile(plugin, `#!/bin/sh\necho x >> "${counter}"\nn=$(wc -l < "${counter}" | tr -d ' ')\necho "{\\"apiVersion\\":\\"client.authentication.k8s.io/v1\\",\\"kind\\":\\"ExecCredential\\",\\"status\\":{\\"token\\":\\"tok-$n-$PLUGIN_ENV\\",\\"expirationTimestamp\\":\\"2999-01-01T00:00:00Z\\"}}"\n`);
    await chmod(plugin, 0o755);
    const file = join(d, 'config');
    await writeFile(file, stringify(kubeconfig({ exec: { apiVersion: 'client.authentication.k8s.io/v1', command: plugin, env: [{ name: 'PLUGIN_ENV', value: 'e' }] } })));
    const kc = await loadKubeconfig(file, {});
    assert.equal((await applied(kc)).authorization, 'Bearer tok-1-e');
    assert.equal((await applied(kc)).authorization, 'Bearer tok-1-e', 'not run again before it expires');
    kc.invalidate?.();
    assert.equal((await applied(kc)).authorization, 'Bearer tok-2-e');
  });

  test('a KUBECONFIG list: the first current-context and the first definition of a name win', async () => {
    const d = await dir();
    const first = kubeconfig({ token: 'first' });
    const second = { ...kubeconfig({ token: 'second' }), 'current-context': 'other', contexts: [{ name: 'other', context: { cluster: 'c', user: 'u' } }] };
    await writeFile(join(d, 'a'), stringify(first));
    await writeFile(join(d, 'b'), stringify(second));
    const kc = await loadKubeconfig(undefined, { KUBECONFIG: `${join(d, 'a')}:${join(d, 'b')}` });
    assert.equal(kc.getCurrentContext(), 'ctx');
    assert.equal((await applied(kc)).authorization, 'Bearer first');
  });

  test('in a cluster: the service account token and CA', async () => {
    const d = await dir({ token: 'sa-token', 'ca.crt': 'SA-CA' });
    const kc = await loadKubeconfig(undefined, { KUBERNETES_SERVICE_HOST: '10.0.0.1', KUBERNETES_SERVICE_PORT: '443', HOME: d }, d);
    assert.equal(kc.getCurrentCluster()?.server, 'https://10.0.0.1:443');
    const a = await applied(kc);
    assert.deepEqual([a.authorization, a.ca], ['Bearer sa-token', 'SA-CA']);
  });

  test('what it does not read itself (an auth-provider) is read by client-node', async () => {
    const d = await dir();
    const file = join(d, 'config');
    await writeFile(file, stringify(kubeconfig({ 'auth-provider': { name: 'oidc', config: { 'id-token': 'x', 'client-id': 'y', 'idp-issuer-url': 'https://issuer' } } })));
    const kc = await loadKubeconfig(file, {});
    assert.ok(kc instanceof KubeConfig);
  });

  test('a context without a cluster, or an empty file, is an error that says so', async () => {
    const d = await dir({ empty: '' });
    const file = join(d, 'config');
    await writeFile(file, stringify({ ...kubeconfig({ token: 't' }), 'current-context': 'missing' }));
    await assert.rejects(loadKubeconfig(file, {}), (err: unknown) => err instanceof NoCurrentCluster && err.currentContext === 'missing');
    await assert.rejects(loadKubeconfig(join(d, 'empty'), {}), /not a kubeconfig/);
  });

  test('the default namespace is the current context\'s', async () => {
    const d = await dir();
    await writeFile(join(d, 'config'), stringify(kubeconfig({ token: 't' }, {}, { namespace: 'shop' })));
    assert.equal(defaultNamespaceOf({ KUBECONFIG: join(d, 'config') }), 'shop');
    assert.equal(defaultNamespaceOf({ KUBECONFIG: join(d, 'missing') }), 'default');
  });
});

describe('kubeconfigFromText: a member cluster\'s kubeconfig, as a Secret holds it', () => {
  const doc = (user: Record<string, unknown>, cluster: Record<string, unknown> = {}) => stringify({
    apiVersion: 'v1', kind: 'Config', 'current-context': 'b',
    clusters: [{ name: 'b', cluster: { server: 'https://127.0.0.1:36443', 'certificate-authority-data': Buffer.from('CA').toString('base64'), ...cluster } }],
    users: [{ name: 'b', user }],
    contexts: [{ name: 'b', context: { cluster: 'b', user: 'b' } }],
  });
  test('embedded certificates and a token are read as from a file', async () => {
    const kc = kubeconfigFromText(doc({ token: 'abc' }), 'the kubeconfig of Secret ops/cluster-b');
    assert.equal(kc.getCurrentCluster()?.server, 'https://127.0.0.1:36443');
    const opts: RequestOptions = {};
    await kc.applyToHTTPSOptions(opts);
    assert.equal(String(opts.ca), 'CA');
    assert.equal((opts.headers as Record<string, string>)['Authorization'], 'Bearer abc');
  });
  test('what it cannot use is refused, naming the Secret', () => {
    assert.throws(() => kubeconfigFromText(doc({ 'auth-provider': { name: 'gcp' } }), 'the kubeconfig of Secret ops/cluster-b'), /Secret ops\/cluster-b needs an auth-provider/);
    assert.throws(() => kubeconfigFromText(doc({ tokenFile: '/var/run/secrets/kubernetes.io/serviceaccount/token' }), 'the kubeconfig of Secret ops/cluster-b'), /needs files of the operator/);
    assert.throws(() => kubeconfigFromText(doc({ token: 't' }, { 'certificate-authority': '/etc/ssl/ca.pem' }), 'the kubeconfig of Secret ops/cluster-b'), /needs files of the operator/);
    assert.throws(() => kubeconfigFromText(doc({ exec: { apiVersion: 'client.authentication.k8s.io/v1', command: 'sh', args: ['-c', 'id'] } }), 'the kubeconfig of Secret ops/cluster-b'), /needs an exec plugin \(a command the operator would run\)/);
    assert.throws(() => kubeconfigFromText('', 'the kubeconfig of Secret ops/cluster-b'), /Secret ops\/cluster-b is not a kubeconfig/);
    // A syntax error says where, never what the line holds (a token, a key): the message reaches status and Events.
    assert.throws(() => kubeconfigFromText('users:\n- name: b\n  user: { token: s3cr3t-t0ken', 'the kubeconfig of Secret ops/cluster-b'), (err: Error) => {
      assert.match(err.message, /^the kubeconfig of Secret ops\/cluster-b is not valid YAML \(line \d+, column \d+\)$/);
      assert.doesNotMatch(err.message, /s3cr3t/);
      return true;
    });
    assert.throws(() => kubeconfigFromText(stringify({ 'current-context': 'x', contexts: [] }), 'the kubeconfig of Secret ops/cluster-b'), NoCurrentCluster);
  });
});
