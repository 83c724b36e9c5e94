// Fleet Releases, end to end: a hub cluster (the run's stack) and two member clusters of its own (each a real API
// server, controller manager, scheduler and kwok: stack/clusters.ts), an operator per cluster (each member's in its
// own Temporal namespace), and Releases on the hub whose waves name the members. Promoted across three clusters; a
// failure in the last cluster putting back the first two, last first; a member's API server stopped mid-wave and
// started again; the hub's operator killed mid-wave.
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { readFile } from 'node:fs/promises';
import { after, before, describe, it } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { API_VERSION, CLUSTER_HEALTH_LABEL, CLUSTER_LABEL, KIND } from '../../api/constants.ts';
import { formatRelease, formatReleaseHistory, releaseHistory, releaseStatus } from '../../client/release.ts';
import { Kube } from '../../kube/client.ts';
import { loadKubeconfig } from '../../kube/config.ts';
import { eventually } from '../../lib/poll.ts';
import { addMemberClusters, memberTemporalNamespace, removeMemberClusters, type MemberStackInfo } from '../../stack/clusters.ts';
import { startServer, stopServer, unreadyImage } from '../../stack/stack.ts';
import { applyAsUser, closeTemporal, eventsOf, getObject, temporalClient, testNamespace, type Json } from '../../testkit/apps.ts';
import { ownStack } from '../../testkit/env.ts';
import { startOperator, testFlags, type OperatorProcess } from '../../testkit/operator.ts';
import { assertRunsStable, meshApp, releaseManifest, releasePhaseIs, waitRelease } from '../../testkit/release.ts';

const steps = [{ setWeight: 50 }, { pause: { duration: '1s' } }];
const appRef = (ns: string, name: string) => ({ apiVersion: API_VERSION, kind: KIND, namespace: ns, name });

interface Member {
  /** The name Releases use (the Secret's label). */
  name: string;
  info: MemberStackInfo;
  kube: Kube;
  op?: OperatorProcess;
}

