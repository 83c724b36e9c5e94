import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { parseOptions } from '../../bench/options.ts';
import { deleteTargets, restartTargets } from '../../bench/report.ts';
import { readsAndWrites } from '../../bench/restart.ts';

const rows = (t: ReturnType<typeof restartTargets>) => t.map((x) => `${x.target}: ${x.results[0]!.verdict} ${x.results[0]!.value}`);

describe('bench options: --scenario restart and delete', () => {
  test('restart needs --apps, has no floor, quiet 5 s by default', () => {
    const c = parseOptions(['--scenario', 'restart', '--apps', '100', '--quiet-seconds', '3']);
    assert.ok('run' in c);
    assert.deepEqual([c.run.scenario, c.run.apps, c.run.workers, c.run.floor, c.run.quietSeconds], ['restart', 100, [1], false, 3]);
    assert.equal((parseOptions(['--scenario', 'restart', '--apps', '1']) as { run: { quietSeconds: number } }).run.quietSeconds, 5);
    assert.throws(() => parseOptions(['--scenario', 'restart']), /--apps must be an integer >= 1/);
    assert.throws(() => parseOptions(['--scenario', 'restart', '--apps', '10', '--quiet-seconds', '0']), /--quiet-seconds must be an integer >= 1/);
  });

  test('delete has the floor unless --no-floor; neither takes --workers', () => {
    const d = parseOptions(['--scenario', 'delete', '--apps', '10']);
    assert.ok('run' in d && d.run.floor && d.run.scenario === 'delete');
    const n = parseOptions(['--scenario', 'delete', '--apps', '10', '--no-floor']);
    assert.ok('run' in n && !n.run.floor);
    assert.throws(() => parseOptions(['--scenario', 'delete', '--apps', '10', '--workers', '2']), /--scenario delete converges with one operator process/);
    assert.throws(() => parseOptions(['--scenario', 'restart', '--apps', '10', '--workers', '1,2']), /--workers is for the convergence scenario/);
  });

  test('an unknown scenario names the five', () => {
    assert.throws(() => parseOptions(['--scenario', 'soak']), /convergence, latency or waiting \(steady state\), restart or delete \(after convergence\); got soak/);
  });
});

describe('readsAndWrites', () => {
  test('reads are GET/LIST/WATCH, writes any write verb (dry-run too); Lease requests are counted apart', () => {
    assert.deepEqual(readsAndWrites({
      'LIST myapp.example.com/applications': 1, 'WATCH apps/deployments': 2, 'GET v1/services': 3,
      'APPLY apps/deployments': 4, 'APPLY dry-run apps/deployments': 1, 'PATCH myapp.example.com/applications/status': 2,
      'GET coordination.k8s.io/leases': 7, 'PUT coordination.k8s.io/leases': 8,
    }), { reads: 6, writes: 7, leaseRequests: 15 });
    assert.deepEqual(readsAndWrites({}), { reads: 0, writes: 0, leaseRequests: 0 });
  });
});

describe('restartTargets', () => {
  const restartCase = (name: string, readySeconds: number, idleSeconds: number | null, reads: number, writes: number) => ({ name, readySeconds, idleSeconds, reads, writes });
  test('ready and idle within 60 s, at most 1 read per app, no writes; never idle is a MISS', () => {
    const t = restartTargets({ apps: 100, quietSeconds: 5, cases: [restartCase('(a)', 3.2, 12, 100, 0), restartCase('(b)', 61, null, 250, 3)] } as never);
    assert.deepEqual(rows(t), [
      '(a): ready <= 60 s: PASS 3.2 s',
      '(a): idle <= 60 s: PASS 12.0 s',
      '(a): <= 1 read per app: PASS 1 (100 reads)',
      '(a): 0 writes: PASS 0 writes',
      '(b): ready <= 60 s: MISS 61.0 s',
      '(b): idle <= 60 s: MISS still busy at the timeout',
      '(b): <= 1 read per app: MISS 2.50 (250 reads)',
      '(b): 0 writes: MISS 3 writes',
    ]);
  });
});

describe('deleteTargets', () => {
  const ns = (seconds: number | null, appsLeft = 0) => ({ seconds, appsLeft });
  const op = (seconds: number | null, runningAtGone: number, runningAfter: number, appsLeft = 0) => ({ ...ns(seconds, appsLeft), runningAtGone, runningAfter });
  test('ratio to the floor and workflows left running', () => {
    assert.deepEqual(rows(deleteTargets({ operator: op(15, 3, 0), floor: ns(10), ratio: 1.5 } as never)), [
      'namespace delete <= 1.5x floor: PASS 1.50x (15.0 s vs 10.0 s)',
      '0 workflows left running: PASS 0 (3 when the namespace was gone)',
    ]);
    assert.deepEqual(rows(deleteTargets({ operator: op(31, 0, 2), floor: ns(10), ratio: 3.1 } as never)), [
      'namespace delete <= 1.5x floor: MISS 3.10x (31.0 s vs 10.0 s)',
      '0 workflows left running: MISS 2 (0 when the namespace was gone)',
    ]);
  });
  test('no floor is n/a; a namespace that never went is a MISS', () => {
    assert.deepEqual(rows(deleteTargets({ operator: op(12, 0, 0), floor: null, ratio: null } as never))[0], 'namespace delete <= 1.5x floor: n/a 12.0 s, no floor');
    assert.deepEqual(rows(deleteTargets({ operator: op(null, 5, 5, 40), floor: ns(10), ratio: null } as never))[0], 'namespace delete <= 1.5x floor: MISS not gone after the timeout (40 Applications left)');
  });
});
