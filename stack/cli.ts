import { Command } from 'commander';
import { constants } from 'node:os';
import { resolve } from 'node:path';
import { buildAll, optionalGroups, type OptionalGroup } from './build.ts';
import { memberEnvLines, memberNames, memberStatuses, requireMemberCluster } from './clusters.ts';
import { demo, demoOperatorStatus, stopDemoOperator } from './demo.ts';
import { dataPlaneStatus } from './dataplane.ts';
import { controlPlaneServerNames, down, envLines, readStack, restartServer, serverNames, status, up, type StackInfo } from './stack.ts';
import { runTraffic } from './traffic.ts';
import { tracingStatus } from './tracing.ts';
import { findTraces, formatTree, getTrace, linkedTraces, traceTree } from './trace-tree.ts';

const defaultStateDir = process.env['STACK_STATE_DIR'] ?? resolve(import.meta.dirname, '..', '.state', 'stack');

const program = new Command('stack')
  .description('Builds, starts and stops the local stack: etcd, kube-apiserver, controller-manager, scheduler, kwok, the Temporal dev server and Prometheus, all on 127.0.0.1')
  .option('--state-dir <dir>', 'where the stack keeps its data, logs, pids and kubeconfig', defaultStateDir);

const stateDir = () => program.opts<{ stateDir: string }>().stateDir;

async function requireStack(): Promise<StackInfo> {
  const info = await readStack(stateDir());
  if (!info) throw new Error(`no stack in ${stateDir()}; run: npm run stack -- up`);
  return info;
}

/** Collects repeated `--with <group>` options, refusing a group that does not exist. */
function groupOption(value: string, previous: OptionalGroup[]): OptionalGroup[] {
  if (!(optionalGroups as readonly string[]).includes(value)) throw new Error(`--with ${value}: expected one of ${optionalGroups.join(', ')}`);
  return [...previous, value as OptionalGroup];
}

program.command('build')
  .description('build every server from its Go module into the cache (reuses what is cached)')
  .option('--force', 'rebuild even what is cached')
  .option('--with <group>', 'also build an optional part: data-plane (Traefik and the Gateway API CRDs) or tracing (Jaeger); repeatable', groupOption, [])
  .action(async (o: { force?: boolean; with: OptionalGroup[] }) => {
    await buildAll({ force: o.force ?? false, with: ['metrics', 'helm', ...o.with] });
  });

program.command('up')
  .description('start the stack (idempotent), install Istio and project CRDs')
  .option('--nodes <n>', 'number of kwok fake nodes', (v) => Number.parseInt(v, 10), 2)
  .option('--headless', 'do not serve the Temporal UI')
  .option('--pod-delay-ms <ms>', 'kwok delay per pod transition', (v) => Number.parseInt(v, 10), 300)
  .option('--codec-endpoint <url>', 'point the Temporal UI at this codec server (application-operator codec-server), kept until changed; \'\' for none')
  .option('--data-plane', 'create the stack with its data plane: Traefik serving a Gateway, and pods that answer HTTP (builds Traefik once, ~13 CPU-minutes)')
  .option('--tracing', 'create the stack with its trace backend: Jaeger, to which the API server and etcd export their spans (builds Jaeger once, ~8 CPU-minutes)')
  .option('--clusters <n>', 'clusters in all, the hub included: the members b, c... (a control plane each, registered with the hub) are added if missing; up never removes one', clustersOption)
  .option('--free-ports', 'take free ports instead of the fixed ones (a new stack only), as tests do')
  .action(async (o: { nodes: number; headless?: boolean; podDelayMs: number; codecEndpoint?: string; dataPlane?: boolean; tracing?: boolean; clusters?: string[]; freePorts?: boolean }) => {
    const existing = await readStack(stateDir());
    await buildAll({ with: ['metrics', ...(o.dataPlane || existing?.dataPlane ? ['data-plane' as const] : []), ...(o.tracing || existing?.tracing ? ['tracing' as const] : [])] });
    const info = await up({
      stateDir: stateDir(), nodes: o.nodes, headless: o.headless ?? false, podDelayMs: o.podDelayMs, dataPlane: o.dataPlane ?? false, tracing: o.tracing ?? false,
      ...(o.codecEndpoint !== undefined ? { codecEndpoint: o.codecEndpoint } : {}),
      ...(o.clusters ? { clusters: o.clusters } : {}),
      ...(o.freePorts ? { ports: 'free' as const } : {}),
    });
    const codec = info.codecEndpoint ? ` (codec server ${info.codecEndpoint})` : '';
    const gateway = info.dataPlane ? `\nGateway ${info.dataPlane.gateway.namespace}/${info.dataPlane.gateway.name}: ${info.dataPlane.gatewayUrl}` : '';
    const tracing = info.tracing ? `\nJaeger: OTLP ${info.tracing.otlpHttpUrl}, query ${info.tracing.queryUrl} (npm run stack -- trace <app>)` : '';
    const members = (await readStack(stateDir()))?.clusters ?? [];
    const clusters = members.length ? `\nMember clusters: ${members.join(', ')} (eval "$(npm run -s stack -- env --cluster ${members[0]!})")` : '';
    console.log(`\n${envLines(info)}\n\nTemporal UI: ${info.headless ? '(headless)' : info.temporalUiUrl}${codec}\nPrometheus: ${info.prometheusUrl}${gateway}${tracing}${clusters}`);
  });

