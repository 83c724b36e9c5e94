// The pure parts of the local stack's data plane: an image's behaviour, the pod-address slices that keep concurrent
// stacks apart, the wrapper module's directives for building Traefik, and the load generator's counting and
// addressing. The data plane itself is proven on real requests in test/integration/dataplane.test.ts.
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { noPod, assertLoopback, quantile, shareOf, summarize } from '../../lib/traffic.ts';
import { wrapperDirectives } from '../../stack/build.ts';
import { assertDataPlaneChoice, traefikArgs, withFlag } from '../../stack/dataplane.ts';
import type { StackInfo } from '../../stack/stack.ts';
import { behaviourOf, failsRequest, imageTag, servingImage, servingImages } from '../../stack/pod-behaviour.ts';
import { freeSlices, overlaps, parseCidr, podPool, podsPerNode, sliceLayout, slicesOf } from '../../stack/pod-cidr.ts';
import { podNetworkNames } from '../../stack/pod-network.ts';
import { podEntryOf } from '../../stack/pod-server.ts';
import { formatSummary, routeTarget } from '../../stack/traffic.ts';

describe('pod behaviour by image', () => {
  test('reads the tag of any image reference', () => {
    assert.equal(imageTag('registry.invalid/app:errors-5'), 'errors-5');
    assert.equal(imageTag('localhost:5000/app'), 'latest');
    assert.equal(imageTag('localhost:5000/app:v2'), 'v2');
    assert.equal(imageTag('app@sha256:abc'), 'latest');
    assert.equal(imageTag('app:v3@sha256:abc'), 'v3');
  });

  test('errors-<percent> and slow-<n>ms|s choose the behaviour; other tokens are versions', () => {
    const cases: [string, { errorPercent: number; latencyMs: number }][] = [
      [servingImages.healthy, { errorPercent: 0, latencyMs: 0 }],
      ['nginx:1.27', { errorPercent: 0, latencyMs: 0 }],
      [servingImages.errors5, { errorPercent: 5, latencyMs: 0 }],
      [servingImages.errors100, { errorPercent: 100, latencyMs: 0 }],
      [servingImages.slow200ms, { errorPercent: 0, latencyMs: 200 }],
      ['registry.invalid/app:v2_errors-2.5_slow-1s', { errorPercent: 2.5, latencyMs: 1000 }],
      [servingImage({ version: 'v2', errorPercent: 5, latencyMs: 30 }), { errorPercent: 5, latencyMs: 30 }],
    ];
    for (const [image, want] of cases) assert.deepEqual(behaviourOf(image), want, image);
    assert.equal(servingImage({ version: 'v2', errorPercent: 5 }), 'registry.invalid/app:v2_errors-5');
    assert.equal(servingImage({}), 'registry.invalid/app:latest');
  });

  test('a malformed behaviour token is an error naming it', () => {
    assert.throws(() => behaviourOf('app:errors-150'), /errors-150 should be errors-<percent>, a number from 0 to 100/);
    assert.throws(() => behaviourOf('app:errors-x'), /errors-x/);
    assert.throws(() => behaviourOf('app:slow-fast'), /slow-fast should be slow-<n>ms or slow-<n>s/);
    assert.throws(() => behaviourOf('app:v1_slow-10m'), /slow-10m/);
  });

  test('failures are spread evenly and add up to the share exactly', () => {
    for (const percent of [0, 2.5, 5, 20, 33, 100]) {
      const failed = Array.from({ length: 1000 }, (_, i) => failsRequest(i + 1, percent)).filter(Boolean).length;
      assert.equal(failed, Math.floor(10 * percent), `${percent}%`);
    }
    const first40 = Array.from({ length: 40 }, (_, i) => failsRequest(i + 1, 5));
    assert.deepEqual(first40.flatMap((f, i) => (f ? [i + 1] : [])), [20, 40]);
  });
});

