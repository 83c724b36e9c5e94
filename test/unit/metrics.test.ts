// The metrics the dashboard and the alerts need beyond counters: the watcher's state and the rollouts still running,
// read from the watcher's cache at scrape time. Table-driven over Applications as the API server returns them.
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { applicationsByPhase, createMetrics, failedApplications, runningRollouts, type WatcherView } from '../../operator/metrics.ts';
import { metricsView } from '../../watcher/watcher.ts';

const T0 = '2026-01-01T00:00:00Z';
const T1 = '2026-01-01T00:05:00Z';

/** An Application with a canary in its spec and, when given, status.canary. */
function app(name: string, canary: Record<string, unknown> | undefined, spec: Record<string, unknown> = {}) {
  return {
    apiVersion: 'myapp.example.com/v1', kind: 'Application',
    metadata: { name, namespace: 'prod', uid: `uid-${name}`, generation: 1 },
    spec: { image: 'nginx:1.25', serviceMesh: { enabled: true, canary: { enabled: true, canaryVersion: 'v2', ...spec } } },
    ...(canary ? { status: { canary } } : {}),
  };
}

describe('runningRollouts', () => {
  const cases: { what: string; apps: unknown[]; expected: ReturnType<typeof runningRollouts> }[] = [
    { what: 'no status yet', apps: [app('a', undefined)], expected: [] },
    ...['Promoted', 'Aborted', 'RolledBack', 'Failed'].map((phase) => ({
      what: `an outcome (${phase})`, apps: [app('a', { phase, version: 'v2', startedAt: T0 })], expected: [],
    })),
    {
      what: 'a progressing rollout, with the default progressDeadline (30m)',
      apps: [app('a', { phase: 'Progressing', version: 'v2', startedAt: T0, weight: 10 })],
      expected: [{ labels: { namespace: 'prod', name: 'a', version: 'v2' }, phase: 'Progressing', startedAt: Date.parse(T0) / 1000, progressDeadlineSeconds: 1800 }],
    },
    {
      what: 'a timed pause: its end too, and the spec\'s own deadline',
      apps: [app('a', { phase: 'Paused', version: 'v2', startedAt: T0, pauseEndsAt: T1 }, { progressDeadline: '90s' })],
      expected: [{
        labels: { namespace: 'prod', name: 'a', version: 'v2' }, phase: 'Paused', startedAt: Date.parse(T0) / 1000,
        progressDeadlineSeconds: 90, pauseEndsAt: Date.parse(T1) / 1000,
      }],
    },
    {
      what: 'a pause end left over from a phase that is not Paused is not a pause',
      apps: [app('a', { phase: 'Aborting', version: 'v2', startedAt: T0, pauseEndsAt: T1 })],
      expected: [{ labels: { namespace: 'prod', name: 'a', version: 'v2' }, phase: 'Aborting', startedAt: Date.parse(T0) / 1000, progressDeadlineSeconds: 1800 }],
    },
    { what: 'no start time: nothing to measure against', apps: [app('a', { phase: 'Progressing', version: 'v2' })], expected: [] },
    { what: 'a spec that does not parse', apps: [{ ...app('a', { phase: 'Progressing', version: 'v2', startedAt: T0 }), spec: { image: '' } }], expected: [] },
  ];
  for (const c of cases) {
    test(c.what, () => assert.deepEqual(runningRollouts(c.apps), c.expected));
  }
});

describe('applications by phase, and the failed ones', () => {
  const withStatus = (name: string, status?: Record<string, unknown>) => ({ metadata: { name, namespace: 'prod' }, ...(status ? { status } : {}) });
  const apps = [
    withStatus('new'),
    withStatus('ok', { phase: 'Running' }),
    withStatus('ok2', { phase: 'Running' }),
    withStatus('bad', { phase: 'Failed', conditions: [{ type: 'InvalidSpec', status: 'False', reason: 'ValidSpec' }, { type: 'Degraded', status: 'True', reason: 'ApplyFailed' }] }),
    withStatus('worse', { phase: 'Failed', conditions: [{ type: 'InvalidSpec', status: 'True', reason: 'InvalidSpec' }, { type: 'Degraded', status: 'True', reason: 'InvalidSpec' }] }),
  ];
  test('counts each phase, Unknown before the first status', () => {
    assert.deepEqual(Object.fromEntries(applicationsByPhase(apps)), { Unknown: 1, Running: 2, Failed: 2 });
  });
  test('names each failed Application with the reason its conditions give', () => {
    assert.deepEqual(failedApplications(apps), [{ namespace: 'prod', name: 'bad', reason: 'ApplyFailed' }, { namespace: 'prod', name: 'worse', reason: 'InvalidSpec' }]);
  });
});

