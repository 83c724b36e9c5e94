// The strategies that need no mesh, proven on real HTTP requests through the stack's Traefik: a blue-green rollout
// (the Service <app> switched by its selector, a preview Service beside it) promoted and aborted in its switch-back
// window, and a canary by replicas (the share is the canary's share of the pods). Requests reach the Service <app>
// through an HTTPRoute the test writes itself, as a user's ingress would; the pod server says which version answered.
// And the API server refusing the specs these strategies cannot run.
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { resolve } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { eventually } from '../../lib/poll.ts';
import { sendRequests, summarize, type TrafficSummary } from '../../lib/traffic.ts';
import { servingImage } from '../../stack/pod-behaviour.ts';
import { appManifest, applyAsUser, closeTemporal, getApp, getDeployment, getObject, kube, testNamespace, type Json } from '../../testkit/apps.ts';
import { waitCanaryPhase } from '../../testkit/canary.ts';
import { dataPlane, gatewayParentRef, podRequests, sendThroughGateway, waitForVersions } from '../../testkit/dataplane.ts';
import { testEnv } from '../../testkit/env.ts';
import { testImages } from '../../stack/stack.ts';
import { startOperator, type OperatorProcess } from '../../testkit/operator.ts';

const V1 = servingImage({ version: 'v1' });
const V2 = servingImage({ version: 'v2' });
const gates = { interval: '1s', failureThreshold: 3, initialDelay: '2s' };
const hostOf = (ns: string, name: string) => `${name}.${ns}.test`;
const cliPath = resolve(import.meta.dirname, '..', '..', 'bin', 'application-operator.ts');

/** Runs the project's CLI (as a user would, `application-operator promote web -n ns`); rejects on a non-zero exit. */
async function cli(args: string[]): Promise<string> {
  const env = await testEnv();
  return new Promise((res, rej) => {
    execFile(process.execPath, [cliPath, ...args, `--temporal-address=${env.temporalAddress}`, `--temporal-namespace=${env.temporalNamespace}`], { timeout: 60_000 }, (error, stdout, stderr) => {
      if (error) rej(new Error(`application-operator ${args.join(' ')}: exit ${String(error.code)}\n${stdout}${stderr}`));
      else res(stdout);
    });
  });
}

/** An HTTPRoute of the user's own on the stack's Gateway: every request for `host` goes to the Service `service`. */
async function userRoute(ns: string, routeName: string, host: string, service: string): Promise<void> {
  await applyAsUser({
    apiVersion: 'gateway.networking.k8s.io/v1', kind: 'HTTPRoute', metadata: { name: routeName, namespace: ns },
    spec: { parentRefs: [await gatewayParentRef()], hostnames: [host], rules: [{ backendRefs: [{ name: service, port: 80 }] }] },
  });
}

/** A blue-green Application without a mesh or a router: v1 on the stable Deployment, v2 as the preview. */
function blueGreenApp(ns: string, name: string, blueGreen: Json): Json {
  return appManifest(ns, name, {
    image: V1, replicas: 2,
    serviceMesh: { enabled: false, canary: { enabled: true, canaryVersion: 'v2', image: V2, strategy: 'blueGreen', healthGates: gates, blueGreen } },
  });
}

/** Sends rounds of requests until every answer of a round comes from `version`; seconds from `since` to that round. */
async function untilAllFrom(host: string, version: string, since: number, timeoutMs = 60_000): Promise<number> {
  let last = '';
  try {
    return await eventually(`every request to ${host} answered by ${version}`, async () => {
      const s = await sendThroughGateway({ host }, { count: 40, concurrency: 4 });
      last = JSON.stringify(s.byVersion);
      return s.total === 40 && s.byVersion[version] === 40 ? (Date.now() - since) / 1000 : undefined;
    }, { timeoutMs, intervalMs: 20 });
  } catch (err) {
    throw new Error(`${String(err)}; last round: ${last}`, { cause: err });
  }
}

/** Asserts that all `count` requests to `host` were answered, by `version` alone, and returns the summary. */
async function allFrom(host: string, version: string, count: number): Promise<TrafficSummary & { answers: { pod?: string }[] }> {
  const s = await sendThroughGateway({ host }, { count, concurrency: 6 });
  assert.deepEqual(s.byVersion, { [version]: count }, `${count} requests to ${host}: ${JSON.stringify(s.byStatus)}`);
  return s;
}

