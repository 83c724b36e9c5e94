// Disruptive: the short form of `npm run chaos` for CI. A fixed seed, 20 random ops over a few Applications and three
// planned faults (operator SIGKILL, Temporal restart, kube-apiserver restart) on the run's shared stack, which the
// disruptive phase has to itself. Every invariant of chaos/invariants.ts must hold.
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { runChaos } from '../../chaos/chaos.ts';
import { formatSummary } from '../../chaos/run.ts';
import { ownStack } from '../../testkit/env.ts';
import { testNamespace } from '../../testkit/apps.ts';

describe('chaos (short form)', () => {
  let ns: { name: string; cleanup: () => Promise<void> };

  before(async () => {
    ns = await testNamespace('chaos');
  });
  after(async () => {
    await ns?.cleanup();
  });

  it('seed 42, 20 ops, 3 faults: no invariant violated', async () => {
    const summary = await runChaos({
      seed: 42, ops: 20, plannedFaults: ['operator-kill', 'temporal-restart', 'apiserver-restart'],
      quietSeconds: 8, batchSize: 10, settleSeconds: 90, poolSize: 3,
      stack: await ownStack(), namespace: ns.name, print: (l) => console.log(l),
    });
    console.log(formatSummary(summary));
    assert.equal(Object.values(summary.faults).reduce((a, b) => a + b, 0), 3);
    assert.ok(summary.routeVersionsSeen > 0, 'VirtualServices were observed');
    assert.deepEqual(summary.violations, []);
  });
});
