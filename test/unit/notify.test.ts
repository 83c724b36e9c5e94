// Rollout notifications: which Events are sent as what, the ids receivers deduplicate by, what each format sends,
// the operator's default receiver, and the delivery activity against a receiver on 127.0.0.1 (allowlist, Secret, retries).
import assert from 'node:assert/strict';
import { createServer, type IncomingMessage } from 'node:http';
import type { AddressInfo } from 'node:net';
import { after, before, describe, test } from 'node:test';
import { Command } from 'commander';
import { Reason } from '../../api/constants.ts';
import { parseApplication } from '../../api/application.ts';
import { sendNotification } from '../../activities/notify.ts';
import type { Kube } from '../../kube/client.ts';
import { operatorConfig, withOperatorOptions } from '../../operator/config.ts';
import { createMetrics } from '../../operator/metrics.ts';
import { parseHostAllowlist } from '../../reconcile/checks.ts';
import {
  NOTIFICATION_EVENTS, notificationEvent, notificationId, notificationRequest, notificationText, planNotifications, receiversOf, type NotificationMessage, type PlanNotification,
} from '../../reconcile/notify.ts';

const message: NotificationMessage = {
  id: 'application/shop/checkout/canary/v2@1764645000000/1-started', seq: 1, application: 'checkout', namespace: 'shop', version: 'v2', image: 'checkout:2',
  event: 'started', phase: 'Progressing', message: 'creating canary v2 (checkout:2)', step: 0, weight: 0, at: '2026-12-02T03:00:00.000Z',
};

describe('which Events are notifications', () => {
  test('each kind comes from its Event', () => {
    assert.equal(notificationEvent(Reason.CanaryStarted), 'started');
    assert.equal(notificationEvent(Reason.CanaryStepCompleted), 'step');
    assert.equal(notificationEvent(Reason.CanaryPaused), 'paused');
    assert.equal(notificationEvent(Reason.CheckWaiting), 'paused');
    assert.equal(notificationEvent(Reason.AnalysisInconclusive), 'paused');
    assert.equal(notificationEvent(Reason.CheckFailed), 'checkFailed');
    assert.equal(notificationEvent(Reason.CanaryPromoted), 'promoted');
    assert.equal(notificationEvent(Reason.CanaryAborted), 'aborted');
    assert.equal(notificationEvent(Reason.CanaryRolledBack, Reason.HealthGateFailed), 'rolledBack');
  });

  test('the start of a rollback says why when an analysis or a check caused it; otherwise the end tells', () => {
    assert.equal(notificationEvent(Reason.CanaryRollingBack, Reason.AnalysisFailed), 'analysisFailed');
    assert.equal(notificationEvent(Reason.CanaryRollingBack, Reason.CheckFailed), 'checkFailed');
    assert.equal(notificationEvent(Reason.CanaryRollingBack, Reason.HealthGateFailed), undefined);
    assert.equal(notificationEvent(Reason.CanaryAborting), undefined);
  });

  test('Events nobody subscribes to are not sent', () => {
    for (const r of [Reason.CanaryResumed, Reason.CanaryPromoting, Reason.CheckPassed, Reason.CanaryRepaired, Reason.AnalysisRecovered, Reason.RolloutRecovered]) {
      assert.equal(notificationEvent(r), undefined, r);
    }
  });

  test('every kind the API lists can be sent', () => {
    const reachable = new Set([
      ...Object.values(Reason).map((r) => notificationEvent(r)),
      notificationEvent(Reason.CanaryRollingBack, Reason.AnalysisFailed),
    ]);
    assert.deepEqual(NOTIFICATION_EVENTS.filter((e) => !reachable.has(e)), []);
  });

  test('a receiver gets only the kinds it asked for; all without a list', () => {
    const all: PlanNotification = { name: 'all', url: 'http://127.0.0.1/a', format: 'json' };
    const some: PlanNotification = { name: 'some', url: 'http://127.0.0.1/b', format: 'slack', events: ['promoted', 'rolledBack'] };
    assert.deepEqual(receiversOf([all, some], 'started').map((r) => r.name), ['all']);
    assert.deepEqual(receiversOf([all, some], 'promoted').map((r) => r.name), ['all', 'some']);
    assert.deepEqual(receiversOf(undefined, 'promoted'), []);
  });
});

describe('ids', () => {
  test('the same rollout, count and kind make the same id; any of them changed, another', () => {
    const id = notificationId('application/shop/checkout/canary', 'v2', 1764645000000, 3, 'paused');
    assert.equal(id, 'application/shop/checkout/canary/v2@1764645000000/3-paused');
    assert.equal(notificationId('application/shop/checkout/canary', 'v2', 1764645000000, 3, 'paused'), id);
    assert.notEqual(notificationId('application/shop/checkout/canary', 'v2', 1764645000000, 4, 'paused'), id);
    assert.notEqual(notificationId('application/shop/checkout/canary', 'v3', 1764645000000, 3, 'paused'), id);
    assert.notEqual(notificationId('application/shop/checkout/canary', 'v2', 1764645999999, 3, 'paused'), id, 'a later rollout of the same version');
  });
});

