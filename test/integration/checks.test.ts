// A rollout's checks for real: HTTP checks against a server this test runs on 127.0.0.1 (what it is sent, 2xx or
// not, timeouts, retries, a confirm check's wait, the allowlist), Job checks through the stack's API server, Job
// controller and kwok (whose stages end a check's pod by its image), and the CRD refusing checks that cannot work.
import { MockActivityEnvironment } from '@temporalio/testing';
import { ApplicationFailure } from '@temporalio/common';
import assert from 'node:assert/strict';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { after, before, describe, it } from 'node:test';
import { deleteJobCheck, observeJobCheck, runHttpCheck, startJobCheck } from '../../activities/checks.ts';
import { queryMetrics } from '../../activities/metrics.ts';
import type { HttpCheckResult, JobCheckObservation } from '../../activities/types.ts';
import { parseApplication, type Check } from '../../api/application.ts';
import { API_VERSION, CHECK_LABEL, FailureType, KIND } from '../../api/constants.ts';
import { KubeError, type Kube, type KubeObject } from '../../kube/client.ts';
import { eventually } from '../../lib/poll.ts';
import { parseHostAllowlist, type CheckContext } from '../../reconcile/checks.ts';
import { checkJobName } from '../../render/check-job.ts';
import { checkFailMessage, checkImages } from '../../stack/stack.ts';
import { appManifest, kubeApi, testNamespace, type Json } from '../../testkit/apps.ts';

const context: CheckContext = { application: 'shop', namespace: 'prod', version: 'v2', image: 'registry.example.com/shop:v2', phase: 'step', step: 1, weight: 20 };

/** The checks as the operator sees them: parsed from an Application with the CRD's defaults. */
function checksOf(checks: Json[]): Check[] {
  const parsed = parseApplication(appManifest('prod', 'shop', { image: 'registry.example.com/shop:v1', serviceMesh: { canary: { checks } } }));
  if (!parsed.ok) throw new Error(parsed.message);
  return parsed.app.spec.serviceMesh?.canary?.checks ?? [];
}
const httpCheck = (http: Json): Check => checksOf([{ name: 'smoke', http }])[0]!;

/** Runs an activity as a worker would, with a Context (its cancellation signal, heartbeats). */
function activity<A extends unknown[], R>(fn: (...args: A) => Promise<R>, ...args: A): Promise<R> {
  return new MockActivityEnvironment().run(fn, ...args);
}

interface Received { method: string; path: string; headers: IncomingMessage['headers']; body: string }

