import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import type { JobCheck } from '../../api/application.ts';
import { checkJobName, foreignCheckJob, renderCheckJob } from '../../render/check-job.ts';
import {
  checkEnv, checkNamed, checkPayload, checksAt, httpCheckMaxMs, describeUrl, formatMs, hostRefusal, httpAnswer, httpCheckRequest, httpNoAnswer, jobCheckOutcome, messageTail, parseHostAllowlist,
  type CheckContext, type ObservedCheckPod, type ObservedJob,
} from '../../reconcile/checks.ts';
import { clusterApp, UID } from '../fixtures/applications.ts';

const context: CheckContext = { application: 'shop', namespace: 'prod', version: 'v2', image: 'registry.example.com/shop:v2', phase: 'step', step: 3, weight: 20 };

describe('the allowlist of hosts (--check-allowed-hosts)', () => {
  test('parses host names, IP addresses and *.suffix globs, each with an optional port, lowercased and trimmed', () => {
    assert.deepEqual(parseHostAllowlist(' Smoke.Tests.svc:8080, *.example.com,127.0.0.1 ,[::1]:9090,,'), [
      { host: 'smoke.tests.svc', wildcard: false, port: 8080 },
      { host: 'example.com', wildcard: true },
      { host: '127.0.0.1', wildcard: false },
      { host: '[::1]', wildcard: false, port: 9090 },
    ]);
    assert.deepEqual(parseHostAllowlist('127.0.0.0/8, ::1/128'), [{ host: '127.0.0.0', wildcard: false, prefix: 8 }, { host: '::1', wildcard: false, prefix: 128 }]);
    assert.deepEqual(parseHostAllowlist(''), []);
  });

  for (const entry of ['*', 'http://smoke.svc', 'smoke.svc/run', '127.0.0.0/33', '127.0.0.0/8:80', 'smoke.svc/8', '::1/129', '127.0.0/8', 'smoke.svc:0', 'smoke.svc:70000', '*.', 'a..b', '-a.svc', '*.[::1]', 'smoke.svc:80:80', 'smo ke']) {
    test(`refuses ${JSON.stringify(entry)}, naming it`, () => {
      assert.throws(() => parseHostAllowlist(`ok.svc,${entry}`), { message: `--check-allowed-hosts: ${JSON.stringify(entry)} is not a host name, an IP address, *.suffix or a CIDR range, with an optional :port` });
    });
  }

  const cases: { allow: string; url: string; allowed: boolean }[] = [
    { allow: '', url: 'http://anything.internal:1/x', allowed: true },
    { allow: 'smoke.svc', url: 'http://smoke.svc/run', allowed: true },
    { allow: 'smoke.svc', url: 'https://SMOKE.svc:9443/run', allowed: true },
    { allow: 'smoke.svc', url: 'http://smoke.svc./run', allowed: true },
    { allow: 'smoke.svc', url: 'http://evil.svc/run', allowed: false },
    { allow: 'smoke.svc', url: 'http://smoke.svc.evil.com/run', allowed: false },
    { allow: 'smoke.svc', url: 'http://a.smoke.svc/run', allowed: false },
    { allow: '*.example.com', url: 'http://a.example.com/', allowed: true },
    { allow: '*.example.com', url: 'http://a.b.example.com/', allowed: true },
    { allow: '*.example.com', url: 'http://example.com/', allowed: false },
    { allow: '*.example.com', url: 'http://evilexample.com/', allowed: false },
    { allow: 'smoke.svc:8080', url: 'http://smoke.svc:8080/', allowed: true },
    { allow: 'smoke.svc:8080', url: 'http://smoke.svc/', allowed: false },
    { allow: 'smoke.svc:443', url: 'https://smoke.svc/', allowed: true },
    { allow: 'smoke.svc:443', url: 'http://smoke.svc/', allowed: false },
    { allow: '*.svc:80', url: 'http://a.svc/', allowed: true },
    { allow: '127.0.0.1', url: 'http://127.0.0.1:39000/', allowed: true },
    { allow: '127.0.0.1', url: 'http://127.0.0.2/', allowed: false },
    { allow: '[::1]:8080', url: 'http://[::1]:8080/', allowed: true },
    { allow: 'smoke.svc', url: 'http://user:secret@evil.svc/', allowed: false },
    { allow: '127.0.0.0/8', url: 'http://127.0.0.1:39000/', allowed: true },
    { allow: '127.0.0.0/8', url: 'http://127.255.1.2/', allowed: true },
    { allow: '127.0.0.0/8', url: 'http://128.0.0.1/', allowed: false },
    { allow: '127.0.0.0/8', url: 'http://localhost/', allowed: false },
    { allow: '127.0.0.0/8', url: 'http://[::1]/', allowed: false },
    { allow: '::1/128', url: 'http://[::1]:8080/', allowed: true },
    { allow: '10.1.0.0/16', url: 'http://10.1.200.3/', allowed: true },
    { allow: '10.1.0.0/16', url: 'http://10.2.0.1/', allowed: false },
  ];
  for (const c of cases) {
    test(`${c.allow || '(empty)'} ${c.allowed ? 'allows' : 'refuses'} ${c.url}`, () => {
      assert.equal(hostRefusal(parseHostAllowlist(c.allow), c.url, 'asked') === null, c.allowed);
    });
  }

  test('a refusal names the host, the allowlist and who asked', () => {
    assert.equal(hostRefusal(parseHostAllowlist('smoke.svc, *.example.com:8443'), 'http://evil.svc:8080/run?token=x', 'check smoke calls it'),
      'refused: host evil.svc:8080 not in --check-allowed-hosts (smoke.svc, *.example.com:8443): check smoke calls it');
  });

  test('what is no URL is refused when there is an allowlist, and left to fail by itself when there is none', () => {
    assert.match(hostRefusal(parseHostAllowlist('smoke.svc'), 'http://[nope', 'asked') ?? '', /^refused: "http:\/\/\[nope" is no URL/);
    assert.equal(hostRefusal([], 'http://[nope', 'asked'), null);
  });
});

