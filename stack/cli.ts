import { Command } from 'commander';
import { constants } from 'node:os';
import { resolve } from 'node:path';
import { buildAll } from './build.ts';
import { demo, demoOperatorStatus, stopDemoOperator } from './demo.ts';
import { down, envLines, readStack, restartServer, serverNames, status, up } from './stack.ts';

const defaultStateDir = process.env['STACK_STATE_DIR'] ?? resolve(import.meta.dirname, '..', '.state', 'stack');

const program = new Command('stack')
  .description('Builds, starts and stops the local stack: etcd, kube-apiserver, controller-manager, scheduler, kwok, the Temporal dev server and Prometheus, all on 127.0.0.1')
  .option('--state-dir <dir>', 'where the stack keeps its data, logs, pids and kubeconfig', defaultStateDir);

const stateDir = () => program.opts<{ stateDir: string }>().stateDir;

program.command('build')
  .description('build every server from its Go module into the cache (reuses what is cached)')
  .option('--force', 'rebuild even what is cached')
  .action(async (o: { force?: boolean }) => {
    await buildAll({ force: o.force ?? false });
  });

program.command('up')
  .description('start the stack (idempotent), install Istio and project CRDs')
  .option('--nodes <n>', 'number of kwok fake nodes', (v) => Number.parseInt(v, 10), 2)
  .option('--headless', 'do not serve the Temporal UI')
  .option('--pod-delay-ms <ms>', 'kwok delay per pod transition', (v) => Number.parseInt(v, 10), 300)
  .option('--codec-endpoint <url>', 'point the Temporal UI at this codec server (application-operator codec-server), kept until changed; \'\' for none')
  .action(async (o: { nodes: number; headless?: boolean; podDelayMs: number; codecEndpoint?: string }) => {
    await buildAll();
    const info = await up({ stateDir: stateDir(), nodes: o.nodes, headless: o.headless ?? false, podDelayMs: o.podDelayMs, ...(o.codecEndpoint !== undefined ? { codecEndpoint: o.codecEndpoint } : {}) });
    const codec = info.codecEndpoint ? ` (codec server ${info.codecEndpoint})` : '';
    console.log(`\n${envLines(info)}\n\nTemporal UI: ${info.headless ? '(headless)' : info.temporalUiUrl}${codec}\nPrometheus: ${info.prometheusUrl}`);
  });

program.command('down')
  .description('stop the servers this script started (by pid)')
  .option('--purge', 'also delete the state folder (etcd data, Temporal database, logs)')
  .action(async (o: { purge?: boolean }) => {
    await stopDemoOperator(stateDir());
    await down(stateDir(), { purge: o.purge ?? false });
    console.log('stack down');
  });

program.command('status')
  .description('show each server, its pid and ports, and whether it answers its health check; exits 1 unless every server is up')
  .action(async () => {
    const rows = await status(stateDir());
    if (!rows) {
      console.log(`no stack in ${stateDir()}`);
      process.exitCode = 1;
      return;
    }
    const line = (name: string, state: string, pid: number | undefined, ports: number[], detail?: string) =>
      console.log(`${name.padEnd(24)} ${state.padEnd(10)} pid ${String(pid ?? '-').padEnd(8)} ports ${(ports.join(',') || '-').padEnd(24)}${detail ? ` ${detail}` : ''}`.trimEnd());
    for (const r of rows) line(r.name, r.state, r.pid, r.ports, r.detail);
    // The operator `npm run demo` started, if any (not a server of the stack: its state does not decide the exit code).
    const op = await demoOperatorStatus(stateDir());
    if (op.pid) line('operator (demo)', op.running ? 'running' : 'stopped', op.pid, [op.port]);
    if (rows.some((r) => r.state !== 'up')) process.exitCode = 1;
  });

program.command('restart')
  .description(`stop one server and start it again on the same ports, waiting until it is healthy (fault drills): ${serverNames.join(', ')}`)
  .argument('<server>', 'the server to restart')
  .option('--signal <signal>', 'how to stop it: SIGTERM, or SIGKILL for a crash', 'SIGTERM')
  .option('--down-seconds <s>', 'how long to leave it down before starting it again', (v) => Number.parseFloat(v), 0)
  .action(async (server: string, o: { signal: string; downSeconds: number }) => {
    const name = serverNames.find((n) => n === server);
    if (!name) throw new Error(`no server "${server}" in the stack; one of: ${serverNames.join(', ')}`);
    const upper = o.signal.toUpperCase();
    const signal = (upper.startsWith('SIG') ? upper : `SIG${upper}`) as NodeJS.Signals;
    if (!(signal in constants.signals)) throw new Error(`--signal ${o.signal}: not a signal (SIGTERM, SIGKILL, SIGINT...)`);
    if (!Number.isFinite(o.downSeconds) || o.downSeconds < 0) throw new Error(`--down-seconds ${o.downSeconds}: want a number of seconds, 0 or more`);
    const info = await readStack(stateDir());
    if (!info) throw new Error(`no stack in ${stateDir()}; run: npm run stack -- up`);
    await restartServer(info, name, { signal, downMs: o.downSeconds * 1000, print: (l) => console.log(l) });
  });

program.command('demo')
  .description('up, then run the operator on it and apply samples/demo-app.yaml until it is Running')
  .action(async () => {
    await demo(stateDir());
  });

program.command('env')
  .description('print KUBECONFIG / TEMPORAL_ADDRESS / UI URL / PROMETHEUS_ADDRESS to export')
  .action(async () => {
    const info = await readStack(stateDir());
    if (!info) throw new Error(`no stack in ${stateDir()}; run: npm run stack -- up`);
    console.log(envLines(info));
  });

program.parseAsync().catch((err: unknown) => {
  console.error(`error: ${err instanceof Error ? err.message : String(err)}`);
  process.exit(1);
});