describe('HTTP checks against a server on 127.0.0.1', () => {
  let server: Server;
  let base: string;
  const received: Received[] = [];
  /** What the server answers, per path: a status and a body, or nothing at all (to time out). */
  const answers = new Map<string, (n: number) => { status: number; body?: string } | 'hang'>();

  before(async () => {
    server = createServer((req: IncomingMessage, res: ServerResponse) => {
      const chunks: Buffer[] = [];
      req.on('data', (c: Buffer) => chunks.push(c));
      req.on('end', () => {
        const path = new URL(req.url ?? '/', 'http://127.0.0.1').pathname;
        received.push({ method: req.method ?? '', path, headers: req.headers, body: Buffer.concat(chunks).toString('utf8') });
        const answer = answers.get(path)?.(received.filter((r) => r.path === path).length) ?? { status: 404, body: 'no such check' };
        if (answer === 'hang') return;
        res.writeHead(answer.status, { 'content-type': 'text/plain' }).end(answer.body ?? '');
      });
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  });
  after(async () => {
    server.closeAllConnections();
    await new Promise((resolve) => server.close(resolve));
  });

  const requestsTo = (path: string) => received.filter((r) => r.path === path);

  it('passes on 2xx, having POSTed the rollout\'s context as JSON with the spec\'s headers', async () => {
    answers.set('/pass', () => ({ status: 200, body: 'all good' }));
    const result = await activity(runHttpCheck, {}, { namespace: 'prod', name: 'shop', check: httpCheck({ url: `${base}/pass`, headers: { 'x-token': 'abc' } }), context });
    assert.deepEqual(result, { verdict: 'pass', status: 200, detail: `HTTP 200 from ${base}/pass: all good`, attempts: 1 });
    const [request] = requestsTo('/pass');
    assert.equal(request?.method, 'POST');
    assert.equal(request.headers['content-type'], 'application/json');
    assert.equal(request.headers['x-token'], 'abc');
    assert.deepEqual(JSON.parse(request.body), { application: 'shop', namespace: 'prod', version: 'v2', image: 'registry.example.com/shop:v2', phase: 'step', check: 'smoke', step: 1, weight: 20 });
  });

  it('GET sends no body', async () => {
    answers.set('/get', () => ({ status: 204 }));
    const result = await activity(runHttpCheck, {}, { namespace: 'prod', name: 'shop', check: httpCheck({ url: `${base}/get`, method: 'GET' }), context });
    assert.equal(result.verdict, 'pass');
    assert.deepEqual(requestsTo('/get').map((r) => [r.method, r.body]), [['GET', '']]);
  });

  it('fails on a 500, quoting the answer, after one attempt when there are no retries', async () => {
    answers.set('/500', () => ({ status: 500, body: 'cart service down' }));
    const result = await activity(runHttpCheck, {}, { namespace: 'prod', name: 'shop', check: httpCheck({ url: `${base}/500` }), context });
    assert.deepEqual(result, { verdict: 'fail', status: 500, detail: `HTTP 500 from ${base}/500: cart service down`, attempts: 1 });
    assert.equal(requestsTo('/500').length, 1);
  });

  it('fails when no answer comes within timeoutSeconds, each retry timed out alike', async () => {
    answers.set('/hang', () => 'hang');
    const started = Date.now();
    const result = await activity(runHttpCheck, {}, { namespace: 'prod', name: 'shop', check: httpCheck({ url: `${base}/hang`, timeoutSeconds: 1, retries: 1 }), context });
    const took = Date.now() - started;
    assert.deepEqual(result, { verdict: 'fail', detail: `timed out after 1 s waiting for ${base}/hang`, attempts: 2 });
    assert.equal(requestsTo('/hang').length, 2);
    assert.ok(took >= 3000 && took < 8000, `two 1 s attempts a second apart took ${took} ms`);
  });

  it('a cancelled check stops waiting for its answer at once', async () => {
    answers.set('/hang-long', () => 'hang');
    const env = new MockActivityEnvironment();
    const started = Date.now();
    const running = env.run(runHttpCheck, {}, { namespace: 'prod', name: 'shop', check: httpCheck({ url: `${base}/hang-long`, timeoutSeconds: 60 }), context });
    setTimeout(() => env.cancel(), 500);
    await assert.rejects(running, (err: unknown) => err instanceof Error && err.name === 'CancelledFailure');
    assert.ok(Date.now() - started < 5000, `cancelled after ${Date.now() - started} ms`);
  });

  it('retries a failed attempt and passes when a later one answers 2xx', async () => {
    answers.set('/flaky', (n) => (n < 3 ? { status: 503, body: 'warming up' } : { status: 200, body: 'ok' }));
    const result = await activity(runHttpCheck, {}, { namespace: 'prod', name: 'shop', check: httpCheck({ url: `${base}/flaky`, retries: 3 }), context });
    assert.deepEqual(result, { verdict: 'pass', status: 200, detail: `HTTP 200 from ${base}/flaky: ok`, attempts: 3 });
    assert.equal(requestsTo('/flaky').length, 3, 'no attempt after the one that passed');
  });

  it('fails when every retry fails: 1 + retries attempts', async () => {
    answers.set('/down', () => ({ status: 502 }));
    const result = await activity(runHttpCheck, {}, { namespace: 'prod', name: 'shop', check: httpCheck({ url: `${base}/down`, retries: 2 }), context });
    assert.deepEqual(result, { verdict: 'fail', status: 502, detail: `HTTP 502 from ${base}/down`, attempts: 3 });
  });

  it('a confirm check is waiting, one request a call, until the URL answers 2xx; then it passes', async () => {
    let approved = false;
    answers.set('/approve', () => (approved ? { status: 200, body: 'approved by alice' } : { status: 409, body: 'not yet approved' }));
    const check = httpCheck({ url: `${base}/approve`, confirm: true, intervalSeconds: 1, retries: 5 });
    const waiting = await activity(runHttpCheck, {}, { namespace: 'prod', name: 'shop', check, context });
    assert.deepEqual(waiting, { verdict: 'waiting', status: 409, detail: `HTTP 409 from ${base}/approve: not yet approved`, attempts: 1 });
    assert.equal(requestsTo('/approve').length, 1, 'a confirm check does not retry within a call: the workflow asks again every intervalSeconds');
    approved = true;
    const passed = await activity(runHttpCheck, {}, { namespace: 'prod', name: 'shop', check, context });
    assert.deepEqual(passed, { verdict: 'pass', status: 200, detail: `HTTP 200 from ${base}/approve: approved by alice`, attempts: 1 });
  });

  it('a host the allowlist does not allow fails the check (CheckNotAllowed) without a request; one it allows is called', async () => {
    answers.set('/allow', () => ({ status: 200 }));
    const check = httpCheck({ url: `${base}/allow?token=secret` });
    const refused: HttpCheckResult = await activity(runHttpCheck, { checkAllowedHosts: parseHostAllowlist('smoke.tests.svc, 10.0.0.0/8, 127.0.0.1:1') }, { namespace: 'prod', name: 'shop', check, context });
    assert.deepEqual(refused, {
      verdict: 'fail', attempts: 0, reason: FailureType.CheckNotAllowed,
      detail: `refused: host ${new URL(base).host} not in --check-allowed-hosts (smoke.tests.svc, 10.0.0.0/8, 127.0.0.1:1): check smoke of prod/shop calls ${base}/allow`,
    });
    assert.equal(requestsTo('/allow').length, 0, 'no request was sent');
    const allowed = await activity(runHttpCheck, { checkAllowedHosts: parseHostAllowlist('127.0.0.0/8') }, { namespace: 'prod', name: 'shop', check, context });
    assert.equal(allowed.verdict, 'pass');
    assert.equal(requestsTo('/allow').length, 1);
  });

  it("an Application's analysis.prometheusAddress off the allowlist is refused (CheckNotAllowed) without a request; the operator's own is not", async () => {
    answers.set('/api/v1/query', () => ({ status: 200, body: JSON.stringify({ status: 'success', data: { resultType: 'vector', result: [{ metric: {}, value: [0, '1'] }] } }) }));
    const input = { namespace: 'prod', name: 'shop', address: base, queries: [{ name: 'up', query: 'up' }] };
    const before = received.length;
    await assert.rejects(queryMetrics({ checkAllowedHosts: parseHostAllowlist('prometheus.monitoring') }, input), (err: unknown) => {
      assert.ok(err instanceof ApplicationFailure);
      assert.equal(err.type, FailureType.CheckNotAllowed);
      assert.equal(err.nonRetryable, true);
      assert.match(err.message, /^refused: host 127\.0\.0\.1:\d+ not in --check-allowed-hosts \(prometheus\.monitoring\): analysis\.prometheusAddress of prod\/shop/);
      return true;
    });
    assert.equal(received.length, before, 'Prometheus was not asked');
    const { address: _own, ...operatorsOwn } = input;
    const answers2 = await queryMetrics({ checkAllowedHosts: parseHostAllowlist('prometheus.monitoring'), prometheusAddress: base }, operatorsOwn);
    assert.deepEqual(answers2.map((a) => a.value), [1]);
  });
});

describe('Job checks on the real API server, Job controller and kwok', () => {
  let api: Kube;
  let ns: { name: string; cleanup: () => Promise<void> };
  let uid: string;
  const jobChecks = [
    { name: 'pass', job: { template: { containers: [{ name: 'smoke', image: checkImages.pass }] }, timeoutSeconds: 120 } },
    { name: 'fail', job: { template: { containers: [{ name: 'smoke', image: checkImages.fail }] }, timeoutSeconds: 120 } },
    { name: 'slow', job: { template: { containers: [{ name: 'smoke', image: checkImages.slow }] }, timeoutSeconds: 3 } },
  ];
  let checks: Check[];
  const check = (name: string) => checks.find((c) => c.name === name)!;

  before(async () => {
    api = await kubeApi();
    ns = await testNamespace('checks');
    const created = await api.create(appManifest(ns.name, 'shop', { image: 'registry.invalid/app:1', serviceMesh: { canary: { checks: jobChecks } } }) as KubeObject);
    uid = created?.metadata.uid ?? assert.fail('the Application was not created');
    const parsed = parseApplication(created);
    assert.ok(parsed.ok, parsed.ok ? '' : parsed.message);
    checks = parsed.app.spec.serviceMesh?.canary?.checks ?? [];
  });
  after(async () => ns?.cleanup());

  const runContext = (): CheckContext => ({ ...context, namespace: ns.name });
  const settled = (jobName: string) => eventually(`Job ${jobName} ends`, async () => {
    const seen: JobCheckObservation = await activity(observeJobCheck, { kube: api }, { namespace: ns.name, jobName });
    if (seen.state === 'running') throw new Error(seen.message);
    return seen;
  }, { timeoutMs: 90_000 });

  it('a passing Job: made once however often it is started, owned by the Application, its pod given the context, then succeeded', async () => {
    const input = { namespace: ns.name, name: 'shop', check: check('pass'), context: runContext() };
    const { jobName } = await activity(startJobCheck, { kube: api }, input);
    assert.deepEqual(await activity(startJobCheck, { kube: api }, input), { jobName }, 'a retried start finds the Job it made');
    const jobs = await api.list<Json>({ apiVersion: 'batch/v1', kind: 'Job', namespace: ns.name }, `${CHECK_LABEL}=pass`);
    assert.deepEqual(jobs.items.map((j) => j.metadata.name), [jobName]);
    const [job] = jobs.items;
    assert.deepEqual(job?.metadata.ownerReferences?.map((o: Json) => [o.kind, o.name, o.uid, o.controller]), [[KIND, 'shop', uid, true]]);
    const outcome = await settled(jobName);
    assert.equal(outcome.state, 'succeeded', outcome.message);
    assert.match(outcome.message, new RegExp(`^Job ${jobName} succeeded`));
    const pods = await api.list<Json>({ apiVersion: 'v1', kind: 'Pod', namespace: ns.name }, `batch.kubernetes.io/job-name=${jobName}`);
    const env = Object.fromEntries((pods.items[0]?.spec.containers[0].env ?? []).map((e: Json) => [e.name, e.value]));
    assert.deepEqual(env, {
      ROLLOUT_APPLICATION: 'shop', ROLLOUT_NAMESPACE: ns.name, ROLLOUT_VERSION: 'v2', ROLLOUT_IMAGE: 'registry.example.com/shop:v2', ROLLOUT_PHASE: 'step',
      ROLLOUT_CHECK: 'pass', ROLLOUT_STEP: '1', ROLLOUT_WEIGHT: '20',
    });
  });

  it("a failing Job: failed, with the Job's reason and the tail of its pod's termination message", async () => {
    const { jobName } = await activity(startJobCheck, { kube: api }, { namespace: ns.name, name: 'shop', check: check('fail'), context: runContext() });
    const outcome = await settled(jobName);
    assert.equal(outcome.state, 'failed', outcome.message);
    const tail = checkFailMessage.split('\n').join(' / ');
    assert.match(outcome.message, new RegExp(`^Job ${jobName} failed: BackoffLimitExceeded: .*; pod ${jobName}-[a-z0-9]+: container smoke: Error \\(exit code 1\\): `));
    assert.ok(outcome.message.endsWith(tail), outcome.message);
  });

  it('a Job that outlasts timeoutSeconds fails (DeadlineExceeded); deleteJobCheck removes it', async () => {
    const { jobName } = await activity(startJobCheck, { kube: api }, { namespace: ns.name, name: 'shop', check: check('slow'), context: { ...runContext(), phase: 'prePromotion', step: undefined } });
    const running = await activity(observeJobCheck, { kube: api }, { namespace: ns.name, jobName });
    assert.equal(running.state, 'running', running.message);
    const outcome = await settled(jobName);
    assert.deepEqual(outcome, { state: 'failed', message: `Job ${jobName} timed out: it ran longer than its 3 s deadline (DeadlineExceeded)` });
    assert.deepEqual(await activity(deleteJobCheck, { kube: api }, { namespace: ns.name, jobName }), { deleted: true });
    await eventually(`Job ${jobName} gone`, async () => {
      if (await api.get({ apiVersion: 'batch/v1', kind: 'Job', namespace: ns.name, name: jobName })) throw new Error('still there');
      return true;
    }, { timeoutMs: 30_000 });
    assert.deepEqual(await activity(observeJobCheck, { kube: api }, { namespace: ns.name, jobName }), { state: 'failed', message: `Job ${jobName} is gone: it was deleted before it finished` });
    assert.deepEqual(await activity(deleteJobCheck, { kube: api }, { namespace: ns.name, jobName }), { deleted: false }, 'deleting again is no error');
  });

  it('two Applications whose app and check names join alike (a + b-smoke, a-b + smoke) each run a Job of their own; a Job not the check\'s is never taken for it', async () => {
    // Found by hand: both made `a-b-smoke-<hash of the run>`, so the second Application's rollout read the first one's Job.
    const made = async (app: string, checkName: string, image: string) => {
      const created = await api.create(appManifest(ns.name, app, { image: 'registry.invalid/app:1', serviceMesh: { canary: { checks: [{ name: checkName, job: { template: { containers: [{ name: 'smoke', image }] }, timeoutSeconds: 120 } }] } } }) as KubeObject);
      const parsed = parseApplication(created);
      assert.ok(parsed.ok, parsed.ok ? '' : parsed.message);
      return { namespace: ns.name, name: app, check: parsed.app.spec.serviceMesh!.canary!.checks![0]!, context: { ...runContext(), application: app } };
    };
    const a = await made('a', 'b-smoke', checkImages.fail);
    const ab = await made('a-b', 'smoke', checkImages.pass);
    const jobA = (await activity(startJobCheck, { kube: api }, a)).jobName;
    const jobAB = (await activity(startJobCheck, { kube: api }, ab)).jobName;
    assert.notEqual(jobA, jobAB);
    assert.match(jobA, /^a-b-smoke-[0-9a-f]{8}$/);
    assert.match(jobAB, /^a-b-smoke-[0-9a-f]{8}$/);
    const [endA, endAB] = await Promise.all([settled(jobA), settled(jobAB)]);
    assert.equal(endA.state, 'failed', endA.message);
    assert.equal(endAB.state, 'succeeded', endAB.message);
    for (const [jobName, owner] of [[jobA, 'a'], [jobAB, 'a-b']] as const) {
      const job = await api.get<Json>({ apiVersion: 'batch/v1', kind: 'Job', namespace: ns.name, name: jobName });
      assert.deepEqual(job?.metadata.ownerReferences?.map((o: Json) => o.name), [owner]);
    }
    // A Job of that name made by someone else (here: the one a-b's check would make at another step, made by hand
    // with no owner) is refused, saying whose it is, and left alone.
    const next = { ...ab, context: { ...ab.context, step: 7 } };
    const taken = await api.create({ apiVersion: 'batch/v1', kind: 'Job', metadata: { name: checkJobName('a-b', 'smoke', next.context), namespace: ns.name }, spec: { template: { spec: { restartPolicy: 'Never', containers: [{ name: 'x', image: checkImages.slow }] } } } });
    await assert.rejects(activity(startJobCheck, { kube: api }, next), new RegExp(`Job ${ns.name}/${taken?.metadata.name} exists and is not the Job of check smoke: it is owned by nothing, not by this Application`));
    assert.ok(await api.get({ apiVersion: 'batch/v1', kind: 'Job', namespace: ns.name, name: taken!.metadata.name }), 'the Job that is not the check\'s is left alone');
  });

  it('a Job check of an Application that is gone fails for good (ApplicationGone)', async () => {
    await assert.rejects(activity(startJobCheck, { kube: api }, { namespace: ns.name, name: 'nobody', check: check('pass'), context: runContext() }), (err: unknown) => {
      assert.ok(err instanceof ApplicationFailure);
      assert.equal(err.type, FailureType.ApplicationGone);
      return true;
    });
  });
});

describe('the CRD refuses checks that cannot work', () => {
  let api: Kube;
  let ns: { name: string; cleanup: () => Promise<void> };
  before(async () => {
    api = await kubeApi();
    ns = await testNamespace('checks-crd');
  });
  after(async () => ns?.cleanup());

  const smoke = { name: 'smoke', http: { url: 'http://smoke.tests.svc/run' } };
  const load = { name: 'load', job: { template: { containers: [{ name: 'load', image: checkImages.pass }] } } };
  /** The API server's message for an Application with this canary, or null when it was accepted (dry run). */
  async function rejection(canary: Json): Promise<string | null> {
    const app = appManifest(ns.name, 'shop', { image: 'registry.invalid/app:1', serviceMesh: { enabled: true, canary: { enabled: true, canaryVersion: 'v2', ...canary } } });
    try {
      await api.request('POST', `/apis/${API_VERSION}/namespaces/${ns.name}/applications`, { body: app, query: { dryRun: 'All', fieldValidation: 'Strict' } });
      return null;
    } catch (err) {
      if (err instanceof KubeError && err.permanent) return err.message;
      throw err;
    }
  }

  it('accepts checks by phase and by step', async () => {
    assert.equal(await rejection({ steps: [{ setWeight: 10 }, { check: 'smoke' }, { check: 'load' }], checks: [{ ...smoke, phase: 'beforeStart' }, load] }), null);
  });
  it('refuses two checks of one name', async () => {
    assert.match(await rejection({ checks: [smoke, { ...load, name: 'smoke' }] }) ?? 'accepted', /spec\.serviceMesh\.canary\.checks\[1\]: Duplicate value/);
  });
  it('refuses a check with both http and job', async () => {
    assert.match(await rejection({ checks: [{ ...smoke, job: load.job }] }) ?? 'accepted', /each check sets exactly one of http or job/);
  });
  it('refuses a check with neither', async () => {
    assert.match(await rejection({ checks: [{ name: 'smoke', phase: 'prePromotion' }] }) ?? 'accepted', /each check sets exactly one of http or job/);
  });
  it('refuses a step that names a check not declared', async () => {
    assert.match(await rejection({ steps: [{ check: 'smoke' }, { check: 'missing' }], checks: [smoke] }) ?? 'accepted', /a step's check must name a check listed in checks/);
    assert.match(await rejection({ steps: [{ check: 'smoke' }] }) ?? 'accepted', /a step's check must name a check listed in checks/, 'no checks at all');
  });
  it('refuses a Job check without containers and an unknown phase', async () => {
    assert.match(await rejection({ checks: [{ name: 'load', job: { template: { containers: [] } } }] }) ?? 'accepted', /job\.template must be a pod spec whose containers lists at least one container/);
    assert.match(await rejection({ checks: [{ ...smoke, phase: 'whenever' }] }) ?? 'accepted', /Unsupported value: "whenever"/);
  });
});