describe('formats', () => {
  test('json: the documented fields, the id also as Idempotency-Key', () => {
    const { body, headers } = notificationRequest('json', message);
    assert.deepEqual(JSON.parse(body), {
      id: message.id, seq: 1, application: 'checkout', namespace: 'shop', version: 'v2', image: 'checkout:2', event: 'started',
      phase: 'Progressing', message: 'creating canary v2 (checkout:2)', step: 0, weight: 0, at: '2026-12-02T03:00:00.000Z',
    });
    assert.equal(headers['idempotency-key'], message.id);
    assert.equal(headers['content-type'], 'application/json');
  });

  test('slack: one line of text', () => {
    const { body, headers } = notificationRequest('slack', { ...message, event: 'rolledBack', message: 'rolled back: health gate failed', weight: 20, step: 1 });
    assert.deepEqual(JSON.parse(body), { text: 'Rollout of shop/checkout v2 (checkout:2) rolled back: rolled back: health gate failed [step 2, 20% on the canary]' });
    assert.equal(headers['idempotency-key'], message.id);
  });

  test('teams: a MessageCard with a summary and the same text', () => {
    const card = JSON.parse(notificationRequest('teams', { ...message, event: 'promoted' }).body) as Record<string, string>;
    assert.equal(card['@type'], 'MessageCard');
    assert.equal(card['summary'], 'checkout v2 promoted');
    assert.equal(card['text'], notificationText({ ...message, event: 'promoted' }));
    assert.equal(card['themeColor'], '2EB886');
  });
});

describe('receivers of a rollout', () => {
  const app = (notifications: unknown[]) => {
    const r = parseApplication({ apiVersion: 'myapp.example.com/v1', kind: 'Application', metadata: { name: 'a', namespace: 'n' }, spec: { image: 'x:1', notifications } });
    assert.ok(r.ok, r.ok ? '' : r.message);
    return r.app;
  };
  const operatorDefault: PlanNotification = { name: 'operator-default', url: 'http://127.0.0.1:9/all', format: 'teams' };

  test('the spec\'s, with format defaulting to json, then the operator\'s default', () => {
    const spec = app([{ name: 'team', url: 'http://127.0.0.1:9/team' }, { name: 'chat', urlFrom: { secretKeyRef: { name: 's', key: 'k' } }, format: 'slack', events: ['promoted'] }]).spec.notifications;
    assert.deepEqual(planNotifications(spec, operatorDefault), [
      { name: 'team', format: 'json', url: 'http://127.0.0.1:9/team' },
      { name: 'chat', format: 'slack', urlFrom: { secretKeyRef: { name: 's', key: 'k' } }, events: ['promoted'] },
      operatorDefault,
    ]);
  });

  test('none without either; the default alone; a spec receiver of the same name wins', () => {
    assert.equal(planNotifications(undefined), undefined);
    assert.deepEqual(planNotifications([], operatorDefault), [operatorDefault]);
    const own = app([{ name: 'operator-default', url: 'http://127.0.0.1:9/mine' }]).spec.notifications;
    assert.deepEqual(planNotifications(own, operatorDefault)?.map((n) => n.url), ['http://127.0.0.1:9/mine']);
  });

  test('--notify-url and --notify-format make the operator\'s default; a bad URL or format fails at start', () => {
    const parse = (args: string[]) => operatorConfig(withOperatorOptions(new Command()).exitOverride().configureOutput({ writeErr: () => {} }).parse(args, { from: 'user' }).opts());
    assert.deepEqual(parse(['--notify-url', 'http://127.0.0.1:9/hook', '--notify-format', 'slack']).notifyDefault, { name: 'operator-default', url: 'http://127.0.0.1:9/hook', format: 'slack' });
    assert.equal(parse([]).notifyDefault, undefined);
    assert.throws(() => parse(['--notify-url', 'hooks.example.com']), /--notify-url must be an http or https URL/);
    assert.throws(() => parse(['--notify-url', 'http://127.0.0.1:9/hook', '--notify-format', 'email']));
  });
});