describe('which checks run where', () => {
  const http = { url: 'http://smoke.svc/', method: 'POST' as const, timeoutSeconds: 10, retries: 0, confirm: false, intervalSeconds: 10 };
  const checks = [
    { name: 'a', phase: 'prePromotion' as const, http }, { name: 'b', http }, { name: 'c', phase: 'prePromotion' as const, http }, { name: 'd', phase: 'onRollback' as const, http },
  ];

  test('by phase, in the spec\'s order; a check without a phase runs only where a step names it', () => {
    assert.deepEqual(checksAt(checks, 'prePromotion').map((c) => c.name), ['a', 'c']);
    assert.deepEqual(checksAt(checks, 'beforeStart'), []);
    assert.deepEqual(checksAt(undefined, 'onRollback'), []);
    assert.equal(checkNamed(checks, 'b')?.name, 'b');
    assert.equal(checkNamed(checks, 'z'), undefined);
  });

  test('the longest an HTTP check call takes: every attempt timed out, and the pauses between them', () => {
    assert.equal(httpCheckMaxMs({ timeoutSeconds: 10, retries: 0, confirm: false }), 10_000);
    assert.equal(httpCheckMaxMs({ timeoutSeconds: 10, retries: 2, confirm: false }), 32_000);
    assert.equal(httpCheckMaxMs({ timeoutSeconds: 5, retries: 9, confirm: true }), 5_000, 'a confirm check asks once a call');
  });
});

