// Proof that the local stack's servers are real: each check here would fail against a fake API server or Temporal.
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { after, before, describe, it } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { promisify } from 'node:util';
import { mkdtemp, readdir, rm, symlink } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { down, status, unreadyImage, up } from '../../stack/stack.ts';
import { artifactPaths, cacheRoot, versions } from '../../stack/versions.ts';
import { kube, kubeJson, testNamespace } from '../../testkit/apps.ts';
import { eventually } from '../../lib/poll.ts';

describe('local Kubernetes control plane', () => {
  let ns: { name: string; cleanup: () => Promise<void> };
  before(async () => {
    ns = await testNamespace('stack');
  });
  after(async () => ns.cleanup());

  it('runs a Deployment to 2 available replicas on kwok nodes', async () => {
    await kube(['-n', ns.name, 'create', 'deployment', 'web', '--image=nginx:1.25', '--replicas=2']);
    const d = await eventually('deployment web available', async () => {
      const d = await kubeJson(['-n', ns.name, 'get', 'deployment', 'web']);
      return d.status?.availableReplicas === 2 ? d : undefined;
    });
    assert.equal(d.status.availableReplicas, 2);
    const pods = await kubeJson<{ items: any[] }>(['-n', ns.name, 'get', 'pods', '-l', 'app=web']);
    assert.equal(pods.items.length, 2);
    for (const p of pods.items) {
      assert.match(p.spec.nodeName, /^kwok-node-/, 'scheduled by kube-scheduler onto a kwok node');
      assert.equal(p.status.phase, 'Running');
    }
  });

  it('keeps a pod of the marked image Running but not Ready', async () => {
    await kube(['-n', ns.name, 'run', 'bad', `--image=${unreadyImage}`]);
    await eventually('pod bad running', async () => {
      const p = await kubeJson(['-n', ns.name, 'get', 'pod', 'bad']);
      return p.status?.phase === 'Running' ? p : undefined;
    });
    await sleep(2000);
    const p = await kubeJson(['-n', ns.name, 'get', 'pod', 'bad']);
    assert.equal(p.status.phase, 'Running');
    const ready = (p.status.conditions as { type: string; status: string }[]).find((c) => c.type === 'Ready');
    assert.equal(ready?.status, 'False');
  });

  it('garbage-collects dependents when their owner is deleted', async () => {
    await kube(['-n', ns.name, 'create', 'configmap', 'owner']);
    const owner = await kubeJson(['-n', ns.name, 'get', 'configmap', 'owner']);
    const dependent = {
      apiVersion: 'v1', kind: 'ConfigMap',
      metadata: { name: 'dependent', namespace: ns.name, ownerReferences: [{ apiVersion: 'v1', kind: 'ConfigMap', name: 'owner', uid: owner.metadata.uid }] },
    };
    await kube(['apply', '-f', '-'], JSON.stringify(dependent));
    await kube(['-n', ns.name, 'delete', 'configmap', 'owner']);
    await eventually('dependent collected', async () => {
      const out = await kube(['-n', ns.name, 'get', 'configmap', 'dependent', '--ignore-not-found', '-o', 'name']);
      return out.trim() === '' ? true : undefined;
    });
  });

  it("validates VirtualServices with Istio's real schema", async () => {
    const vs = (timeout: string) => ({
      apiVersion: 'networking.istio.io/v1', kind: 'VirtualService',
      metadata: { name: `web-${timeout === '5s' ? 'ok' : 'bad'}`, namespace: ns.name },
      spec: {
        hosts: ['web'],
        http: [{
          timeout,
          route: [
            { destination: { host: 'web', subset: 'stable' }, weight: 80 },
            { destination: { host: 'web', subset: 'canary' }, weight: 20 },
          ],
        }],
      },
    });
    await kube(['apply', '--server-side', '-f', '-'], JSON.stringify(vs('5s')));
    const got = await kubeJson(['-n', ns.name, 'get', 'virtualservice', 'web-ok']);
    assert.deepEqual(got.spec.http[0].route.map((r: { weight: number }) => r.weight), [80, 20]);
    await assert.rejects(kube(['apply', '--server-side', '-f', '-'], JSON.stringify(vs('soon'))), /timeout|duration/i);
  });
});

describe('cached client tools', () => {
  it('runs the helm built into the cache, at the pinned version', async () => {
    // No fallback to a helm on PATH: a missing or broken cache entry must fail here.
    const { stdout } = await promisify(execFile)(artifactPaths().helm, ['version', '--template', '{{.Version}} {{.GoVersion}}']);
    const [version, goVersion] = stdout.trim().split(' ');
    assert.equal(version, versions.helm);
    assert.match(goVersion ?? '', /^go1\./);
  });
});

describe('a stack before Prometheus is built (the demo\'s first run)', () => {
  it('comes up without Prometheus and says so; up starts it once it is built', async () => {
    // A cache with every artifact but Prometheus's: what the demo has when its app first runs on a fresh machine.
    const real = cacheRoot();
    const cache = await mkdtemp(join(tmpdir(), 'cache-'));
    const stateDir = await mkdtemp(join(tmpdir(), 'noprom-'));
    for (const entry of await readdir(real)) if (!entry.startsWith('prometheus-')) await symlink(join(real, entry), join(cache, entry));
    const saved = process.env['APPLICATION_OPERATOR_CACHE'];
    process.env['APPLICATION_OPERATOR_CACHE'] = cache;
    const said: string[] = [];
    try {
      await up({ stateDir, ports: 'free', headless: true, nodes: 1, print: (l) => said.push(l) });
      assert.ok(said.some((l) => /prometheus: not built yet, left out/.test(l)), said.join('\n'));
      const rows = (await status(stateDir))!;
      const state = (name: string) => rows.find((r) => r.name === name)?.state;
      assert.equal(state('kube-apiserver'), 'up');
      assert.equal(state('temporal'), 'up');
      assert.notEqual(state('prometheus'), 'up');
      // Built meanwhile (here: the real cache's): the next up starts it.
      const prometheus = (await readdir(real)).find((e) => e.startsWith('prometheus-'))!;
      await symlink(join(real, prometheus), join(cache, prometheus));
      const info = await up({ stateDir, headless: true, nodes: 1, print: () => undefined });
      assert.equal((await fetch(`${info.prometheusUrl}/-/ready`)).status, 200);
    } finally {
      if (saved === undefined) delete process.env['APPLICATION_OPERATOR_CACHE'];
      else process.env['APPLICATION_OPERATOR_CACHE'] = saved;
      await down(stateDir, { purge: true });
      await rm(cache, { recursive: true, force: true });
    }
  });
});