describe("the watcher's cut-down Applications", () => {
  const withStatus = (name: string, status: Record<string, unknown>) => ({ ...app(name, undefined), status });
  const apps = [
    app('new', undefined),
    withStatus('ok', { phase: 'Running', conditions: [{ type: 'Ready', status: 'True', reason: 'Available', message: 'long text' }] }),
    withStatus('bad', { phase: 'Failed', conditions: [{ type: 'InvalidSpec', status: 'False', reason: 'ValidSpec' }, { type: 'Degraded', status: 'True', reason: 'ApplyFailed' }] }),
    withStatus('paused', { phase: 'Running', canary: { phase: 'Paused', version: 'v2', startedAt: T0, pauseEndsAt: T1 } }),
    withStatus('done', { phase: 'Running', canary: { phase: 'Promoted', version: 'v2', startedAt: T0 } }),
  ];
  const views = apps.map((a) => metricsView(a));
  test('give the metrics the same figures as the whole objects', () => {
    assert.deepEqual(applicationsByPhase(views), applicationsByPhase(apps));
    assert.deepEqual(failedApplications(views), failedApplications(apps));
    assert.deepEqual(runningRollouts(views), runningRollouts(apps));
    assert.equal(runningRollouts(views).length, 1);
  });
  test('keep the whole object only while a rollout runs', () => {
    assert.deepEqual(views.map((v) => 'spec' in (v as object)), [false, false, false, true, false]);
  });
});

describe('the counters', () => {
  test('have a series at 0 for every outcome and signal reason from the start, so the first of each is an increase', async () => {
    const text = await createMetrics().registry.metrics();
    for (const outcome of ['Promoted', 'Aborted', 'RolledBack', 'Failed']) {
      assert.match(text, new RegExp(`^application_operator_rollouts_total\\{outcome="${outcome}"\\} 0$`, 'm'));
      assert.match(text, new RegExp(`^application_operator_rollout_duration_seconds_count\\{outcome="${outcome}"\\} 0$`, 'm'));
    }
    for (const reason of ['spec', 'child', 'child-status', 'deleted', 'resync']) {
      assert.match(text, new RegExp(`^application_operator_watch_signals_total\\{reason="${reason}",result="error"\\} 0$`, 'm'));
    }
  });
});

describe('the watcher gauges', () => {
  /** The registry's text for the metrics whose names start with `prefix` (but the rollout duration's), without HELP and TYPE lines. */
  const scrape = async (m: ReturnType<typeof createMetrics>, prefix: string) =>
    (await m.registry.metrics()).split('\n').filter((l) => l.startsWith(prefix) && !l.startsWith('application_operator_rollout_duration')).sort();

  test('a process without a watcher (worker mode, or a standby replica) says so and reports no rollout', async () => {
    const m = createMetrics();
    assert.deepEqual(await scrape(m, 'application_operator_watcher_'), ['application_operator_watcher_running 0', 'application_operator_watcher_synced 0']);
    assert.deepEqual(await scrape(m, 'application_operator_rollout_started'), []);
    assert.deepEqual(await scrape(m, 'application_operator_application'), []);
  });

  test('a watcher that has not listed yet, then has, with a rollout in a timed pause', async () => {
    const m = createMetrics();
    const view = { synced: false, apps: [] as unknown[], applications() { return this.apps; } };
    m.readWatcher((): WatcherView => view);
    assert.deepEqual(await scrape(m, 'application_operator_watcher_'), ['application_operator_watcher_running 1', 'application_operator_watcher_synced 0']);
    view.synced = true;
    view.apps = [app('a', { phase: 'Paused', version: 'v2', startedAt: T0, pauseEndsAt: T1 }), app('b', { phase: 'Promoted', version: 'v9', startedAt: T0 })];
    assert.deepEqual(await scrape(m, 'application_operator_watcher_'), ['application_operator_watcher_running 1', 'application_operator_watcher_synced 1']);
    assert.deepEqual(await scrape(m, 'application_operator_applications'), ['application_operator_applications{phase="Unknown"} 2']);
    assert.deepEqual(await scrape(m, 'application_operator_rollout_'), [
      `application_operator_rollout_pause_end_timestamp_seconds{namespace="prod",name="a",version="v2"} ${Date.parse(T1) / 1000}`,
      'application_operator_rollout_progress_deadline_seconds{namespace="prod",name="a",version="v2"} 1800',
      `application_operator_rollout_started_timestamp_seconds{namespace="prod",name="a",version="v2",phase="Paused"} ${Date.parse(T0) / 1000}`,
    ]);
    // The rollout moved on: the series of its old phase goes, rather than lingering beside the new one.
    view.apps = [app('a', { phase: 'Promoted', version: 'v2', startedAt: T0 })];
    assert.deepEqual(await scrape(m, 'application_operator_rollout_'), []);
  });
});