describe('an HTTP check', () => {
  test('POST sends the context as JSON with the check\'s name, the spec\'s headers over the defaults', () => {
    const request = httpCheckRequest('smoke', { method: 'POST', headers: { 'x-token': 'abc', 'content-type': 'application/vnd.smoke+json' } }, context);
    assert.equal(request.method, 'POST');
    assert.deepEqual(request.headers, { 'user-agent': 'application-operator', 'content-type': 'application/vnd.smoke+json', 'x-token': 'abc' });
    assert.equal(request.body, '{"application":"shop","namespace":"prod","version":"v2","image":"registry.example.com/shop:v2","phase":"step","check":"smoke","step":3,"weight":20}');
  });

  test('GET sends no body', () => {
    assert.deepEqual(httpCheckRequest('ready', { method: 'GET' }, context), { method: 'GET', headers: { 'user-agent': 'application-operator' } });
  });

  test('a step and a weight the context does not have are null: the fields are always the same', () => {
    const { step: _step, weight: _weight, ...before } = context;
    assert.deepEqual(checkPayload('smoke', { ...before, phase: 'beforeStart' }), {
      application: 'shop', namespace: 'prod', version: 'v2', image: 'registry.example.com/shop:v2', phase: 'beforeStart', check: 'smoke', step: null, weight: null,
    });
  });

  const answers: { name: string; status: number; body: string; location?: string; ok: boolean; message: string }[] = [
    { name: '2xx passes', status: 204, body: '', ok: true, message: 'HTTP 204 from http://smoke.svc/run' },
    { name: '2xx quotes what it said', status: 200, body: 'approved by alice\n', ok: true, message: 'HTTP 200 from http://smoke.svc/run: approved by alice' },
    { name: 'a 5xx fails with its body on one line', status: 503, body: 'down\n  for\tmaintenance', ok: false, message: 'HTTP 503 from http://smoke.svc/run: down for maintenance' },
    { name: 'a 4xx fails', status: 404, body: '', ok: false, message: 'HTTP 404 from http://smoke.svc/run' },
    { name: 'a long body is cut at 200 characters', status: 500, body: 'x'.repeat(300), ok: false, message: `HTTP 500 from http://smoke.svc/run: ${'x'.repeat(200)}…` },
    { name: 'a redirect fails: none is followed', status: 302, body: 'moved', location: 'http://elsewhere.svc/run?sig=1', ok: false, message: 'HTTP 302 from http://smoke.svc/run: redirects are not followed (to http://elsewhere.svc/run)' },
  ];
  for (const a of answers) {
    test(a.name, () => assert.deepEqual(httpAnswer('http://smoke.svc/run', a.status, a.body, a.location), { ok: a.ok, message: a.message }));
  }

  test('messages never show credentials or a query', () => {
    assert.equal(describeUrl('https://user:secret@smoke.svc:8443/run?token=t#x'), 'https://smoke.svc:8443/run');
    assert.equal(httpAnswer('http://u:p@smoke.svc/run?token=t', 500, '').message, 'HTTP 500 from http://smoke.svc/run');
  });

  test('no answer: a timeout says how long it waited, anything else why the host could not be reached', () => {
    assert.equal(httpNoAnswer('http://smoke.svc/run', 10_000, new DOMException('The operation was aborted due to timeout', 'TimeoutError')), 'timed out after 10 s waiting for http://smoke.svc/run');
    const refused = new TypeError('fetch failed', { cause: Object.assign(new Error('connect ECONNREFUSED 127.0.0.1:1'), { code: 'ECONNREFUSED' }) });
    assert.equal(httpNoAnswer('http://smoke.svc/run', 10_000, refused), 'could not reach http://smoke.svc/run: ECONNREFUSED');
  });

  test('durations in messages', () => {
    assert.deepEqual([formatMs(250), formatMs(1000), formatMs(1500), formatMs(10_000)], ['250 ms', '1 s', '1.5 s', '10 s']);
  });
});