/** Requests at a steady rate for `ms`: every one must be answered by `version` (nothing leaks back after a rollout ends). */
async function steadilyFrom(host: string, version: string, ms: number): Promise<void> {
  const answers = await sendRequests({ url: (await dataPlane()).gatewayUrl, host }, { rps: 50, durationMs: ms });
  const s = summarize(answers);
  assert.deepEqual(s.byVersion, { [version]: s.total }, `${s.total} requests over ${ms} ms to ${host}: ${JSON.stringify(s.byStatus)}`);
}

const selectorOf = async (ns: string, name: string) => (await getObject('v1', 'Service', ns, name))?.spec?.selector as Record<string, string> | undefined;

describe('strategies without a mesh, on real requests', () => {
  // A namespace per test, one operator watching them all (two cores: one process instead of four).
  const names = ['bg-promote', 'bg-abort', 'by-replicas', 'slow-pods', 'refused'] as const;
  const ns: Record<string, { name: string; cleanup: () => Promise<void> }> = {};
  let op: OperatorProcess | undefined;
  before(async () => {
    await dataPlane();
    for (const n of names) ns[n] = await testNamespace(n);
    op = await startOperator({ namespaces: names.map((n) => ns[n]!.name) });
  });
  after(async () => {
    await op?.stop();
    await closeTemporal();
    for (const n of names) await ns[n]?.cleanup();
  });
  const nsOf = (n: typeof names[number]) => ns[n]!.name;

  it('blue-green: the preview answers alone beside stable, promote switches every request to the new version, and stable ends on the new image', async () => {
    const n = nsOf('bg-promote');
    const host = hostOf(n, 'web');
    await applyAsUser(blueGreenApp(n, 'web', { scaleDownDelaySeconds: 15 }));
    await userRoute(n, 'web-ingress', host, 'web');
    await userRoute(n, 'web-preview-ingress', hostOf(n, 'preview'), 'web-preview');

    const paused = await waitCanaryPhase(n, 'web', 'Paused', 120_000);
    assert.match(paused.status.canary.message, /switch all traffic to v2/);
    assert.deepEqual(await selectorOf(n, 'web'), { 'app.kubernetes.io/name': 'web', version: 'stable' }, 'before the switch the Service pins the stable pods');
    assert.deepEqual(await selectorOf(n, 'web-preview'), { 'app.kubernetes.io/name': 'web', version: 'v2' }, 'the preview Service selects the new version only');
    assert.equal((await getDeployment(n, 'web-canary'))?.spec.replicas, 2, 'the preview runs spec.replicas pods');

    await waitForVersions({ host }, ['stable']);
    await allFrom(host, 'stable', 200);
    await waitForVersions({ host: hostOf(n, 'preview') }, ['v2']);
    await allFrom(hostOf(n, 'preview'), 'v2', 100);

    // Requests all along, from before the promote until after the rollout ended: once the switch is made, none may
    // reach a pod of the old image again (the stable Deployment's own rollout to the new image, the Service taken
    // back to the stable pods, the preview going).
    const load = new AbortController();
    const during: { at: number; pod?: string | undefined; version?: string | undefined }[] = [];
    const background = sendRequests({ url: (await dataPlane()).gatewayUrl, host }, { rps: 30, signal: load.signal, onAnswer: (a) => during.push({ at: Date.now(), pod: a.pod, version: a.version }) });
    const asked = Date.now();
    await cli(['promote', 'web', '-n', n]);
    const answered = Date.now();
    const seconds = await untilAllFrom(host, 'v2', asked);
    const switchedAt = asked + seconds * 1000;
    console.log(`blue-green promote: no request reaches the old version ${seconds.toFixed(2)} s after the promote command started (the command itself took ${((answered - asked) / 1000).toFixed(2)} s)`);
    assert.ok(seconds < 30, `the switch took ${seconds} s`);
    const switched = await allFrom(host, 'v2', 200);
    assert.deepEqual(await selectorOf(n, 'web'), { 'app.kubernetes.io/name': 'web', version: 'v2' }, 'after the switch the Service selects the new version');
    assert.ok(Object.keys(switched.byPod).every((p) => p.startsWith(`${n}/web-canary-`)), `answered by the preview's pods: ${Object.keys(switched.byPod).join()}`);

    const done = await waitCanaryPhase(n, 'web', 'Promoted', 120_000);
    assert.equal(done.spec.image, V2);
    assert.equal(done.spec.serviceMesh.canary.enabled, false);
    await eventually('the preview Deployment and Service gone', async () =>
      (await getDeployment(n, 'web-canary')) === null && (await getObject('v1', 'Service', n, 'web-preview')) === null ? true : undefined, { timeoutMs: 60_000 });
    assert.equal((await getDeployment(n, 'web'))!.spec.template.spec.containers[0].image, V2, 'the stable Deployment runs the new image');
    assert.deepEqual(await selectorOf(n, 'web'), { 'app.kubernetes.io/name': 'web', version: 'stable' }, 'the Service is back on the stable pods');
    // The stable Deployment's rollout to the new image ends with only new pods ready: then every answer is theirs.
    await eventually('only stable pods of the new image answer', async () => {
      const s = await sendThroughGateway({ host }, { count: 40, concurrency: 4 });
      const pods = (await podRequests(n)).pods;
      const images = Object.keys(s.byPod).map((p) => pods.find((q) => `${q.namespace}/${q.name}` === p)?.images.join() ?? '?');
      return s.byVersion['stable'] === 40 && images.every((i) => i === V2) ? true : undefined;
    }, { timeoutMs: 90_000, intervalMs: 500 });
    const after = await allFrom(host, 'stable', 200);
    load.abort();
    await background;
    const pods = (await podRequests(n)).pods;
    const imageOf = (p: string | undefined) => pods.find((q) => `${q.namespace}/${q.name}` === p)?.images.join() ?? `(pod ${String(p)} unknown)`;
    for (const p of Object.keys(after.byPod)) {
      assert.equal(imageOf(p), V2, `${p} runs the new image`);
      assert.ok(!p.startsWith(`${n}/web-canary-`), `${p} is a stable pod`);
    }
    const late = during.filter((a) => a.at > switchedAt + 500);
    // An answer from a pod of the old image breaks the promise; a request that got no pod's answer (the proxy had not
    // yet followed an endpoint change) is counted and bounded.
    const old = late.filter((a) => a.pod !== undefined && imageOf(a.pod) !== V2);
    const unanswered = late.filter((a) => a.pod === undefined);
    console.log(`blue-green promote: ${late.length} requests after the switch, ${old.length} answered by a pod of the old image, ${unanswered.length} unanswered`);
    assert.ok(late.length > 100, `requests went on after the switch (${late.length})`);
    assert.deepEqual(old.slice(0, 5), [], `after the switch, answers from the old image: ${old.length}`);
    assert.ok(unanswered.length <= late.length * 0.02, `at most 2% unanswered after the switch: ${unanswered.length} of ${late.length}`);
  });

  it('blue-green: an abort in the switch-back window puts every request back on the untouched stable version', async () => {
    const n = nsOf('bg-abort');
    const host = hostOf(n, 'back');
    await applyAsUser(blueGreenApp(n, 'back', { autoPromotionSeconds: 0, scaleDownDelaySeconds: 300 }));
    await userRoute(n, 'back-ingress', host, 'back');
    await eventually('the switch-back window', async () => {
      const a = await getApp(n, 'back');
      return a?.status?.canary?.weight === 100 && /keep the old version/.test(a.status.canary.message ?? '') ? a : undefined;
    }, { timeoutMs: 120_000, intervalMs: 300 });
    await waitForVersions({ host }, ['v2']);
    await allFrom(host, 'v2', 200);
    assert.equal((await getDeployment(n, 'back'))!.spec.template.spec.containers[0].image, V1, 'in the window stable still runs the old image');

    const asked = Date.now();
    await cli(['abort', 'back', '-n', n, '--reason', 'switch back']);
    const answered = Date.now();
    const seconds = await untilAllFrom(host, 'stable', asked);
    console.log(`blue-green abort: every request on the stable version again ${seconds.toFixed(2)} s after the abort command started (the command itself took ${((answered - asked) / 1000).toFixed(2)} s)`);
    assert.ok(seconds < 30, `the switch-back took ${seconds} s`);

    const app = await waitCanaryPhase(n, 'back', 'Aborted', 60_000);
    assert.equal(app.spec.image, V1, 'the spec keeps the old image');
    assert.equal((await getDeployment(n, 'back'))!.spec.template.spec.containers[0].image, V1, 'the stable Deployment never changed');
    assert.deepEqual(await selectorOf(n, 'back'), { 'app.kubernetes.io/name': 'back', version: 'stable' });
    // While the reconciler takes the Service back and the preview's pods go, no request reaches them.
    await steadilyFrom(host, 'stable', 5000);
    assert.deepEqual(await selectorOf(n, 'back'), { 'app.kubernetes.io/name': 'back', version: 'stable' }, 'the reconciler keeps the stable pods pinned');
    const after = await allFrom(host, 'stable', 200);
    const pods = (await podRequests(n)).pods;
    for (const p of Object.keys(after.byPod)) assert.deepEqual(pods.find((q) => `${q.namespace}/${q.name}` === p)?.images, [V1], `${p} runs the old image`);
    await eventually('the preview gone', async () => {
      const left = [(await getDeployment(n, 'back-canary')) && 'Deployment back-canary', (await getObject('v1', 'Service', n, 'back-preview')) && 'Service back-preview'].filter(Boolean);
      if (left.length) throw new Error(`still there: ${left.join(', ')}`);
      return true;
    }, { timeoutMs: 60_000 });
  });

  it('a canary by replicas: 1 canary pod beside 4 stable ones takes about 20% of real requests; abort puts all back on stable', async () => {
    const n = nsOf('by-replicas');
    const host = hostOf(n, 'pods');
    await applyAsUser(appManifest(n, 'pods', {
      image: V1, replicas: 4, traffic: { router: 'replicas' },
      serviceMesh: { enabled: false, canary: { enabled: true, canaryVersion: 'v2', image: V2, healthGates: gates, steps: [{ setWeight: 20 }, { pause: {} }] } },
    }));
    await userRoute(n, 'pods-ingress', host, 'pods');
    const paused = await waitCanaryPhase(n, 'pods', 'Paused', 120_000);
    // Asserted at the end, so that the share is measured and printed whatever status says.
    const routing = String(paused.status.canary.routing ?? '');
    console.log(`replicas router at the pause: status.canary.routing ${JSON.stringify(routing)}, weight ${paused.status.canary.weight}`);
    assert.equal((await getDeployment(n, 'pods-canary'))?.spec.replicas, 1, 'the canary Deployment has 1 replica');
    assert.deepEqual(await selectorOf(n, 'pods'), { 'app.kubernetes.io/name': 'pods' }, 'the Service selects both versions');

    await waitForVersions({ host }, ['stable', 'v2']);
    const s = await sendThroughGateway({ host }, { count: 400, concurrency: 8 });
    assert.equal(s.total, 400);
    assert.equal(s.errorRate, 0);
    const share = (100 * (s.byVersion['v2'] ?? 0)) / s.total;
    console.log(`replicas router at 20%: the canary answered ${share.toFixed(1)}% of 400 requests (${JSON.stringify(s.byVersion)})`);
    assert.ok(share >= 8 && share <= 35, `canary share ${share}%: ${JSON.stringify(s.byVersion)}`);
    assert.equal((s.byVersion['stable'] ?? 0) + (s.byVersion['v2'] ?? 0), 400, 'every request answered by one of the two versions');

    const asked = Date.now();
    await cli(['abort', 'pods', '-n', n]);
    const seconds = await untilAllFrom(host, 'stable', asked);
    console.log(`replicas router abort: every request on stable ${seconds.toFixed(2)} s after the abort command started`);
    await waitCanaryPhase(n, 'pods', 'Aborted', 60_000);
    assert.deepEqual(await selectorOf(n, 'pods'), { 'app.kubernetes.io/name': 'pods', version: 'stable' }, 'the Service pinned to the stable pods');
    await steadilyFrom(host, 'stable', 5000);
    await eventually('the canary Deployment gone', async () => ((await getDeployment(n, 'pods-canary')) === null ? true : undefined), { timeoutMs: 60_000 });
    assert.deepEqual(await selectorOf(n, 'pods'), { 'app.kubernetes.io/name': 'pods', version: 'stable' }, 'the reconciler keeps the stable pods pinned');
    await allFrom(host, 'stable', 200);
    assert.match(routing, /^approximately, by pods: 1 canary beside 4 stable$/, 'at the pause status.canary.routing says how the split is made');
  });

  it('a canary by replicas moves on from a weight once its pods are ready: a pause after it bakes at the share it names', async () => {
    // Found by hand: a pause at 80% ran whole with 1 of 8 canary pods ready (pods of testImages.slow get ready after 15 s).
    const n = nsOf('slow-pods');
    await applyAsUser(appManifest(n, 'slow', {
      image: V1, replicas: 2, traffic: { router: 'replicas' },
      serviceMesh: { enabled: false, canary: { enabled: true, canaryVersion: 'v2', image: testImages.slow, healthGates: { ...gates, initialDelay: '60s' }, steps: [{ setWeight: 50 }, { pause: { duration: '2s' } }, { setWeight: 80 }, { pause: {} }] } },
    }));
    const messages = new Set<string>();
    const atApproval = await eventually('the rollout at its approval (step 4)', async () => {
      const app = await getApp(n, 'slow');
      const canary = app?.status?.canary;
      if (canary?.message) messages.add(String(canary.message));
      return canary?.phase === 'Paused' && canary.step === 3 ? app : undefined;
    }, { timeoutMs: 150_000, intervalMs: 200 });
    const canary = await getDeployment(n, 'slow-canary');
    assert.equal(canary?.spec.replicas, 8, '80% beside 2 stable pods is 8 canary pods');
    assert.equal(canary?.status?.readyReplicas, 8, `every canary pod ready when the rollout holds at 80% (status: ${JSON.stringify(atApproval?.status?.canary)})`);
    assert.ok([...messages].some((m) => /^step 3\/4: set canary weight to 80%: waiting for the canary's pods to be ready \(\d\/8\)$/.test(m)), `status said it waited for the pods: ${JSON.stringify([...messages])}`);
    await cli(['abort', 'slow', '-n', n]);
    await waitCanaryPhase(n, 'slow', 'Aborted', 60_000);
  });

  it('the API server refuses a blue-green rollout with steps and a canary by replicas with a header route', async () => {
    const n = nsOf('refused');
    const refused = async (name: string, spec: Json, message: string) => {
      await assert.rejects(applyAsUser(appManifest(n, name, spec)), (err: Error) => {
        assert.match(err.message, /Invalid value|is invalid/, err.message);
        assert.ok(err.message.includes(message), `the refusal says "${message}": ${err.message}`);
        return true;
      });
      assert.equal(await getApp(n, name), null, `${name} was not stored`);
    };
    await refused('bg-steps', {
      image: V1, serviceMesh: { canary: { enabled: true, canaryVersion: 'v2', strategy: 'blueGreen', steps: [{ setWeight: 10 }] } },
    }, 'a blueGreen rollout takes no steps');
    await refused('replicas-header', {
      image: V1, traffic: { router: 'replicas' },
      serviceMesh: { canary: { enabled: true, canaryVersion: 'v2', steps: [{ setHeaderRoute: { match: [{ header: 'x-canary', exact: 'yes' }] } }] } },
    }, 'traffic.router replicas routes by replica counts only');
    // The same specs without what makes them wrong are stored: the refusals above are for those fields.
    await applyAsUser(appManifest(n, 'bg-ok', { image: V1, serviceMesh: { canary: { enabled: false, canaryVersion: 'v2', strategy: 'blueGreen' } } }));
    await applyAsUser(appManifest(n, 'replicas-ok', { image: V1, traffic: { router: 'replicas' }, serviceMesh: { canary: { enabled: false, canaryVersion: 'v2', steps: [{ setWeight: 10 }] } } }));
    assert.ok(await getApp(n, 'bg-ok'));
    assert.ok(await getApp(n, 'replicas-ok'));
    await kube(['-n', n, 'delete', 'application', 'bg-ok', 'replicas-ok', '--wait=false']);
  });
});
