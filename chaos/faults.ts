// The faults of the chaos run: the operator process killed and restarted, and Temporal, the kube-apiserver or etcd
// killed and started again after a short outage; and when they happen (planned, or at random after an op).
import { setTimeout as sleep } from 'node:timers/promises';
import { startServer, stopServer, type ServerName, type StackInfo } from '../stack/stack.ts';
import { closeTemporal } from '../testkit/apps.ts';
import type { OperatorProcess } from '../testkit/operator.ts';
import type { Rng } from './prng.ts';

export const faultKinds = ['operator-kill', 'temporal-restart', 'apiserver-restart', 'etcd-restart'] as const;
export type FaultKind = (typeof faultKinds)[number];

/**
 * The fault to inject after each op: planned faults go after evenly spaced ops (the CI form); otherwise one of each
 * kind at random with probability faultRate (drawn from the PRNG after every op, so the sequence stays seeded).
 */
export function faultSchedule(opts: { ops: number; plannedFaults?: FaultKind[] | undefined; faultRate: number }, rng: Rng): (op: number) => FaultKind | undefined {
  const { plannedFaults } = opts;
  if (plannedFaults) {
    const planned = new Map<number, FaultKind>();
    plannedFaults.forEach((kind, i) => planned.set(Math.floor(((i + 1) * opts.ops) / (plannedFaults.length + 1)), kind));
    return (op) => planned.get(op);
  }
  return () => (rng.chance(opts.faultRate) ? rng.pick(faultKinds) : undefined);
}

/** Injects one fault and returns once the server (or the operator) is back. */
export async function injectFault(kind: FaultKind, ctx: { stack: StackInfo; operator: OperatorProcess; rng: Rng }): Promise<void> {
  const { stack, operator, rng } = ctx;
  const restart = async (server: ServerName, downMs: number) => {
    if (server === 'temporal') await closeTemporal();
    await stopServer(stack, server, 'SIGKILL');
    await sleep(downMs);
    await startServer(stack, server);
  };
  switch (kind) {
    case 'operator-kill':
      await operator.stop('SIGKILL');
      await sleep(rng.int(0, 3000));
      await operator.restart();
      break;
    case 'temporal-restart':
      await restart('temporal', rng.int(500, 3000));
      break;
    case 'apiserver-restart':
      await restart('kube-apiserver', rng.int(500, 3000));
      break;
    case 'etcd-restart':
      await restart('etcd', rng.int(500, 3000));
      break;
  }
}