describe('sendNotification against a receiver on 127.0.0.1', () => {
  const received: { headers: IncomingMessage['headers']; body: string; path: string }[] = [];
  let answer = 200;
  const server = createServer((req, res) => {
    let body = '';
    req.on('data', (c: Buffer) => { body += c.toString(); });
    req.on('end', () => {
      received.push({ headers: req.headers, body, path: req.url ?? '' });
      res.writeHead(answer).end();
    });
  });
  let base = '';
  before(async () => {
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  });
  after(() => new Promise<void>((resolve) => server.close(() => resolve())));

  const secrets: Record<string, Record<string, string>> = { hooks: { url: '' } };
  const kube = { get: (ref: { name: string }) => Promise.resolve(secrets[ref.name] ? { data: secrets[ref.name] } : null) } as unknown as Kube;
  const outcomes = (m: ReturnType<typeof createMetrics>) => m.registry.getSingleMetricAsString('application_operator_notifications_total');

  test('sends the JSON with its Idempotency-Key and counts it', async () => {
    received.length = 0;
    answer = 200;
    const metrics = createMetrics();
    const r = await sendNotification({ kube, metrics }, { namespace: 'shop', message, receiver: { name: 'team', url: `${base}/hook`, format: 'json' } });
    assert.equal(r.outcome, 'sent');
    assert.equal(received.length, 1);
    assert.equal(received[0]!.headers['idempotency-key'], message.id);
    assert.equal((JSON.parse(received[0]!.body) as { id: string }).id, message.id);
    assert.match(await outcomes(metrics), /application_operator_notifications_total\{outcome="sent"\} 1/);
  });

  test('reads a Secret\'s URL at send time; a missing key throws (to be retried)', async () => {
    received.length = 0;
    answer = 204;
    const receiver: PlanNotification = { name: 'chat', urlFrom: { secretKeyRef: { name: 'hooks', key: 'url' } }, format: 'slack' };
    secrets['hooks'] = { url: Buffer.from(`${base}/from-secret\n`).toString('base64') };
    assert.equal((await sendNotification({ kube }, { namespace: 'shop', message, receiver })).outcome, 'sent');
    assert.equal(received[0]?.path, '/from-secret');
    const metrics = createMetrics();
    await assert.rejects(sendNotification({ kube, metrics }, { namespace: 'shop', message, receiver: { ...receiver, urlFrom: { secretKeyRef: { name: 'hooks', key: 'nope' } } } }), /Secret shop\/hooks has no key nope/);
    await assert.rejects(sendNotification({ kube }, { namespace: 'shop', message, receiver: { ...receiver, urlFrom: { secretKeyRef: { name: 'gone', key: 'url' } } } }), /Secret shop\/gone not found/);
    assert.match(await outcomes(metrics), /outcome="error"\} 1/);
  });

  test('a host --check-allowed-hosts does not allow is refused: nothing sent, counted, not retried', async () => {
    received.length = 0;
    const metrics = createMetrics();
    const r = await sendNotification({ kube, metrics, checkAllowedHosts: parseHostAllowlist('hooks.example.com') }, { namespace: 'shop', message, receiver: { name: 'team', url: `${base}/hook`, format: 'json' } });
    assert.equal(r.outcome, 'refused');
    assert.match(r.detail, /not in --check-allowed-hosts/);
    assert.equal(received.length, 0);
    assert.match(await outcomes(metrics), /outcome="refused"\} 1/);
    assert.equal((await sendNotification({ kube, checkAllowedHosts: parseHostAllowlist('127.0.0.0/8') }, { namespace: 'shop', message, receiver: { name: 'team', url: `${base}/hook`, format: 'json' } })).outcome, 'sent');
  });

  test('a 5xx or 429 is retried (throws); another 4xx or a redirect is final (NotificationRejected)', async () => {
    const metrics = createMetrics();
    const send = () => sendNotification({ kube, metrics }, { namespace: 'shop', message, receiver: { name: 'team', url: `${base}/hook`, format: 'json' } });
    answer = 503;
    await assert.rejects(send(), (err: Error) => err.name === 'Error' && /HTTP 503/.test(err.message));
    answer = 429;
    await assert.rejects(send(), (err: Error) => err.name === 'Error' && /HTTP 429/.test(err.message));
    answer = 400;
    await assert.rejects(send(), (err: Error & { type?: string; nonRetryable?: boolean }) => err.type === 'NotificationRejected' && err.nonRetryable === true);
    answer = 302;
    await assert.rejects(send(), (err: Error & { type?: string }) => err.type === 'NotificationRejected' && /HTTP 302/.test(err.message));
    const text = await outcomes(metrics);
    assert.match(text, /outcome="failed"\} 2/);
    assert.match(text, /outcome="rejected"\} 2/);
  });

  test('a receiver that is not there: no answer, retried', async () => {
    const closed = createServer();
    await new Promise<void>((resolve) => closed.listen(0, '127.0.0.1', resolve));
    const port = (closed.address() as AddressInfo).port;
    await new Promise<void>((resolve) => closed.close(() => resolve()));
    await assert.rejects(sendNotification({ kube }, { namespace: 'shop', message, receiver: { name: 'team', url: `http://127.0.0.1:${port}/hook`, format: 'json' } }), /got no answer/);
  });
});