describe('fleet Releases across three clusters', () => {
  const tag = randomBytes(2).toString('hex');
  const names = [`fb${tag}`, `fc${tag}`];
  let ns: { name: string; cleanup: () => Promise<void> } | undefined;
  let hub: OperatorProcess | undefined;
  const members: Member[] = [];
  const member = (i: number) => members[i]!;

  /** A wave per cluster for one Application, canary 2.0: the hub, then b, then c (`last` changes c's entry). */
  const clusterByCluster = (app: string, last: Json = {}): Json[] => [
    { applications: [{ name: app, canaryVersion: '2.0' }] },
    { applications: [{ name: app, cluster: member(0).name, canaryVersion: '2.0' }] },
    { applications: [{ name: app, cluster: member(1).name, canaryVersion: '2.0', ...last }] },
  ];
  /** Waits until an Application in a member cluster is as `ok` wants it. */
  const waitMemberApp = async (m: Member, app: string, what: string, ok: (a: Json | null) => boolean, timeoutMs = 120_000) => {
    let last: Json | null | undefined;
    return eventually(`${app} in cluster ${m.name} ${what}`, async () => {
      const a = await m.kube.get<Json>(appRef(ns!.name, app)).catch(() => undefined);
      if (a !== undefined) last = a;
      return a !== undefined && ok(a) ? a : undefined;
    }, { timeoutMs }).catch((err: unknown) => {
      // Say what was there instead.
      const seen = last ? { generation: last['metadata'].generation, annotations: last['metadata'].annotations, image: last['spec']?.image, canary: last['spec']?.serviceMesh?.canary, status: { ...last['status'], conditions: undefined } } : last;
      throw new Error(`${err instanceof Error ? err.message : String(err)}\nlast seen: ${JSON.stringify(seen)}`);
    });
  };
  /** An Application in a member cluster runs `image` again (or now), its canary off, its claim gone. */
  const assertMemberRuns = async (m: Member, app: string, image: string) => {
    // The rollout's end is two writes (the image, then the canary switched off): wait for the last of them.
    await waitMemberApp(m, app, `runs ${image} with its canary off and no claim`, (x) => x?.['spec']?.image === image && x['spec'].serviceMesh?.canary?.enabled === false
      && x['metadata'].annotations?.['myapp.example.com/fleet-release'] === undefined && x['status']?.phase === 'Running' && x['status'].observedGeneration === x['metadata'].generation);
    await eventually(`${app}'s Deployment in ${m.name} runs ${image}`, async () => {
      const d = await m.kube.get<Json>({ apiVersion: 'apps/v1', kind: 'Deployment', namespace: ns!.name, name: app });
      return d?.['spec']?.template?.spec?.containers?.[0]?.image === image && d['status']?.availableReplicas >= 1 ? true : undefined;
    }, { timeoutMs: 60_000 });
  };

  before(async () => {
    const stack = await ownStack();
    ns = await testNamespace('fleet');
    const infos = await addMemberClusters(stack, names, { print: (l) => console.log(l) });
    for (const [i, info] of infos.entries()) {
      const kube = new Kube(await loadKubeconfig(info.kubeconfig));
      members.push({ name: names[i]!, info, kube });
      // The Releases' namespace exists in every cluster; its Applications are there.
      await kube.apply({ apiVersion: 'v1', kind: 'Namespace', metadata: { name: ns.name } }, { fieldManager: 'test-user' });
      // Registered with the hub in the test's own namespace (the hub operator's --clusters-namespace), as a user would.
      await applyAsUser({
        apiVersion: 'v1', kind: 'Secret', metadata: { name: `cluster-${names[i]}`, namespace: ns.name, labels: { [CLUSTER_LABEL]: names[i] } },
        stringData: { kubeconfig: await readFile(info.kubeconfig, 'utf8'), temporalNamespace: memberTemporalNamespace(names[i]!) },
      });
    }
    // An operator per member (its own cluster, its own Temporal namespace), and the hub's, which reaches the members.
    for (const m of members) {
      m.op = await startOperator({ namespaces: [ns.name], kubeconfig: m.info.kubeconfig, temporalNamespace: memberTemporalNamespace(m.name), logName: m.name });
    }
    hub = await startOperator({
      namespaces: [ns.name], logName: 'hub',
      flags: testFlags.map((f) => (f.startsWith('--release-poll-seconds=') ? '--release-poll-seconds=2' : f.startsWith('--cluster-probe-seconds=') ? '--cluster-probe-seconds=2' : f)),
      extraArgs: [`--clusters-namespace=${ns.name}`],
    });
    const apps = ['api', 'web', 'shop', 'cart'];
    for (const app of apps) await applyAsUser(meshApp(ns.name, app));
    for (const m of members) for (const app of apps) await m.kube.apply(meshApp(ns.name, app) as never, { fieldManager: 'test-user' });
    for (const m of members) for (const app of apps) await waitMemberApp(m, app, 'Running', (a) => a?.['status']?.phase === 'Running');
  });

  after(async () => {
    await hub?.stop();
    for (const m of members) await m.op?.stop();
    await closeTemporal();
    await removeMemberClusters(await ownStack(), names).catch((err: unknown) => console.error('removing the member clusters failed:', err));
    await ns?.cleanup();
  });

  it('each member cluster is probed: its Secret says Ready, with its version', async () => {
    for (const m of members) {
      const secret = await eventually(`the Secret of ${m.name} to say Ready`, async () => {
        const s = await getObject('v1', 'Secret', ns!.name, `cluster-${m.name}`);
        return s?.metadata?.labels?.[CLUSTER_HEALTH_LABEL] === 'Ready' ? s : undefined;
      }, { timeoutMs: 30_000 });
      assert.match(secret.metadata.annotations['myapp.example.com/cluster-version'], /^v1\.\d+\.\d+/);
      assert.match(secret.metadata.annotations['myapp.example.com/cluster-message'], /answers \(Kubernetes v1\./);
    }
  });

  it('a registration that cannot be used says why on its Secret, and a Release naming it (or no registered cluster) is refused before anything is claimed', async () => {
    // A kubeconfig that would have the operator run a command: refused, and the command never runs.
    const marker = `/tmp/fleet-exec-${tag}`;
    const exec = ['apiVersion: v1', 'kind: Config', 'current-context: x', 'clusters: [{name: x, cluster: {server: "https://127.0.0.1:1"}}]',
      `users: [{name: x, user: {exec: {apiVersion: client.authentication.k8s.io/v1, command: sh, args: ["-c", "touch ${marker}"]}}}]`, 'contexts: [{name: x, context: {cluster: x, user: x}}]'].join('\n');
    await applyAsUser({ apiVersion: 'v1', kind: 'Secret', metadata: { name: 'cluster-evil', namespace: ns!.name, labels: { [CLUSTER_LABEL]: 'evil' } }, stringData: { kubeconfig: exec } });
    const secret = await eventually('the Secret of evil to say InvalidKubeconfig', async () => {
      const got = await getObject('v1', 'Secret', ns!.name, 'cluster-evil');
      return got?.metadata?.labels?.[CLUSTER_HEALTH_LABEL] === 'InvalidKubeconfig' ? got : undefined;
    }, { timeoutMs: 30_000 });
    assert.match(secret.metadata.annotations['myapp.example.com/cluster-message'], /needs an exec plugin/);
    await applyAsUser(releaseManifest(ns!.name, 'evil', { waves: [{ applications: [{ name: 'api', canaryVersion: '9.0' }] }, { applications: [{ name: 'api', cluster: 'evil', canaryVersion: '9.0' }] }] }));
    await applyAsUser(releaseManifest(ns!.name, 'nowhere', { waves: [{ applications: [{ name: 'api', cluster: 'zz', canaryVersion: '9.0' }] }] }));
    const evil = await waitRelease(ns!.name, 'evil', releasePhaseIs('Failed'), 'Failed (refused)', 60_000);
    assert.match(evil.status.message, /^refused: cluster evil: the kubeconfig of Secret .*\/cluster-evil needs an exec plugin/);
    const nowhere = await waitRelease(ns!.name, 'nowhere', releasePhaseIs('Failed'), 'Failed (refused)', 60_000);
    assert.equal(nowhere.status.message, `refused: cluster zz is not registered: no Secret labelled ${CLUSTER_LABEL}=zz in namespace ${ns!.name}`);
    // Nothing claimed, on the hub either (its claim was let go), and the hub's api never left 1.0.
    const api = await getObject(API_VERSION, KIND, ns!.name, 'api');
    assert.equal(api?.metadata?.annotations?.['myapp.example.com/release'], undefined);
    assert.equal(api?.spec?.image, 'registry.example/api:1.0');
    assert.equal(await readFile(marker).then(() => true, () => false), false, 'the exec plugin never ran');
  });

  it('a Release whose waves name three clusters is promoted cluster by cluster, from a kubectl apply on the hub', async () => {
    const [b, c] = [member(0), member(1)];
    await applyAsUser(releaseManifest(ns!.name, 'fleet', {
      steps,
      waves: [
        { name: 'hub', applications: [{ name: 'api', canaryVersion: '2.0' }] },
        { name: 'first-member', applications: [{ name: 'api', cluster: b.name, canaryVersion: '2.0' }] },
        { name: 'second-member', applications: [{ name: 'api', cluster: c.name, canaryVersion: '2.0' }] },
      ],
    }));
    const rel = await waitRelease(ns!.name, 'fleet', releasePhaseIs('Promoted'), 'Promoted', 240_000);
    assert.deepEqual(rel.status.applications.map((a: Json) => `${a.cluster ?? 'hub'}/${a.name}:${a.phase}`), ['hub/api:Promoted', `${b.name}/api:Promoted`, `${c.name}/api:Promoted`]);
    await assertRunsStable(ns!.name, 'api', 'registry.example/api:2.0');
    for (const m of [b, c]) await assertMemberRuns(m, 'api', 'registry.example/api:2.0');
    // Each member's canary ran there, by its own operator: its rollout's history is in its own Temporal namespace.
    for (const m of [b, c]) {
      const a = await m.kube.get<Json>(appRef(ns!.name, 'api'));
      assert.equal(a!['status'].canary.phase, 'Promoted');
      assert.match(a!['status'].canary.workflowId ?? a!['status'].workflowId, /api/);
    }
    // The waves went in order: b's started after the hub's was promoted, c's after b's.
    const events = await eventsOf(ns!.name, rel.metadata.uid);
    const at = (text: RegExp) => events.find((e) => e.reason === 'ReleaseWaveStarted' && text.test(e.note))?.time ?? '';
    assert.ok(at(/wave 2/) !== '' && at(/wave 1/) <= at(/wave 2/) && at(/wave 2/) <= at(/wave 3/), 'waves in order');
    assert.match(events.find((e) => /wave 2/.test(e.note) && e.reason === 'ReleaseWaveStarted')!.note, new RegExp(`api in cluster ${b.name}`));
    const state = await releaseStatus(await temporalClient(), ns!.name, 'fleet');
    const text = formatRelease(state!);
    assert.match(text, new RegExp(`clusters: \\(this cluster\\): 1 Promoted · ${b.name}: 1 Promoted · ${c.name}: 1 Promoted`));
  });

  it('a canary failing in the last cluster stops the Release and puts the first two clusters back, last first', async () => {
    const [b, c] = [member(0), member(1)];
    await applyAsUser(releaseManifest(ns!.name, 'bad', { steps, waves: clusterByCluster('web', { canaryVersion: 'broken', image: unreadyImage }) }));
    const rel = await waitRelease(ns!.name, 'bad', releasePhaseIs('RolledBack'), 'RolledBack', 300_000);
    assert.equal(rel.status.failedApplication, `${c.name}/web`);
    assert.match(rel.status.message, new RegExp(`^the canary broken of web in cluster ${c.name} was rolled back: .*; every Application this release promoted runs its previous image again$`));
    assert.deepEqual(rel.status.applications.map((a: Json) => `${a.cluster ?? 'hub'}:${a.phase}`), ['hub:Reverted', `${b.name}:Reverted`, `${c.name}:Failed`]);
    await assertRunsStable(ns!.name, 'web', 'registry.example/web:1.0');
    for (const m of [b, c]) await assertMemberRuns(m, 'web', 'registry.example/web:1.0');
    // b was put back before the hub (last first), as the Release's story tells.
    const notes = (await releaseHistory(await temporalClient(), ns!.name, 'bad')).map((e) => e.message);
    const revertB = notes.findIndex((n) => n.includes(`rolling back: web in cluster ${b.name} back to`));
    const revertHub = notes.findIndex((n) => /rolling back: web back to/.test(n));
    assert.ok(revertB >= 0 && revertHub > revertB, `b before the hub: ${notes.join(' | ')}`);
    // The member's Application says who put it back.
    const bWeb = await b.kube.get<Json>(appRef(ns!.name, 'web'));
    assert.equal(bWeb!['status'].canary.reason, 'ReleaseReverted');
  });

  it("a member's API server stopped mid-wave holds the Release visibly; started again, the Release goes on and is promoted", async () => {
    const [b, c] = [member(0), member(1)];
    await applyAsUser(releaseManifest(ns!.name, 'outage', { steps: [{ setWeight: 50 }, { pause: { duration: '20s' } }], waves: clusterByCluster('shop') }));
    await waitRelease(ns!.name, 'outage', (r) => r.status?.wave === 2 && r.status.applications?.some((a: Json) => a.cluster === b.name && a.phase === 'Progressing'), `wave 2 running in ${b.name}`, 180_000);
    // Mid-wave: b's canary takes traffic and pauses (a canary whose pods are not up yet when its cluster's control
    // plane goes away may fail its own health gate when it comes back, which is b's operator's business, not this test's).
    await waitMemberApp(b, 'shop', 'at 50% in its pause', (a) => a?.['status']?.canary?.weight === 50);
    await stopServer(b.info, 'kube-apiserver');
    try {
      const held = await waitRelease(ns!.name, 'outage', (r) => r.status?.heldByCluster === b.name, `held by ${b.name}`, 60_000);
      assert.match(held.status.message, new RegExp(`^held: cluster ${b.name} cannot be reached \\(.*\\): cluster ${b.name} \\(https://127\\.0\\.0\\.1:\\d+\\): .*; the release goes on when it answers, or rolls back on abort$`));
      assert.equal(held.status.phase, 'Progressing');
      const events = await eventsOf(ns!.name, held.metadata.uid);
      assert.ok(events.some((e) => e.reason === 'ClusterUnreachable' && e.type === 'Warning'), 'a Warning Event says which cluster');
      // The probe says so on the Secret too.
      await eventually(`the Secret of ${b.name} to say Unreachable`, async () => ((await getObject('v1', 'Secret', ns!.name, `cluster-${b.name}`))?.metadata?.labels?.[CLUSTER_HEALTH_LABEL] === 'Unreachable' ? true : undefined), { timeoutMs: 30_000 });
      await sleep(3000);
      const still = await waitRelease(ns!.name, 'outage', () => true, 'read');
      assert.equal(still.status.heldByCluster, b.name, 'still held while the cluster is down');
      assert.equal(still.status.wave, 2, 'no wave started in the meantime');
    } finally {
      await startServer(b.info, 'kube-apiserver');
    }
    const rel = await waitRelease(ns!.name, 'outage', releasePhaseIs('Promoted'), 'Promoted', 240_000);
    assert.equal(rel.status.heldByCluster, undefined);
    for (const m of [b, c]) await assertMemberRuns(m, 'shop', 'registry.example/shop:2.0');
    assert.ok((await eventsOf(ns!.name, rel.metadata.uid)).some((e) => e.reason === 'ClusterReachable'), 'the Release said the cluster answers again');
    // `release history` tells the fleet story: each wave's cluster, the hold, the cluster answering, the end.
    const story = formatReleaseHistory(ns!.name, 'outage', await releaseHistory(await temporalClient(), ns!.name, 'outage'));
    const order = [`starting the canaries of shop in cluster ${b.name}`, `held: cluster ${b.name} cannot be reached`, `cluster ${b.name} answers again`, `starting the canaries of shop in cluster ${c.name}`, 'all 3 wave(s) promoted'];
    const positions = order.map((text) => story.indexOf(text));
    assert.ok(positions.every((p, i) => p >= 0 && (i === 0 || p > positions[i - 1]!)), `the story in order:\n${story}`);
    assert.match(story, /\[Warning ClusterUnreachable\]/);
  });

  it("the hub's operator killed mid-wave: started again, the Release takes up where it was and is promoted", async () => {
    const [b, c] = [member(0), member(1)];
    await applyAsUser(releaseManifest(ns!.name, 'crash', {
      steps: [{ setWeight: 50 }, { pause: { duration: '5s' } }],
      waves: [
        { applications: [{ name: 'cart', canaryVersion: '2.0' }] },
        { applications: [{ name: 'cart', cluster: b.name, canaryVersion: '2.0' }, { name: 'cart', cluster: c.name, canaryVersion: '2.0' }] },
      ],
    }));
    await waitRelease(ns!.name, 'crash', (r) => r.status?.wave === 2, 'wave 2 started', 180_000);
    await hub!.stop('SIGKILL');
    await sleep(3000);
    await hub!.restart();
    const rel = await waitRelease(ns!.name, 'crash', releasePhaseIs('Promoted'), 'Promoted', 240_000);
    assert.deepEqual(rel.status.applications.map((a: Json) => `${a.cluster ?? 'hub'}:${a.phase}`), ['hub:Promoted', `${b.name}:Promoted`, `${c.name}:Promoted`]);
    await assertRunsStable(ns!.name, 'cart', 'registry.example/cart:2.0');
    for (const m of [b, c]) await assertMemberRuns(m, 'cart', 'registry.example/cart:2.0');
  });
});