describe('pod address slices', () => {
  test('parses CIDRs and refuses anything else', () => {
    assert.deepEqual(parseCidr('10.244.64.0/18'), { base: (10 * 2 ** 24) + (244 * 2 ** 16) + (64 * 2 ** 8), prefix: 18 });
    assert.throws(() => parseCidr('10.244.1.0/14'), /host bits set/);
    assert.throws(() => parseCidr('10.244.0.0'), /not an IPv4 CIDR/);
    assert.throws(() => parseCidr('10.300.0.0/16'), /not an IPv4 address/);
    assert.throws(() => parseCidr('10.0.0.0/33'), /not an IPv4 CIDR/);
  });

  test('the pool holds 16 slices of /18, the first of them kwok\'s usual 10.244.0.0/16 quarter', () => {
    const slices = slicesOf(podPool, 18);
    assert.equal(slices.length, 16);
    assert.equal(slices[0], '10.244.0.0/18');
    assert.equal(slices[1], '10.244.64.0/18');
    assert.equal(slices[15], '10.247.192.0/18');
  });

  test('a slice is free unless a route of the host overlaps it; the default route does not count', () => {
    assert.ok(overlaps('10.244.0.0/18', '10.0.0.0/8'));
    assert.ok(overlaps('10.244.64.0/18', '10.244.100.7/32'));
    assert.ok(!overlaps('10.244.0.0/18', '10.244.64.0/18'));
    const free = freeSlices(['default', '192.0.2.0/24', '10.244.0.0/18', '10.244.70.1', '10.245.0.0/16']);
    assert.equal(free[0], '10.244.128.0/18');
    assert.ok(!free.includes('10.245.0.0/18') && !free.includes('10.245.192.0/18'));
    assert.equal(free.length, 16 - 2 - 4);
    assert.deepEqual(freeSlices(['10.0.0.0/8']), []);
  });

  test('pods, the node address and the ClusterIPs all lie inside the slice, apart', () => {
    const layout = sliceLayout('10.244.64.0/18');
    assert.deepEqual(layout, { podCidr: '10.244.64.0/18', nodeIp: '10.244.126.254', serviceCidr: '10.244.127.0/24', podAddresses: 16125 });
    assert.throws(() => sliceLayout('10.244.0.0/24'), /a \/16 to a \/23/);
  });

  test('node capacity keeps kwok from handing out addresses beyond the pods\' part of the slice', () => {
    const layout = sliceLayout('10.244.64.0/18');
    assert.equal(podsPerNode(layout, 2), 5000);
    assert.equal(podsPerNode(layout, 4), 4031);
    assert.ok(podsPerNode(layout, 7) * 7 <= layout.podAddresses);
  });

  test('names of the namespace and veth ends are per state folder and fit an interface name', () => {
    const a = podNetworkNames('/tmp/app-operator-test-abc');
    const b = podNetworkNames('/tmp/app-operator-test-abd');
    assert.notEqual(a.netns, b.netns);
    assert.match(a.netns, /^aop-[0-9a-f]{8}$/);
    assert.ok(a.hostVeth.length <= 15 && a.nsVeth.length <= 15 && a.hostVeth !== a.nsVeth);
    assert.deepEqual(podNetworkNames('/tmp/app-operator-test-abc'), a);
  });

  test('Traefik listens on 127.0.0.1 only and asks the internet nothing', () => {
    const args = traefikArgs('https://127.0.0.1:26443', '/state/traefik/token', '/state/pki/ca.crt', { gateway: 28080, traefikMetrics: 28082, podServer: 28090 });
    const addresses = args.filter((a) => /^--entrypoints\.[^.]+\.address=/.test(a));
    assert.deepEqual(addresses, ['--entrypoints.web.address=127.0.0.1:28080', '--entrypoints.metrics.address=127.0.0.1:28082']);
    // Ping and metrics left on their default entrypoint would open :8080 on every interface.
    assert.ok(args.includes('--ping.entrypoint=metrics') && args.includes('--metrics.prometheus.entrypoint=metrics'));
    assert.ok(args.includes('--global.checknewversion=false') && args.includes('--global.sendanonymoususage=false'));
    assert.ok(!args.some((a) => /nativelbbydefault=true|api\.insecure|experimental/i.test(a)));
    for (const provider of ['kubernetesgateway', 'kubernetescrd']) {
      assert.ok(args.includes(`--providers.${provider}.endpoint=https://127.0.0.1:26443`), provider);
      assert.ok(args.includes(`--providers.${provider}.token=/state/traefik/token`), provider);
    }
  });

  test('a stack keeps the data plane it was created with, or says how to start afresh with one', () => {
    const without = { stateDir: '/s' } as StackInfo;
    assert.throws(() => assertDataPlaneChoice(without, true), /created without the data plane.*down --purge && npm run stack -- up --data-plane/);
    assert.doesNotThrow(() => assertDataPlaneChoice(without, false));
    assert.doesNotThrow(() => assertDataPlaneChoice(without, undefined));
    assert.doesNotThrow(() => assertDataPlaneChoice({ ...without, dataPlane: {} as StackInfo['dataPlane'] }, true));
  });

  test('withFlag replaces a flag\'s value or adds it', () => {
    assert.deepEqual(withFlag(['--a=1', '--cidr=10.244.0.0/16', '--b'], '--cidr', '10.244.64.0/18'), ['--a=1', '--b', '--cidr=10.244.64.0/18']);
    assert.deepEqual(withFlag(['--a=1'], '--node-ip', '10.244.126.254'), ['--a=1', '--node-ip=10.244.126.254']);
  });
});

