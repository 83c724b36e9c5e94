#!/usr/bin/env node
// The operator's command line: `run` starts the watcher and/or a worker; the other commands talk to an
// Application's workflow through Temporal.
import { Command } from 'commander';
import { operatorConfig, withOperatorOptions } from '../operator/config.ts';
import { runOperator } from '../operator/main.ts';

const program = new Command('application-operator').description('Kubernetes operator for Applications, reconciled by Temporal workflows');

withOperatorOptions(program.command('run').description('run the operator (watcher + worker by default)')).action(async (opts: Record<string, unknown>) => {
  const running = await runOperator(operatorConfig(opts));
  const shutdown = () => void running.stop().then(() => process.exit(0));
  process.once('SIGTERM', shutdown);
  process.once('SIGINT', shutdown);
  await running.done;
});

program.parseAsync().catch((err: unknown) => {
  console.error(JSON.stringify({ level: 'fatal', msg: err instanceof Error ? err.message : String(err) }));
  process.exit(1);
});
