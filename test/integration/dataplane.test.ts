// The local stack's data plane on real requests, without the operator: HTTPRoutes on the stack's Gateway, served by
// the real Traefik, carrying requests to pods that the pod server answers inside the stack's network namespace.
// What Traefik honours (weights, header matches, mirroring) is measured here by counting who answered.
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { eventually } from '../../lib/poll.ts';
import { noPod } from '../../lib/traffic.ts';
import { servingImages } from '../../stack/stack.ts';
import { query } from '../../testkit/prometheus.ts';
import { applyAsUser, kubeJson, testNamespace } from '../../testkit/apps.ts';
import { dataPlane, deployVersion, gatewayParentRef, podRequests, requestsByVersion, sendThroughGateway, settledRequestsByVersion, versionService, waitForVersions } from '../../testkit/dataplane.ts';
import { testEnv } from '../../testkit/env.ts';

type Rule = Record<string, unknown>;

describe('data plane: requests through Traefik to the pods kwok runs', () => {
  let ns: { name: string; cleanup: () => Promise<void> };
  const app = 'web';
  const backend = (version: string, weight?: number) => ({ name: `${app}-${version}`, port: 80, ...(weight !== undefined ? { weight } : {}) });
  const route = async (name: string, host: string, rules: Rule[]) => {
    await applyAsUser({
      apiVersion: 'gateway.networking.k8s.io/v1', kind: 'HTTPRoute', metadata: { name, namespace: ns.name },
      spec: { parentRefs: [await gatewayParentRef()], hostnames: [host], rules },
    });
  };
  const hostFor = (name: string) => `${name}.${ns.name}.test`;

  before(async () => {
    await dataPlane();
    ns = await testNamespace('dataplane');
    await deployVersion(ns.name, app, 'stable', servingImages.healthy, 2);
    await deployVersion(ns.name, app, 'canary', 'registry.invalid/app:v2', 1);
  });
  after(async () => ns.cleanup());

  it('splits 1,000 requests 80/20 between two Services by HTTPRoute weights, every answer naming its pod', async () => {
    const host = hostFor('weights');
    await route('weights', host, [{ backendRefs: [backend('stable', 80), backend('canary', 20)] }]);
    await waitForVersions({ host }, ['stable', 'canary']);
    const before = await requestsByVersion(ns.name);
    const s = await sendThroughGateway({ host, path: '/shop' }, { count: 1000, concurrency: 16 });
    const canaryShare = (100 * (s.byVersion['canary'] ?? 0)) / s.total;
    console.log(`measured canary share at weight 20: ${canaryShare.toFixed(1)}% of ${s.total} (${JSON.stringify(s.byVersion)})`);
    assert.equal(s.total, 1000);
    assert.deepEqual(s.byStatus, { 200: 1000 });
    assert.ok(Math.abs(canaryShare - 20) <= 5, `canary share ${canaryShare}% is within 5 points of 20`);
    const pods = (await podRequests(ns.name)).pods;
    for (const a of s.answers) {
      const pod = pods.find((p) => `${p.namespace}/${p.name}` === a.pod);
      assert.ok(pod, `answer names a pod of the namespace (${a.pod})`);
      assert.equal(pod.version, a.version, 'the answer\'s version is its pod\'s label');
      assert.ok(pod.name.startsWith(`${app}-${a.version}-`), `${pod.name} belongs to ${app}-${a.version}`);
    }
    assert.equal(Object.keys(s.byPod).length, 3, 'both stable pods and the canary pod served');
    const counted = await requestsByVersion(ns.name);
    assert.equal((counted['canary'] ?? 0) - (before['canary'] ?? 0), s.byVersion['canary'], 'the pod server counted what the client saw');
  });

  it('sends every request with a matching header to the canary and no other', async () => {
    const host = hostFor('header');
    await route('header', host, [
      { matches: [{ headers: [{ type: 'Exact', name: 'x-canary', value: 'always' }] }], backendRefs: [backend('canary')] },
      { backendRefs: [backend('stable')] },
    ]);
    await waitForVersions({ host }, ['stable']);
    const matching = await sendThroughGateway({ host, headers: { 'x-canary': 'always' } }, { count: 200, concurrency: 8 });
    assert.deepEqual(matching.byVersion, { canary: 200 });
    const other = await sendThroughGateway({ host, headers: { 'x-canary': 'sometimes' } }, { count: 200, concurrency: 8 });
    assert.deepEqual(other.byVersion, { stable: 200 });
  });

  it('mirrors a share of requests to the canary with a TraefikService, while every answer comes from stable', async () => {
    // Traefik's Gateway provider has no RequestMirror filter (next test); its own mirroring service, named as the
    // route's backend, is how this proxy mirrors.
    const host = hostFor('mirror');
    await applyAsUser({
      apiVersion: 'traefik.io/v1alpha1', kind: 'TraefikService', metadata: { name: 'web-mirror', namespace: ns.name },
      spec: { mirroring: { name: `${app}-stable`, port: 80, mirrors: [{ name: `${app}-canary`, port: 80, percent: 25 }] } },
    });
    await route('mirror', host, [{ backendRefs: [{ group: 'traefik.io', kind: 'TraefikService', name: 'web-mirror' }] }]);
    await waitForVersions({ host }, ['stable']);
    const before = await settledRequestsByVersion(ns.name);
    const s = await sendThroughGateway({ host }, { count: 400, concurrency: 8 });
    assert.deepEqual(s.byVersion, { stable: 400 }, 'every client answer comes from stable');
    const now = await settledRequestsByVersion(ns.name);
    assert.equal((now['canary'] ?? 0) - (before['canary'] ?? 0), 100, '25% of 400 requests copied to the canary');
    assert.equal((now['stable'] ?? 0) - (before['stable'] ?? 0), 400, 'stable answered each request once');
  });

  it('answers 500 for a rule with the standard RequestMirror filter, which Traefik 3.6 does not implement', async () => {
    const host = hostFor('requestmirror');
    await route('requestmirror', host, [{
      filters: [{ type: 'RequestMirror', requestMirror: { backendRef: backend('canary'), percent: 50 } }],
      backendRefs: [backend('stable')],
    }]);
    const s = await eventually('Traefik serves the route', async () => {
      const got = await sendThroughGateway({ host }, { count: 10, concurrency: 2 });
      return got.byStatus['404'] ? undefined : got;
    });
    assert.deepEqual(s.byStatus, { 500: 10 }, 'every request of the rule fails at the proxy');
    assert.deepEqual(s.byVersion, { [noPod]: 10 }, 'no pod answered');
    // The trap: the route's status does not say so.
    const status = (await kubeJson(['-n', ns.name, 'get', 'httproute.gateway.networking.k8s.io', 'requestmirror'])).status;
    const conditions = Object.fromEntries(status.parents[0].conditions.map((c: any) => [c.type, c.status]));
    assert.deepEqual(conditions, { Accepted: 'True', ResolvedRefs: 'True' });
  });

  it('passes on the 503s of a canary whose image fails every request', async () => {
    await deployVersion(ns.name, app, 'broken', servingImages.errors100, 1);
    const host = hostFor('broken');
    await route('broken', host, [{ backendRefs: [backend('broken')] }]);
    const s = await eventually('requests reach the broken pod', async () => {
      const got = await sendThroughGateway({ host }, { count: 50, concurrency: 4 });
      return got.byVersion['broken'] === 50 ? got : undefined;
    });
    assert.deepEqual(s.byStatus, { 503: 50 });
    assert.equal(s.errorRate, 1);
  });

  it('gives the stack\'s Prometheus Traefik\'s request counters by Service within seconds', async () => {
    // A Service of its own, so that its counter holds this test's requests only.
    await applyAsUser({ ...versionService(ns.name, app, 'stable'), metadata: { name: `${app}-counted`, namespace: ns.name } });
    const host = hostFor('metrics');
    await route('metrics', host, [{ backendRefs: [{ name: `${app}-counted`, port: 80 }] }]);
    await waitForVersions({ host }, ['stable']);
    const service = `${ns.name}-${app}-counted-http-80@kubernetesgateway`;
    const dp = await dataPlane();
    const exposed = await (await fetch(dp.traefikMetricsUrl)).text();
    const line = exposed.split('\n').find((l) => l.startsWith('traefik_service_requests_total{') && l.includes(`service="${service}"`) && l.includes('code="200"'));
    assert.ok(line, `Traefik counts requests for ${service}`);
    const before = Number(line.split(' ').at(-1));
    await sendThroughGateway({ host }, { count: 100, concurrency: 4 });
    const sent = Date.now();
    const env = await testEnv();
    const promql = `sum(traefik_service_requests_total{job="traefik",service="${service}",code="200"})`;
    await eventually(`${promql} = ${before + 100}`, async () => {
      const [sample] = await query(env.prometheusUrl, promql);
      return Number(sample?.value[1]) === before + 100 ? true : undefined;
    }, { timeoutMs: 15_000, intervalMs: 200 });
    console.log(`Prometheus had Traefik's count of the 100 requests ${((Date.now() - sent) / 1000).toFixed(1)} s after the last answer`);
    const accepted = await kubeJson(['-n', ns.name, 'get', 'httproute.gateway.networking.k8s.io', 'metrics']);
    assert.ok(accepted.status.parents.some((p: any) => p.conditions.some((c: any) => c.type === 'Accepted' && c.status === 'True')), 'Traefik accepted the route');
  });
});