program.command('down')
  .description('stop the servers this script started (by pid), the member clusters\' first')
  .option('--purge', 'also delete the state folder (etcd data, Temporal database, logs)')
  .action(async (o: { purge?: boolean }) => {
    await stopDemoOperator(stateDir());
    await down(stateDir(), { purge: o.purge ?? false });
    console.log('stack down');
  });

program.command('status')
  .description('show each server (a member cluster\'s as <cluster>/<server>), its pid and ports, and whether it answers its health check; exits 1 unless every server is up')
  .action(async () => {
    const rows = await status(stateDir());
    if (!rows) {
      console.log(`no stack in ${stateDir()}`);
      process.exitCode = 1;
      return;
    }
    const lines: { name: string; state: string; pid?: number | undefined; ports: number[]; detail?: string | undefined }[] = [...rows];
    const info = await readStack(stateDir());
    const dataPlane = info ? [...await dataPlaneStatus(info), ...await tracingStatus(info)] : [];
    lines.push(...dataPlane);
    let membersUp = true;
    for (const m of info ? await memberStatuses(info) : []) {
      if (!m.rows) lines.push({ name: `${m.name}/*`, state: 'stopped', ports: [], detail: 'no state folder: npm run stack -- up' });
      for (const r of m.rows ?? []) lines.push({ ...r, name: `${m.name}/${r.name}` });
      if (!m.rows || m.rows.some((r) => r.state !== 'up')) membersUp = false;
    }
    // The operator `npm run demo` started, if any (not a server of the stack: its state does not decide the exit code).
    const op = await demoOperatorStatus(stateDir());
    if (op.pid) lines.push({ name: 'operator (demo)', state: op.running ? 'running' : 'stopped', pid: op.pid, ports: [op.port] });
    const width = Math.max(24, ...lines.map((l) => l.name.length));
    for (const l of lines) {
      console.log(`${l.name.padEnd(width)} ${l.state.padEnd(10)} pid ${String(l.pid ?? '-').padEnd(8)} ports ${(l.ports.join(',') || '-').padEnd(24)}${l.detail ? ` ${l.detail}` : ''}`.trimEnd());
    }
    if (!membersUp || [...rows, ...dataPlane].some((r) => r.state !== 'up')) process.exitCode = 1;
  });

program.command('restart')
  .description(`stop one server and start it again on the same ports, waiting until it is healthy (fault drills): ${serverNames.join(', ')}; a member cluster's as <cluster>/<server> (${controlPlaneServerNames.join(', ')})`)
  .argument('<server>', 'the server to restart, e.g. kube-apiserver, or b/kube-apiserver for member cluster b\'s')
  .option('--cluster <name>', 'the member cluster whose server to restart (the same as <cluster>/<server>)')
  .option('--signal <signal>', 'how to stop it: SIGTERM, or SIGKILL for a crash', 'SIGTERM')
  .option('--down-seconds <s>', 'how long to leave it down before starting it again', (v) => Number.parseFloat(v), 0)
  .action(async (arg: string, o: { cluster?: string; signal: string; downSeconds: number }) => {
    const slash = arg.indexOf('/');
    const cluster = slash >= 0 ? arg.slice(0, slash) : o.cluster;
    const server = slash >= 0 ? arg.slice(slash + 1) : arg;
    if (slash >= 0 && o.cluster !== undefined && o.cluster !== cluster) throw new Error(`${arg} names cluster ${cluster}, --cluster ${o.cluster}: say it once`);
    const names: readonly string[] = cluster === undefined ? serverNames : controlPlaneServerNames;
    if (!names.includes(server)) throw new Error(`no server "${server}" in ${cluster === undefined ? 'the stack' : `member cluster ${cluster}`}; one of: ${names.join(', ')}`);
    const upper = o.signal.toUpperCase();
    const signal = (upper.startsWith('SIG') ? upper : `SIG${upper}`) as NodeJS.Signals;
    if (!(signal in constants.signals)) throw new Error(`--signal ${o.signal}: not a signal (SIGTERM, SIGKILL, SIGINT...)`);
    if (!Number.isFinite(o.downSeconds) || o.downSeconds < 0) throw new Error(`--down-seconds ${o.downSeconds}: want a number of seconds, 0 or more`);
    const info = await requireStack();
    const opts = { signal, downMs: o.downSeconds * 1000, print: (l: string) => console.log(l) };
    if (cluster === undefined) await restartServer(info, server as (typeof serverNames)[number], opts);
    else await restartServer(await requireMemberCluster(info, cluster), server as (typeof controlPlaneServerNames)[number], opts);
  });

