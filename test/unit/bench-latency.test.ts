import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { histogramDelta } from '../../bench/latency.ts';
import { parseOptions } from '../../bench/options.ts';
import { latencyTargets, targets } from '../../bench/report.ts';

const part = (latenciesMs: number[], errors: string[] = []) => ({ sample: latenciesMs.length + errors.length, latenciesMs, errors });
const verdicts = (t: ReturnType<typeof latencyTargets>) => t.map((x) => `${x.target}: ${x.results[0]!.verdict} ${x.results[0]!.value}`);

describe('latencyTargets', () => {
  test('PASS and MISS by percentile', () => {
    const create = part([...Array.from({ length: 49 }, () => 800), 2500]);
    assert.deepEqual(verdicts(latencyTargets({ create, update: part([400, 450, 700]), promote: part([1200, 1300, 900]) } as never)), [
      'create -> Running p50 < 1 s: PASS 0.80 s',
      'create -> Running p99 < 2 s: MISS 2.50 s',
      'spec change -> applied p50 < 0.5 s: PASS 0.45 s',
      'promote -> 100% stable p50 < 1 s: MISS 1.20 s',
    ]);
  });

  test('samples that did not complete count as never; a part not measured is n/a', () => {
    const t = verdicts(latencyTargets({ create: part([100], ['app-1: timed out', 'app-2: timed out']), update: part([100, 100, 100], ['app-3: timed out']), promote: null } as never));
    assert.deepEqual(t, [
      'create -> Running p50 < 1 s: MISS did not complete (2/3 did not complete)',
      'create -> Running p99 < 2 s: MISS did not complete (2/3 did not complete)',
      'spec change -> applied p50 < 0.5 s: PASS 0.10 s (1/4 did not complete)',
      'promote -> 100% stable p50 < 1 s: n/a not measured',
    ]);
  });
});

describe('histogramDelta', () => {
  test('means over the window between two scrapes; histograms without new observations are left out', () => {
    const before = { a: { count: 2, mean: 1 }, b: { count: 5, mean: 3 } };
    const after = { a: { count: 4, mean: 2 }, b: { count: 5, mean: 3 }, c: { count: 1, mean: 7 } };
    assert.deepEqual(histogramDelta(after, before), { a: { count: 2, mean: 3 }, c: { count: 1, mean: 7 } });
  });
});

describe('bench options: --scenario', () => {
  test('convergence stays the default and needs --apps', () => {
    const c = parseOptions(['--apps', '10']);
    assert.ok('run' in c);
    assert.equal(c.run.scenario, 'convergence');
    assert.equal(c.run.floor, true);
    assert.throws(() => parseOptions([]), /--apps must be/);
  });

  test('--operator-env: NAME=VALUE pairs for every operator process, the value kept whole', () => {
    const c = parseOptions(['--apps', '10', '--operator-env', 'MALLOC_CONF=narenas:2,dirty_decay_ms:1000', '--operator-env=LD_PRELOAD=/lib/x.so']);
    assert.ok('run' in c);
    assert.deepEqual(c.run.operatorEnv, { MALLOC_CONF: 'narenas:2,dirty_decay_ms:1000', LD_PRELOAD: '/lib/x.so' });
    assert.deepEqual((parseOptions(['--apps', '10']) as { run: { operatorEnv: object } }).run.operatorEnv, {});
    assert.throws(() => parseOptions(['--apps', '10', '--operator-env', 'novalue']), /--operator-env takes NAME=VALUE, got "novalue"/);
    assert.throws(() => parseOptions(['--apps', '10', '--operator-env', '=x']), /NAME=VALUE/);
  });

  test('latency: its own sample, one process, no floor, 60 s per wait', () => {
    const c = parseOptions(['--scenario', 'latency']);
    assert.ok('run' in c);
    assert.equal(c.run.scenario, 'latency');
    assert.equal(c.run.latencySample, 50);
    assert.equal(c.run.apps, 50);
    assert.deepEqual(c.run.workers, [1]);
    assert.equal(c.run.floor, false);
    assert.equal(c.run.timeoutSeconds, 60);
    assert.equal(c.run.promoteSample, 5);
    const l = parseOptions(['--scenario', 'latency', '--latency-sample', '7']);
    assert.ok('run' in l && l.run.apps === 7);
  });

  test('latency refuses the convergence knobs, and an unknown scenario is refused', () => {
    assert.throws(() => parseOptions(['--scenario', 'latency', '--apps', '10']), /--apps and --workers are for the convergence scenario/);
    assert.throws(() => parseOptions(['--scenario', 'latency', '--workers', '2']), /--apps and --workers/);
    assert.throws(() => parseOptions(['--scenario', 'soak']), /--scenario must be convergence, latency or waiting/);
  });
  test('waiting: one operator, its minutes', () => {
    const w = parseOptions(['--scenario', 'waiting', '--waiting-minutes', '3']);
    assert.ok('run' in w);
    assert.deepEqual([w.run.scenario, w.run.waitingMinutes, w.run.workers, w.run.floor], ['waiting', 3, [1], false]);
    assert.throws(() => parseOptions(['--scenario', 'waiting', '--waiting-minutes', '0']), /--waiting-minutes must be an integer >= 1/);
  });
});

describe('targets: the memory budget by N', () => {
  const run = (apps: number, peakRssMB: number) => ({
    workers: 1, apps, ratioToFloor: null, temporal: null, idle: { operatorWrites: 0 }, memory: [{ peakRssMB }],
    converged: apps, failed: [], timedOut: false, closedWorkflows: [],
  });
  const rssRow = (apps: number, peak: number) => {
    const row = targets({ apps, idleSeconds: 30 } as never, [run(apps, peak)] as never, null).find((t) => t.target.startsWith('RSS'))!;
    return `${row.target}: ${row.results[0]!.verdict} ${row.results[0]!.value}`;
  };

  test('300 MB at 1,000 Applications, 500 MB at 10,000', () => {
    assert.equal(rssRow(1000, 289), 'RSS <= 300 MB per operator process: PASS 289 MB');
    assert.equal(rssRow(1000, 301), 'RSS <= 300 MB per operator process: MISS 301 MB');
    assert.equal(rssRow(10_000, 349), 'RSS <= 500 MB per operator process: PASS 349 MB');
    assert.equal(rssRow(10_000, 501), 'RSS <= 500 MB per operator process: MISS 501 MB');
  });

  test('another N is held to the budget of the nearest N the target names, and says so', () => {
    assert.equal(rssRow(100, 256), 'RSS <= 300 MB per operator process (target set at 1,000 apps; this run has 100): PASS 256 MB');
    assert.equal(rssRow(20_000, 480), 'RSS <= 500 MB per operator process (target set at 10,000 apps; this run has 20000): PASS 480 MB');
  });
});