describe('the Traefik wrapper module', () => {
  test('repeats replace and exclude directives, blocks and single lines, leaving out local paths', () => {
    const goMod = [
      'module github.com/traefik/traefik/v3', '', 'go 1.25.0', '',
      'require (', '\tgithub.com/a/b v1.0.0', ')', '',
      'replace (',
      '\tgithub.com/abbot/go-http-auth => github.com/containous/go-http-auth v0.4.1 // a fork',
      '\tgithub.com/traefik/traefik/v3/pkg/x => ./pkg/x',
      ')',
      'replace github.com/gorilla/mux => github.com/containous/mux v0.0.0-2025',
      'replace github.com/local/thing => ../thing',
      '// a comment',
      'exclude github.com/tencentcloud/tencentcloud-sdk-go v3.0.83+incompatible',
    ].join('\n');
    assert.deepEqual(wrapperDirectives(goMod), [
      'replace github.com/abbot/go-http-auth => github.com/containous/go-http-auth v0.4.1',
      'replace github.com/gorilla/mux => github.com/containous/mux v0.0.0-2025',
      'exclude github.com/tencentcloud/tencentcloud-sdk-go v3.0.83+incompatible',
    ]);
  });
});

describe('the pod server\'s view of a pod', () => {
  const pod = (over: Record<string, unknown> = {}) => ({
    apiVersion: 'v1', kind: 'Pod',
    metadata: { name: 'web-abc', namespace: 'shop', labels: { 'app.kubernetes.io/name': 'web', version: 'v2' } },
    spec: { containers: [{ image: servingImages.errors5, ports: [{ containerPort: 8080 }, { containerPort: 53, protocol: 'UDP' }] }, { image: 'sidecar:1' }] },
    status: { podIP: '10.244.64.7' },
    ...over,
  });

  test('takes address, app, version, and each container\'s image with its TCP ports', () => {
    assert.deepEqual(podEntryOf(pod()), {
      namespace: 'shop', name: 'web-abc', ip: '10.244.64.7', app: 'web', version: 'v2',
      containers: [{ image: servingImages.errors5, ports: [8080] }, { image: 'sidecar:1', ports: [] }],
    });
  });

  test('a pod without an address of its own is not served', () => {
    assert.equal(podEntryOf(pod({ status: {} })), undefined);
    assert.equal(podEntryOf(pod({ spec: { hostNetwork: true, containers: [] } })), undefined);
  });
});