program.command('demo')
  .description('up, then run the operator on it and apply samples/demo-app.yaml until it is Running')
  .action(async () => {
    await demo(stateDir());
  });

program.command('trace <app>')
  .description('print the newest trace of an Application (a reconcile pass, or with --step a rollout step) from the stack\'s Jaeger, as a tree with durations: the watcher\'s signal, the workflow, its activities, their API requests and the API server\'s and etcd\'s spans')
  .option('-n, --namespace <ns>', 'the app\'s namespace', 'default')
  .option('--step', 'the newest rollout step instead of the newest pass')
  .option('--trace-id <id>', 'this trace instead of the newest')
  .option('--depth <n>', 'print spans down to this depth only (0 is the root)', (v) => Number.parseInt(v, 10))
  .action(async (app: string, o: { namespace: string; step?: boolean; traceId?: string; depth?: number }) => {
    const info = await readStack(stateDir());
    if (!info?.tracing) throw new Error(`no stack with tracing in ${stateDir()}; run: npm run stack -- up --tracing (and the operator with OTEL_EXPORTER_OTLP_ENDPOINT from stack env)`);
    const q = info.tracing.queryUrl;
    const id = o.traceId ?? (await findTraces(q, {
      service: 'application-operator', tags: { 'app.namespace': o.namespace, 'app.name': app }, limit: 50,
    })).find((t) => t.spans.some((s) => (o.step ? /^rollout /.test(s.operationName) : /^(signal |reconcile pass )/.test(s.operationName))))?.traceID;
    if (!id) throw new Error(`no ${o.step ? 'rollout step' : 'reconcile'} trace of ${o.namespace}/${app} in Jaeger (${q}) in the last hour`);
    const trace = await getTrace(q, id);
    if (!trace) throw new Error(`no trace ${id} in Jaeger (${q})`);
    console.log(`trace ${id}`);
    const lines = traceTree(trace, await linkedTraces(q, trace));
    console.log(formatTree(o.depth === undefined ? lines : lines.filter((l) => l.depth <= o.depth!)));
  });

program.command('env')
  .description('print KUBECONFIG / TEMPORAL_ADDRESS / UI URL / PROMETHEUS_ADDRESS to export')
  .option('--cluster <name>', 'for a member cluster instead: its KUBECONFIG, and its TEMPORAL_NAMESPACE on the hub\'s Temporal')
  .action(async (o: { cluster?: string }) => {
    const info = await requireStack();
    console.log(o.cluster === undefined ? envLines(info) : memberEnvLines(info, await requireMemberCluster(info, o.cluster)));
  });

/** The member clusters of `--clusters <n>` (the hub included): 3 gives b and c. */
function clustersOption(value: string): string[] {
  try {
    return memberNames(/^\d+$/.test(value) ? Number(value) : Number.NaN);
  } catch (err) {
    throw new Error(`--clusters ${value}: ${(err as Error).message}`, { cause: err });
  }
}

/** Collects repeated `--header k=v` options. */
function headerOption(value: string, previous: Record<string, string>): Record<string, string> {
  const eq = value.indexOf('=');
  if (eq <= 0) throw new Error(`--header ${value}: expected name=value`);
  return { ...previous, [value.slice(0, eq).trim()]: value.slice(eq + 1) };
}

function positiveNumber(flag: string) {
  return (value: string) => {
    const n = Number(value);
    if (!(n > 0)) throw new Error(`${flag} ${value}: expected a number above 0`);
    return n;
  };
}

program.command('traffic <app>')
  .description('send requests through the data plane\'s proxy to an app (addressed as its HTTPRoute says) and print, every second, the share each version answered, the error rate and latency')
  .option('-n, --namespace <ns>', 'the app\'s namespace', 'default')
  .requiredOption('--rps <n>', 'requests per second', positiveNumber('--rps'))
  .option('--duration <seconds>', 'stop after this long (default: until Ctrl-C)', positiveNumber('--duration'))
  .option('--header <name=value>', 'a request header (e.g. one a header route matches); repeatable', headerOption, {})
  .option('--host <host>', 'the Host header, instead of the HTTPRoute\'s hostname')
  .option('--path <path>', 'the path, instead of the HTTPRoute\'s')
  .action(async (app: string, o: { namespace: string; rps: number; duration?: number; header: Record<string, string>; host?: string; path?: string }) => {
    const info = await readStack(stateDir());
    if (!info) throw new Error(`no stack in ${stateDir()}; run: npm run stack -- up --data-plane`);
    const summary = await runTraffic(info, {
      app, namespace: o.namespace, rps: o.rps, headers: o.header,
      ...(o.duration !== undefined ? { durationSeconds: o.duration } : {}),
      ...(o.host !== undefined ? { host: o.host } : {}),
      ...(o.path !== undefined ? { path: o.path } : {}),
    }, (l) => console.log(l));
    if (summary.total === 0) process.exitCode = 1;
  });

program.parseAsync().catch((err: unknown) => {
  console.error(`error: ${err instanceof Error ? err.message : String(err)}`);
  process.exit(1);
});
