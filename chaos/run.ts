// `npm run chaos -- --seed S --ops N [--fault-rate p] [--quiet-seconds q] [--batch n] [--pool n] [--keep-stack]`
// Starts its own stack (temporary state folder, free ports), an operator process, and runs chaos/chaos.ts.
// Prints ops, faults by kind, violations and convergence times, writes results/chaos-<seed>-<time>.json, and exits
// non-zero when an invariant was violated.
import { Command } from 'commander';
import { mkdir, writeFile } from 'node:fs/promises';
import { join, resolve } from 'node:path';
import { kubectl } from '../stack/stack.ts';
import { startRunStack } from '../testkit/stack.ts';
import { runChaos, type ChaosSummary } from './chaos.ts';

const root = resolve(import.meta.dirname, '..');

export function formatSummary(s: ChaosSummary): string {
  const lines = [
    `seed ${s.seed}: ${s.ops} ops in ${s.durationSeconds.toFixed(0)} s (${Object.entries(s.opsByKind).map(([k, n]) => `${k} ${n}`).join(', ')}; ${s.opsRejected} refused)`,
    `faults: ${Object.entries(s.faults).map(([k, n]) => `${k} ${n}`).join(', ')} (total ${Object.values(s.faults).reduce((a, b) => a + b, 0)})`,
    ...s.faultLog.map((f) => `  after op #${f.afterOp}: ${f.kind}, converged ${f.convergeSeconds === null ? 'NOT within the settle time' : `in ${f.convergeSeconds.toFixed(1)} s`}`),
    `VirtualService versions observed: ${s.routeVersionsSeen} (${s.routeVersionsUnjudged} unjudged)`,
    `invariant violations: ${s.violations.length}`,
    ...s.violations.map((v) => `  - ${v}`),
  ];
  return lines.join('\n');
}

async function main(): Promise<number> {
  const program = new Command()
    .requiredOption('--seed <n>', 'PRNG seed', (v) => Number.parseInt(v, 10))
    .requiredOption('--ops <n>', 'number of operations', (v) => Number.parseInt(v, 10))
    .option('--fault-rate <p>', 'probability of a fault after each op', Number.parseFloat, 0.15)
    .option('--quiet-seconds <q>', 'quiet period after each batch', Number.parseFloat, 15)
    .option('--settle-seconds <s>', 'how long invariants may take to hold after the quiet period / a fault', Number.parseFloat, 150)
    .option('--batch <n>', 'ops per batch', (v) => Number.parseInt(v, 10), 10)
    .option('--pool <n>', 'application names in the pool', (v) => Number.parseInt(v, 10), 4)
    .option('--keep-stack', 'leave the stack running afterwards')
    .parse(process.argv);
  const o = program.opts<{ seed: number; ops: number; faultRate: number; quietSeconds: number; settleSeconds: number; batch: number; pool: number; keepStack?: boolean }>();
  if (!Number.isFinite(o.seed) || !(o.ops > 0)) throw new Error('--seed and --ops must be numbers (ops > 0)');

  const run = await startRunStack({ prefix: 'app-operator-chaos', workflowsPath: join(root, 'workflows', 'index.ts'), keep: Boolean(o.keepStack) });
  const stack = run.info;
  try {
    // The testkit (operator process, clients) reads the stack from these.
    Object.assign(process.env, run.env);
    const namespace = 'chaos';
    await kubectl(stack, ['create', 'namespace', namespace]);

    const summary = await runChaos({
      seed: o.seed, ops: o.ops, faultRate: o.faultRate, quietSeconds: o.quietSeconds, settleSeconds: o.settleSeconds,
      batchSize: o.batch, poolSize: o.pool, stack, namespace,
    });
    console.log(`\n${formatSummary(summary)}`);
    const dir = join(root, 'results');
    await mkdir(dir, { recursive: true });
    const file = join(dir, `chaos-seed${o.seed}-ops${o.ops}-${new Date().toISOString().replace(/[:.]/g, '-')}.json`);
    await writeFile(file, JSON.stringify({ options: o, ...summary }, null, 2));
    console.log(`summary written to ${file}`);
    return summary.violations.length === 0 ? 0 : 2;
  } finally {
    await run.stop();
  }
}

if (process.argv[1] && resolve(process.argv[1]) === resolve(import.meta.filename)) {
  main().then((code) => process.exit(code), (err: unknown) => {
    console.error(`chaos run failed: ${err instanceof Error ? err.stack ?? err.message : String(err)}`);
    process.exit(1);
  });
}
