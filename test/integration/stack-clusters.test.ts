// Proof that a member cluster of the local stack (stack/clusters.ts) is a control plane of its own, registered with
// the hub as the operator reads it: its own API server, scheduler, controller manager and kwok run a Deployment; the
// hub's Secret carries a kubeconfig that reaches that API server and no other; its Temporal namespace exists on the
// hub's Temporal; a restart of its API server comes back; and removing it leaves no process, Secret or folder.
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { access, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { promisify } from 'node:util';
import { parse } from 'yaml';
import { CLUSTER_KUBECONFIG_KEY, CLUSTER_LABEL, CLUSTER_TEMPORAL_NAMESPACE_KEY, DEFAULT_CLUSTERS_NAMESPACE } from '../../api/constants.ts';
import { eventually } from '../../lib/poll.ts';
import { addMemberClusters, memberStateDir, readMemberCluster, removeMemberClusters, type MemberStackInfo } from '../../stack/clusters.ts';
import { isOurs } from '../../stack/processes.ts';
import { controlPlaneServerNames, kubectl, readStack, restartServer, type StackInfo } from '../../stack/stack.ts';
import { artifactPaths } from '../../stack/versions.ts';
import { searchAttributeKeys } from '../../workflows/search-attributes.ts';
import { ownStack } from '../../testkit/env.ts';

const exec = promisify(execFile);
const cli = join(import.meta.dirname, '..', '..', 'stack', 'cli.ts');

/** The stack CLI against the hub; resolves with its exit code and output whatever the code. */
async function stackCli(hub: StackInfo, args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  return exec(process.execPath, [cli, '--state-dir', hub.stateDir, ...args], { timeout: 60_000 }).then(
    ({ stdout, stderr }) => ({ code: 0, stdout, stderr }),
    (err: { code?: number; stdout?: string; stderr?: string }) => ({ code: err.code ?? -1, stdout: err.stdout ?? '', stderr: err.stderr ?? '' }),
  );
}

const json = async (info: Pick<StackInfo, 'kubeconfig'>, args: string[]) => JSON.parse(await kubectl(info, [...args, '-o', 'json']));

describe('member clusters of the local stack', () => {
  // Unique per test process (the stack is shared), and a DNS label.
  const name = `sc${process.pid}`;
  let hub: StackInfo;
  let member: MemberStackInfo;
  let removed = false;
  let tmp: string;

  before(async () => {
    hub = await ownStack();
    tmp = await mkdtemp(join(tmpdir(), 'stack-clusters-'));
    const added = await addMemberClusters(hub, [name]);
    assert.equal(added.length, 1);
    member = added[0]!;
  });
  after(async () => {
    if (!removed && hub) await removeMemberClusters(hub, [name]);
    if (tmp) await rm(tmp, { recursive: true, force: true });
  });

  it('runs its own API server, on its own ports, with 2 Ready kwok nodes, the default StorageClass and the CRDs', async () => {
    assert.equal(member.stateDir, memberStateDir(hub.stateDir, name));
    assert.deepEqual(Object.keys(member.servers).sort(), [...controlPlaneServerNames].sort(), 'the control plane only: no Temporal, no Prometheus');
    for (const key of ['etcd', 'etcdPeer', 'apiserver', 'scheduler', 'kwok'] as const) assert.notEqual(member.ports[key], hub.ports[key], `its own ${key} port`);
    for (const s of controlPlaneServerNames) {
      assert.ok(isOurs(member.servers[s].pid, member.servers[s].command), `${s} runs`);
      assert.ok(member.servers[s].log.startsWith(join(member.stateDir, 'logs')), `${s} logs in the member's folder`);
    }
    const nodes = await json(member, ['get', 'nodes']);
    assert.deepEqual(nodes.items.map((n: any) => n.metadata.name).sort(), ['kwok-node-0', 'kwok-node-1']);
    for (const n of nodes.items) {
      assert.equal(n.metadata.annotations['kwok.x-k8s.io/node'], 'fake');
      assert.equal(n.status.conditions.find((c: any) => c.type === 'Ready')?.status, 'True', `${n.metadata.name} Ready`);
    }
    const sc = await json(member, ['get', 'storageclass', 'standard']);
    assert.equal(sc.metadata.annotations['storageclass.kubernetes.io/is-default-class'], 'true');
    for (const crd of ['applications.myapp.example.com', 'releases.myapp.example.com', 'virtualservices.networking.istio.io']) {
      const c = await json(member, ['get', 'crd', crd]);
      assert.ok(c.status.conditions.some((x: any) => x.type === 'Established' && x.status === 'True'), `${crd} Established`);
    }
  });

  it('schedules a Deployment\'s pods onto its kwok nodes and makes them Ready', async () => {
    const ns = `${name}-apps`;
    await kubectl(member, ['create', 'namespace', ns]);
    await kubectl(member, ['-n', ns, 'create', 'deployment', 'web', '--image=registry.invalid/app:v1', '--replicas=2']);
    await eventually('deployment web ready in the member', async () => {
      const d = await json(member, ['-n', ns, 'get', 'deployment', 'web']);
      return d.status?.readyReplicas === 2 ? d : undefined;
    }, { timeoutMs: 60_000 });
    const pods = await json(member, ['-n', ns, 'get', 'pods', '-l', 'app=web']);
    assert.equal(pods.items.length, 2);
    for (const p of pods.items) {
      assert.match(p.spec.nodeName, /^kwok-node-[01]$/, 'placed by the member\'s scheduler');
      assert.equal(p.status.conditions.find((c: any) => c.type === 'Ready')?.status, 'True');
    }
    const onHub = await kubectl(hub, ['get', 'namespace', ns, '--ignore-not-found', '-o', 'name']);
    assert.equal(onHub.trim(), '', 'the hub is another cluster');
  });

  it('is registered in the hub by a labelled Secret whose kubeconfig reaches the member', async () => {
    const secret = await json(hub, ['-n', DEFAULT_CLUSTERS_NAMESPACE, 'get', 'secret', `cluster-${name}`]);
    assert.equal(secret.type, 'Opaque');
    assert.equal(secret.metadata.labels[CLUSTER_LABEL], name);
    const listed = await json(hub, ['-n', DEFAULT_CLUSTERS_NAMESPACE, 'get', 'secrets', '-l', `${CLUSTER_LABEL}=${name}`]);
    assert.equal(listed.items.length, 1, 'found by its label');
    const data = (key: string) => Buffer.from(secret.data[key], 'base64').toString('utf8');
    assert.equal(data(CLUSTER_TEMPORAL_NAMESPACE_KEY), `cluster-${name}`);
    const kubeconfig = data(CLUSTER_KUBECONFIG_KEY);
    const parsed = parse(kubeconfig);
    assert.equal(parsed['current-context'], name);
    assert.equal(parsed.clusters[0].cluster.server, `https://127.0.0.1:${member.ports.apiserver}`);
    assert.ok(parsed.clusters[0].cluster['certificate-authority-data'] && parsed.users[0].user['client-certificate-data'] && parsed.users[0].user['client-key-data'], 'credentials embedded');
    const file = join(tmp, 'kubeconfig');
    await writeFile(file, kubeconfig, { mode: 0o600 });
    // A marker only the member has, read back through the Secret's kubeconfig alone.
    await kubectl(member, ['-n', 'default', 'create', 'configmap', `marker-${name}`]);
    const marker = await json({ kubeconfig: file }, ['-n', 'default', 'get', 'configmap', `marker-${name}`]);
    assert.equal(marker.metadata.name, `marker-${name}`);
    assert.equal((await kubectl(hub, ['-n', 'default', 'get', 'configmap', `marker-${name}`, '--ignore-not-found', '-o', 'name'])).trim(), '');
    const saved = await readMemberCluster(hub.stateDir, name);
    assert.equal(saved?.kubeconfig, join(member.stateDir, 'kubeconfig'));
    await access(saved.kubeconfig);
  });

  it('has its Temporal namespace on the hub\'s Temporal, with the operator\'s search attributes', async () => {
    const temporal = (args: string[]) => exec(artifactPaths().temporal, [...args, `--address=${hub.temporalAddress}`], { timeout: 30_000 });
    const { stdout } = await temporal(['operator', 'namespace', 'describe', `--namespace=cluster-${name}`, '--output=json']);
    assert.equal(JSON.parse(stdout).namespaceInfo.name, `cluster-${name}`);
    const attrs = JSON.parse((await temporal(['operator', 'search-attribute', 'list', `--namespace=cluster-${name}`, '--output=json'])).stdout);
    for (const k of searchAttributeKeys) assert.ok(k.name in attrs.customAttributes, `${k.name} registered`);
    assert.equal(member.temporalAddress, hub.temporalAddress);
    assert.equal(member.temporalNamespace, `cluster-${name}`);
  });

  it('is recorded in the hub\'s stack.json, shown by status and env --cluster, and adding it again changes nothing', async () => {
    assert.ok((await readStack(hub.stateDir))?.clusters?.includes(name));
    const pids = controlPlaneServerNames.map((s) => member.servers[s].pid);
    const [again] = await addMemberClusters(hub, [name]);
    assert.deepEqual(controlPlaneServerNames.map((s) => again!.servers[s].pid), pids, 'running servers left alone');
    assert.deepEqual(again!.ports, member.ports);

    const env = await stackCli(hub, ['env', '--cluster', name]);
    assert.equal(env.code, 0, env.stderr);
    assert.match(env.stdout, new RegExp(`^export KUBECONFIG=${join(member.stateDir, 'kubeconfig')}$`, 'm'));
    assert.match(env.stdout, new RegExp(`^export TEMPORAL_ADDRESS=${hub.temporalAddress}$`, 'm'));
    assert.match(env.stdout, new RegExp(`^export TEMPORAL_NAMESPACE=cluster-${name}$`, 'm'));
    assert.match(env.stdout, new RegExp(`^export STACK_STATE_DIR=${hub.stateDir}$`, 'm'));
    const unknown = await stackCli(hub, ['env', '--cluster', 'no-such-member']);
    assert.equal(unknown.code, 1);
    assert.match(unknown.stderr, /no member cluster "no-such-member"/);
    assert.match(unknown.stderr, new RegExp(`its members: .*\\b${name}\\b`));

    const status = await stackCli(hub, ['status']);
    for (const s of controlPlaneServerNames) assert.match(status.stdout, new RegExp(`^${name}/${s} +up `, 'm'), status.stdout);
  });

  it('brings its API server back after a restart, on the same port, leaving the hub\'s alone', async () => {
    const hubPid = (await readStack(hub.stateDir))!.servers['kube-apiserver'].pid;
    const before = member.servers['kube-apiserver'].pid;
    await restartServer(member, 'kube-apiserver', { signal: 'SIGKILL' });
    const after = (await readMemberCluster(hub.stateDir, name))!.servers['kube-apiserver'].pid;
    assert.ok(after && after !== before, 'a new process');
    assert.ok(!isOurs(before, member.servers['kube-apiserver'].command), 'the old one is gone');
    assert.equal((await readStack(hub.stateDir))!.servers['kube-apiserver'].pid, hubPid);
    const nodes = await json(member, ['get', 'nodes']);
    assert.equal(nodes.items.length, 2);
  });

  it('is stopped and forgotten by removeMemberClusters', async () => {
    const current = (await readMemberCluster(hub.stateDir, name))!;
    const running = controlPlaneServerNames.map((s) => current.servers[s]);
    assert.ok(running.every((s) => isOurs(s.pid, s.command)));
    await removeMemberClusters(hub, [name]);
    removed = true;
    for (const s of running) assert.ok(!isOurs(s.pid, s.command), `${s.name} (pid ${s.pid}) stopped`);
    const secret = await kubectl(hub, ['-n', DEFAULT_CLUSTERS_NAMESPACE, 'get', 'secret', `cluster-${name}`, '--ignore-not-found', '-o', 'name']);
    assert.equal(secret.trim(), '', 'Secret deleted');
    assert.equal(await readMemberCluster(hub.stateDir, name), null);
    await assert.rejects(access(memberStateDir(hub.stateDir, name)), 'state folder removed');
    assert.ok(!(await readStack(hub.stateDir))?.clusters?.includes(name), 'dropped from the hub\'s stack.json');
  });
});