describe('a Job check', () => {
  const job: JobCheck = {
    timeoutSeconds: 90,
    template: {
      serviceAccountName: 'smoke',
      containers: [
        { name: 'smoke', image: 'registry.example.com/smoke:1', env: [{ name: 'TARGET', value: 'http://shop' }, { name: 'ROLLOUT_APPLICATION', value: 'stale' }] },
        { name: 'sidecar', image: 'registry.example.com/proxy:1', terminationMessagePolicy: 'File' },
      ],
    },
  };
  const app = clusterApp({}, 'shop', 'prod');

  test('gets the context as ROLLOUT_* variables', () => {
    assert.deepEqual(checkEnv('smoke', context), [
      { name: 'ROLLOUT_APPLICATION', value: 'shop' }, { name: 'ROLLOUT_NAMESPACE', value: 'prod' }, { name: 'ROLLOUT_VERSION', value: 'v2' },
      { name: 'ROLLOUT_IMAGE', value: 'registry.example.com/shop:v2' }, { name: 'ROLLOUT_PHASE', value: 'step' }, { name: 'ROLLOUT_CHECK', value: 'smoke' },
      { name: 'ROLLOUT_STEP', value: '3' }, { name: 'ROLLOUT_WEIGHT', value: '20' },
    ]);
    assert.deepEqual(checkEnv('smoke', { ...context, phase: 'beforeStart', step: undefined, weight: undefined }).map((e) => e.name),
      ['ROLLOUT_APPLICATION', 'ROLLOUT_NAMESPACE', 'ROLLOUT_VERSION', 'ROLLOUT_IMAGE', 'ROLLOUT_PHASE', 'ROLLOUT_CHECK'], 'no variable for what is not there');
  });

  test('is named after the app, the check and a hash of the version and where it runs: the same run the same name, another another', () => {
    const name = checkJobName('shop', 'smoke', context);
    assert.match(name, /^shop-smoke-[0-9a-f]{8}$/);
    assert.equal(checkJobName('shop', 'smoke', { ...context }), name);
    const others = [
      checkJobName('shop', 'smoke', { ...context, version: 'v3' }),
      checkJobName('shop', 'smoke', { ...context, step: 4 }),
      checkJobName('shop', 'smoke', { ...context, phase: 'prePromotion', step: undefined }),
    ];
    assert.equal(new Set([name, ...others]).size, 4, others.join(' '));
  });

  test('two Applications whose app and check names join alike, or two long checks cut alike, get Jobs of their own', () => {
    // App `a` with check `b-smoke` and app `a-b` with check `smoke` both read `a-b-smoke-`: the hash tells them apart.
    const one = checkJobName('a', 'b-smoke', context);
    const other = checkJobName('a-b', 'smoke', context);
    assert.match(one, /^a-b-smoke-[0-9a-f]{8}$/);
    assert.match(other, /^a-b-smoke-[0-9a-f]{8}$/);
    assert.notEqual(one, other);
    const app56 = `a${'b'.repeat(54)}c`;
    assert.notEqual(checkJobName(app56, `${'x'.repeat(30)}-one`, context), checkJobName(app56, `${'x'.repeat(30)}-two`, context), 'checks cut to the same 20 characters');
  });

  test('a Job found under a check Job\'s name is taken for it only when it is that check\'s, of this Application, at this run', () => {
    const made = renderCheckJob(app, { name: 'smoke', job }, context);
    const same = { metadata: { labels: { ...made.metadata.labels }, annotations: { ...made.metadata.annotations }, ownerReferences: made.metadata.ownerReferences } };
    assert.equal(foreignCheckJob(made, same), undefined);
    assert.match(foreignCheckJob(made, { ...same, metadata: { ...same.metadata, ownerReferences: [{ kind: 'Application', name: 'a', uid: 'other' }] } }) ?? '', /owned by Application a \(uid other\), not by this Application/);
    assert.match(foreignCheckJob(made, { metadata: { ...same.metadata, ownerReferences: [] , deletionTimestamp: '2026-12-07T00:00:00Z' } }) ?? '', /owned by nothing.*being deleted/);
    assert.match(foreignCheckJob(made, { metadata: { ...same.metadata, labels: { ...same.metadata.labels, 'myapp.example.com/check': 'b-smoke' } } }) ?? '', /runs check b-smoke at v2\/step\/3, not smoke/);
    assert.match(foreignCheckJob(made, { metadata: { ...same.metadata, annotations: { 'myapp.example.com/check-key': 'v1/step/3' } } }) ?? '', /at v1\/step\/3, not smoke at v2\/step\/3/);
  });

  test('a long app and check name are cut to 63 characters, the check keeping at least 20, never leaving a dash at a cut', () => {
    const app56 = `a${'b'.repeat(54)}c`;
    const longest = checkJobName(app56, 'x'.repeat(63), context);
    assert.equal(longest.length, 63);
    assert.match(longest, /^ab{32}-x{20}-[0-9a-f]{8}$/);
    assert.match(checkJobName(app56, 'smoke', context), /^ab{47}-smoke-[0-9a-f]{8}$/);
    assert.match(checkJobName('shop', 'x'.repeat(63), context), /^shop-x{49}-[0-9a-f]{8}$/);
    assert.match(checkJobName(`${'a'.repeat(47)}-${'b'.repeat(8)}`, 'smoke', context), /^a{47}-smoke-[0-9a-f]{8}$/, 'the cut falls after a dash, which goes');
  });

  test('its Job: named, labelled, owned by the Application, with the check\'s defaults and the context in every container', () => {
    const rendered = renderCheckJob(app, { name: 'smoke', job }, context);
    assert.deepEqual(rendered.metadata, {
      name: checkJobName('shop', 'smoke', context),
      namespace: 'prod',
      labels: { 'app.kubernetes.io/name': 'shop', 'app.kubernetes.io/managed-by': 'application-operator', 'myapp.example.com/check': 'smoke' },
      annotations: { 'myapp.example.com/check-key': 'v2/step/3' },
      ownerReferences: [{ apiVersion: 'myapp.example.com/v1', kind: 'Application', name: 'shop', uid: UID, controller: true, blockOwnerDeletion: true }],
    });
    const spec = rendered.spec as { backoffLimit: number; activeDeadlineSeconds: number; template: { metadata: unknown; spec: { restartPolicy: string; serviceAccountName: string; containers: { name: string; terminationMessagePolicy: string; env: { name: string; value: string }[] }[] } } };
    assert.equal(spec.backoffLimit, 0);
    assert.equal(spec.activeDeadlineSeconds, 90, 'the timeout is the Job\'s deadline');
    assert.deepEqual(spec.template.metadata, { labels: { 'app.kubernetes.io/managed-by': 'application-operator', 'myapp.example.com/check': 'smoke' } },
      'the pods get no app name label: the app\'s Service selects by it and would send them requests');
    assert.equal(spec.template.spec.restartPolicy, 'Never');
    assert.equal(spec.template.spec.serviceAccountName, 'smoke', 'the rest of the pod spec is kept');
    const [smoke, sidecar] = spec.template.spec.containers;
    assert.equal(smoke?.terminationMessagePolicy, 'FallbackToLogsOnError');
    assert.equal(sidecar?.terminationMessagePolicy, 'File', 'the template\'s own policy is kept');
    assert.deepEqual(smoke?.env, [{ name: 'TARGET', value: 'http://shop' }, ...checkEnv('smoke', context)], 'its own variables kept, a stale ROLLOUT_* replaced');
    assert.deepEqual(sidecar?.env, checkEnv('smoke', context));
    assert.equal((job.template['containers'] as { env?: unknown[] }[])[1]?.env, undefined, 'the spec is not changed');
  });

  test('a template\'s own restartPolicy is kept', () => {
    const restart = renderCheckJob(app, { name: 'smoke', job: { ...job, template: { restartPolicy: 'OnFailure', containers: [{ name: 'c', image: 'i' }] } } }, context).spec;
    assert.equal((restart['template'] as { spec: { restartPolicy: string } }).spec.restartPolicy, 'OnFailure');
  });

  const at = (s: number) => new Date(Date.UTC(2026, 0, 1, 12, 0, s)).toISOString();
  const jobWith = (status: ObservedJob['status'], deadline = 180): ObservedJob => ({ metadata: { name: 'shop-smoke-1a2b3c4d' }, spec: { activeDeadlineSeconds: deadline }, status });
  const failedPod = (name: string, created: number, message?: string): ObservedCheckPod => ({
    metadata: { name, creationTimestamp: at(created) },
    status: { phase: 'Failed', containerStatuses: [{ name: 'smoke', state: { terminated: { exitCode: 1, reason: 'Error', ...(message ? { message } : {}) } } }] },
  });
  const outcomes: { name: string; job: ObservedJob | null; pods?: ObservedCheckPod[]; state: string; message: string }[] = [
    { name: 'gone', job: null, state: 'failed', message: 'Job shop-smoke-1a2b3c4d is gone: it was deleted before it finished' },
    {
      name: 'succeeded, and how long it took', state: 'succeeded', message: 'Job shop-smoke-1a2b3c4d succeeded in 4 s',
      job: jobWith({ startTime: at(0), completionTime: at(4), conditions: [{ type: 'SuccessCriteriaMet', status: 'True' }, { type: 'Complete', status: 'True' }] }),
    },
    {
      name: 'failed: the Job\'s reason and the newest failed pod\'s container with its message\'s tail', state: 'failed',
      job: jobWith({ conditions: [{ type: 'Failed', status: 'True', reason: 'BackoffLimitExceeded', message: 'Job has reached the specified backoff limit' }] }),
      pods: [failedPod('shop-smoke-1a2b3c4d-old', 1, 'first try'), failedPod('shop-smoke-1a2b3c4d-new', 9, 'GET /health: 200\nPOST /cart: 500\n\nsmoke test failed\n')],
      message: 'Job shop-smoke-1a2b3c4d failed: BackoffLimitExceeded: Job has reached the specified backoff limit; pod shop-smoke-1a2b3c4d-new: container smoke: Error (exit code 1): GET /health: 200 / POST /cart: 500 / smoke test failed',
    },
    {
      name: 'failing (FailureTarget, its pods still stopping) is failed', state: 'failed',
      job: jobWith({ conditions: [{ type: 'FailureTarget', status: 'True', reason: 'BackoffLimitExceeded', message: 'Job has reached the specified backoff limit' }] }),
      message: 'Job shop-smoke-1a2b3c4d failed: BackoffLimitExceeded: Job has reached the specified backoff limit',
    },
    {
      name: 'timed out: the deadline is its timeout', state: 'failed',
      job: jobWith({ conditions: [{ type: 'Failed', status: 'True', reason: 'DeadlineExceeded', message: 'Job was active longer than specified deadline' }] }, 3),
      message: 'Job shop-smoke-1a2b3c4d timed out: it ran longer than its 3 s deadline (DeadlineExceeded)',
    },
    {
      name: 'running, its pod unable to start', state: 'running', job: jobWith({ active: 1 }),
      pods: [{ metadata: { name: 'p' }, status: { phase: 'Pending', containerStatuses: [{ name: 'smoke', state: { waiting: { reason: 'ImagePullBackOff', message: 'Back-off pulling image "x"' } } }] } }],
      message: 'Job shop-smoke-1a2b3c4d running: pod p: container smoke: ImagePullBackOff: Back-off pulling image "x"',
    },
    {
      name: 'running, its pod unschedulable', state: 'running', job: jobWith({ active: 1 }),
      pods: [{ metadata: { name: 'p' }, status: { phase: 'Pending', conditions: [{ type: 'PodScheduled', status: 'False', reason: 'Unschedulable', message: '0/2 nodes are available' }] } }],
      message: 'Job shop-smoke-1a2b3c4d running: pod p: Unschedulable: 0/2 nodes are available',
    },
    { name: 'running, a pod starting', state: 'running', job: jobWith({ active: 1 }), pods: [{ metadata: { name: 'p' }, status: { phase: 'Pending', containerStatuses: [{ name: 'smoke', state: { waiting: { reason: 'ContainerCreating' } } }] } }], message: 'Job shop-smoke-1a2b3c4d running: 1 pod active' },
    { name: 'running, no pod yet', state: 'running', job: jobWith({}), message: 'Job shop-smoke-1a2b3c4d running: waiting for its pod' },
    { name: 'running after a failed try (backoffLimit > 0)', state: 'running', job: jobWith({ active: 1 }), pods: [failedPod('q', 1)], message: 'Job shop-smoke-1a2b3c4d running: pod q: container smoke: Error (exit code 1)' },
  ];
  for (const o of outcomes) {
    test(o.name, () => assert.deepEqual(jobCheckOutcome('shop-smoke-1a2b3c4d', o.job, o.pods ?? []), { state: o.state, message: o.message }));
  }

  test('a long termination message is quoted by its end', () => {
    const tail = messageTail(`${'noise '.repeat(100)}\nthe real failure`);
    assert.equal(tail.length, 241);
    assert.ok(tail.startsWith('…') && tail.endsWith('noise / the real failure'), tail);
  });
});