describe('the load generator', () => {
  test('counts answers by version, pod and status, with errors and latency', () => {
    const s = summarize([
      { status: 200, version: 'stable', pod: 'ns/a', ms: 1 },
      { status: 200, version: 'stable', pod: 'ns/a', ms: 2 },
      { status: 503, version: 'v2', pod: 'ns/b', ms: 3 },
      { status: 502, ms: 4 },
      { status: 0, ms: 100, error: 'ECONNREFUSED' },
    ]);
    assert.equal(s.total, 5);
    assert.deepEqual(s.byVersion, { stable: 2, v2: 1, [noPod]: 2 });
    assert.deepEqual(s.byPod, { 'ns/a': 2, 'ns/b': 1 });
    assert.deepEqual(s.byStatus, { 200: 2, 503: 1, 502: 1, 0: 1 });
    assert.equal(s.errorRate, 3 / 5);
    assert.equal(s.p50Ms, 3);
    assert.equal(s.p99Ms, 100);
    assert.equal(shareOf(s, 'v2'), 0.2);
    assert.equal(shareOf(summarize([]), 'v2'), 0);
    assert.match(formatSummary(s), /^\s+5 req {2}stable 40\.0% {2}v2 \(canary\) 20\.0% {2}\(no pod\) 40\.0% {2}errors 60\.0% {2}p50 3 ms {2}p99 100 ms$/);
  });

  test('quantiles by nearest rank', () => {
    const values = Array.from({ length: 100 }, (_, i) => i + 1);
    assert.equal(quantile(values, 0.5), 50);
    assert.equal(quantile(values, 0.99), 99);
    assert.equal(quantile([7], 0.99), 7);
    assert.equal(quantile([], 0.5), 0);
  });

  test('sends only to loopback addresses', () => {
    assert.equal(assertLoopback('http://127.0.0.1:28080').port, '28080');
    assert.throws(() => assertLoopback('http://10.244.64.7:8080'), /only to 127\.0\.0\.0\/8/);
    assert.throws(() => assertLoopback('http://example.com'), /only to 127\.0\.0\.0\/8/);
    assert.throws(() => assertLoopback('https://127.0.0.1'), /only http/);
  });

  test('addresses an app the way its HTTPRoute expects', () => {
    const route = (name: string, spec: Record<string, unknown>, labels?: Record<string, string>) => ({ metadata: { name, ...(labels ? { labels } : {}) }, spec });
    const routes = [
      route('web', {
        hostnames: ['web.example.test'],
        rules: [
          { matches: [{ path: { type: 'PathPrefix', value: '/api' }, headers: [{ name: 'x-canary', value: 'yes' }] }] },
          { matches: [{ path: { type: 'PathPrefix', value: '/shop' } }] },
        ],
      }),
      route('other', { hostnames: ['*.wild.test'] }, { 'app.kubernetes.io/name': 'wild' }),
      route('bare', {}),
    ];
    assert.deepEqual(routeTarget(routes, 'web'), { route: 'web', host: 'web.example.test', path: '/shop' });
    assert.deepEqual(routeTarget(routes, 'wild'), { route: 'other', host: 'traffic.wild.test', path: '/' });
    assert.deepEqual(routeTarget(routes, 'bare'), { route: 'bare', path: '/' });
    assert.throws(() => routeTarget(routes, 'nope'), /no HTTPRoute named nope .*HTTPRoutes here: web, other, bare/);
    assert.throws(() => routeTarget([route('a', {}, { 'app.kubernetes.io/name': 'x' }), route('b', {}, { 'app.kubernetes.io/name': 'x' })], 'x'), /several HTTPRoutes .*\(a, b\)/);
  });
});
