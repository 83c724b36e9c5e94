// npm run bench -- --apps N [--workers K | K1,K2,...] [--idle-seconds 60] [--timeout-seconds S] [--promote-sample 5]
//
// Starts its own local stack (temp state dir, free ports), measures the floor (the same rendered children applied
// straight to the API server, no Temporal), then for each worker count runs the operator on N fresh Applications:
// per-app convergence latency, makespan and its ratio to the floor, API requests and Temporal events per app, an idle
// window after convergence, peak RSS and the promote latency of a few canaries. Prints tables, writes JSON and an
// SVG chart under results/, and tears the stack down (also on Ctrl-C).
//
// npm run bench -- --scenario latency [--latency-sample 50] [--promote-sample 5]
//
// The same stack, no floor: one operator process times one app at a time (create -> Running, spec change ->
// applied, promote) and writes results/bench-latency-<time>.json.
//
// npm run bench -- --scenario restart --apps N [--idle-seconds 60] [--quiet-seconds 5]
// npm run bench -- --scenario delete --apps N
//
// N apps converged by one process (as above, no floor for restart), then the operator restarted, crashed and failed
// over (restart), or their namespace deleted and timed against the floor's (delete); results/bench-<scenario>-<time>.json.
//
// npm run bench -- --scenario rollouts [--apps 100]
//
// N mesh apps converged by one process, then a canary started on all N at once and, once all wait at an approval,
// all promoted at once: time to the first weight, how late the timed pauses end, promote latency; the same JSON.
import { mkdir, readFile, writeFile } from 'node:fs/promises';
import { join, resolve } from 'node:path';
import { down, kubectl } from '../stack/stack.ts';
import { closeTemporal, kubeApi, temporalClient } from '../testkit/apps.ts';
import { startRunStack, type RunStack } from '../testkit/stack.ts';
import { ApiServer } from './apiserver.ts';
import { stackPids } from './cpu.ts';
import { LoadSampler } from './load.ts';
import { importCosts } from './memory.ts';
import type { Ctx } from './context.ts';
import { runFloor } from './floor.ts';
import { runPromoteFloor } from './promote-floor.ts';
import { runLatency } from './latency.ts';
import { runWaiting } from './waiting.ts';
import { runOperator, type RunResult } from './operator-run.ts';
import { parseOptions } from './options.ts';
import { deleteNamespace } from './apps.ts';
import { runDelete, type DeleteResult } from './delete.ts';
import { runRestarts, type RestartResult } from './restart.ts';
import { meshAppSpec } from './rollout-plan.ts';
import { runRollouts, type RolloutsResult } from './rollouts.ts';
import {
  definitions, deleteDefinitions, latencyDefinitions, latencyTargets, printReport, reportTargets, restartDefinitions, rolloutsDefinitions, setup, targets, writeResults, type Report,
} from './report.ts';
import { gitState, sourceHash } from './source.ts';
import { PhaseError, phase, phaseNow, progress, secs } from './util.ts';

const root = resolve(import.meta.dirname, '..');

async function main(): Promise<number> {
  const argv = process.argv.slice(2);
  const parsed = parseOptions(argv);
  if ('report' in parsed) {
    const rep = JSON.parse(await readFile(parsed.report, 'utf8')) as Report;
    rep.targets = reportTargets(rep);
    printReport(rep);
    return 0;
  }
  const opts = parsed.run;
  const startedAt = new Date();
  const command = process.env['npm_lifecycle_event'] === 'bench' ? `npm run bench -- ${argv.join(' ')}` : `node bench/run.ts ${argv.join(' ')}`;
  const runsCount = opts.workers.length;
  // The rollouts scenario's apps (and its floor's) each run a canary pod beside their stable one.
  const pods = opts.apps * ((opts.floor ? 1 : 0) + runsCount) * (opts.scenario === 'rollouts' ? 2 : 1) + runsCount * opts.promoteSample * 2;
  const nodes = Math.ceil(pods / 4000) + 1;
  const { machine, versions } = await setup();
  const latencyScenario = opts.scenario === 'latency';
  // What importing costs is the convergence scenario's memory story; the other scenarios skip it.
  const imports = opts.scenario !== 'convergence' ? undefined : await phase('memory: what importing the operator\'s modules costs (fresh processes)', () => importCosts());
  progress(`benchmark: ${command}`);
  progress(`machine: ${String(machine['cores'])} cores (${String(machine['cpu'])}), ${String(machine['memoryGiB'])} GiB; load average ${String(machine['loadAtStart'])}`);
  progress(`versions: ${Object.entries(versions).map(([k, v]) => `${k} ${v}`).join(', ')}`);
  const git = await gitState();
  progress(`code: commit ${git.commit}${git.dirty.length ? ` + uncommitted changes in ${git.dirty.join(', ')}` : ''}`);

  const stamp = startedAt.toISOString().replace(/[-:]/g, '').replace(/\..*/, '').replace('T', '-');
  const base = join(opts.out, opts.scenario !== 'convergence' ? `bench-${opts.scenario}-${stamp}` : `bench-${opts.apps}apps-w${opts.workers.join('_')}-${stamp}`);
  // Operator logs and probe files are kept with the results (the stack's own logs go with its state dir).
  const logDir = `${base}-logs`;
  await mkdir(logDir, { recursive: true });
  const cleanups: Ctx['cleanups'] = [];
  let stack: RunStack | undefined;
  let stateDir: string | undefined;
  let tearingDown: Promise<void> | undefined;
  // Once only: on Ctrl-C and in main's finally alike, and main waits for a teardown the signal started (when the
  // interrupted phase fails first, main must not exit while the stack is half stopped).
  const teardown = () => (tearingDown ??= (async () => {
    for (const c of cleanups.splice(0).reverse()) await c().catch(() => undefined);
    if (!stateDir) return;
    if (!opts.keepStack) progress('tearing the stack down');
    if (stack) await stack.stop();
    // Interrupted while the stack was starting: its state folder is enough to stop what is up.
    else if (!opts.keepStack) await down(stateDir, { purge: true });
  })());
  let interrupted = false;
  const onSignal = (sig: NodeJS.Signals) => {
    if (interrupted) {
      console.error(`\n${sig} again: exiting without waiting${stateDir ? `; if servers are left, run: npm run stack -- --state-dir ${stateDir} down --purge` : ''}`);
      process.exit(130);
    }
    interrupted = true;
    console.error(`\n${sig} during "${phaseNow()}": stopping the operator and tearing the stack down (again to exit at once)`);
    void teardown().finally(() => process.exit(130));
  };
  process.on('SIGINT', onSignal);
  process.on('SIGTERM', onSignal);

  let api: ApiServer | undefined;
  try {
    stack = await phase(`stack up (${nodes} kwok nodes, podDelayMs ${opts.podDelayMs}) and the workflow code bundled (workflows/index.ts)`, () => startRunStack({
      prefix: 'app-operator-bench', workflowsPath: join(root, 'workflows', 'index.ts'), nodes, podDelayMs: opts.podDelayMs, keep: opts.keepStack,
      onStateDir: (dir) => {
        stateDir = dir;
      },
      print: (l) => progress(`  ${l.trim()}`),
    }));
    const bundleSource = await sourceHash();
    // The testkit's clients and operator processes find the stack through these.
    Object.assign(process.env, stack.env);
    const { info } = stack;
    await phase('extend the Service IP range (the stack\'s /24 holds ~250 ClusterIPs)', async () => {
      // The stack's --service-cluster-ip-range is 10.0.0.0/24; a second ServiceCIDR (GA since 1.33) adds 65k addresses.
      await kubectl(info, ['apply', '-f', '-'], JSON.stringify({ apiVersion: 'networking.k8s.io/v1', kind: 'ServiceCIDR', metadata: { name: 'bench-services' }, spec: { cidrs: ['10.96.0.0/16'] } }));
    });
    api = await ApiServer.connect(info);
    const operatorPids: Ctx['operatorPids'] = [];
    const load = new LoadSampler(() => [...stackPids(info), ...operatorPids], Number(machine['cores']));
    cleanups.push(() => Promise.resolve(load.stop()));
    const ctx: Ctx = { opts, info, api, kube: await kubeApi(), temporal: await temporalClient(), bundleSource, logDir, cleanups, load, operatorPids };

    if (opts.scenario === 'waiting') {
      const from = Date.now();
      const waiting = await runWaiting(ctx);
      const loadSummary = load.summary(from, Date.now());
      await mkdir(opts.out, { recursive: true });
      await writeFile(`${base}.json`, JSON.stringify({ command, startedAt: startedAt.toISOString(), machine, versions, code: { commit: git.commit, uncommitted: git.dirty }, load: loadSummary, waiting }, null, 2));
      console.log(`\nwaiting ${waiting.minutes} min, default settings (${String(machine['cores'])} cores, load ${JSON.stringify(loadSummary)}):`);
      for (const r of waiting.rollouts) console.log(`  ${r.name.padEnd(10)} ${String(r.eventsPerHour).padStart(6)} rollout events/hour, ${r.runs} run(s); Application workflow ${r.appEventsPerHour}/hour — ${r.what}`);
      console.log(`results: ${base}.json`);
      return 0;
    }
    if (latencyScenario) {
      const latency = await runLatency(ctx);
      const report: Report = {
        command, startedAt: startedAt.toISOString(), finishedAt: new Date().toISOString(), machine, versions,
        code: { commit: git.commit, uncommitted: git.dirty, bundleSource },
        options: { ...opts, nodes }, definitions: latencyDefinitions,
        floor: null, runs: [], latency, targets: latencyTargets(latency), files: [],
      };
      await writeResults(report, base, logDir);
      printReport(report);
      const parts = [latency.create, latency.update, latency.promote];
      return parts.every((p) => !p || p.errors.length === 0) ? 0 : 2;
    }

    if (opts.scenario === 'restart' || opts.scenario === 'delete' || opts.scenario === 'rollouts') {
      // The rollouts scenario's floor is the promote of its N canaries without an operator (bench/promote-floor.ts).
      const floor = opts.floor && opts.scenario !== 'rollouts' ? await runFloor(ctx) : null;
      const promoteFloor = opts.floor && opts.scenario === 'rollouts' ? await runPromoteFloor(ctx) : null;
      // The floor's namespace goes first, timed, so that the operator's run does not share the machine with it.
      const floorNamespace = floor?.namespace ?? promoteFloor?.namespace;
      const floorDeletion = floorNamespace ? await phase(`floor: delete namespace ${floorNamespace} until it is gone`, () => deleteNamespace(ctx, floorNamespace)) : null;
      let restart: RestartResult | undefined;
      let deletion: DeleteResult | undefined;
      let rollouts: RolloutsResult | undefined;
      const run = await runOperator(ctx, 1, floor, async (live) => {
        if (opts.scenario === 'restart') restart = await runRestarts(ctx, live);
        else if (opts.scenario === 'rollouts') rollouts = { ...await runRollouts(ctx, live), ...(promoteFloor ? { floor: promoteFloor } : {}) };
        else deletion = await runDelete(ctx, live, floorDeletion);
      }, opts.scenario === 'rollouts' ? meshAppSpec : undefined);
      const report: Report = {
        command, startedAt: startedAt.toISOString(), finishedAt: new Date().toISOString(), machine, versions,
        code: { commit: git.commit, uncommitted: git.dirty, bundleSource },
        options: { ...opts, nodes }, definitions: restart ? restartDefinitions : rollouts ? rolloutsDefinitions : deleteDefinitions,
        floor, runs: [run], ...(restart ? { restart } : {}), ...(deletion ? { deletion } : {}), ...(rollouts ? { rollouts } : {}), targets: [], files: [],
      };
      report.targets = reportTargets(report);
      await writeResults(report, base, logDir);
      printReport(report);
      // Like the other scenarios, a MISS is reported, not an exit code; what did not complete is.
      const completed = restart ? restart.cases.every((c) => c.idleSeconds !== null)
        : rollouts ? rollouts.promoteMs.length === rollouts.apps : deletion?.operator.seconds != null;
      return run.converged === run.apps && completed ? 0 : 2;
    }

    const floor = opts.floor ? await runFloor(ctx) : null;
    if (floor) progress(`floor: ${floor.makespanSeconds.toFixed(1)} s from the first create to ${floor.apps} Deployments available`);
    const runs: RunResult[] = [];
    for (const w of opts.workers) {
      const r = await runOperator(ctx, w, floor);
      runs.push(r);
      const d = r.latency;
      progress(`operator (${w}w): ${r.converged}/${r.apps} converged; p50 ${d ? secs(d.p50) : '-'} s, p99 ${d ? secs(d.p99) : '-'} s, makespan ${r.makespanSeconds.toFixed(1)} s${r.ratioToFloor ? ` (${r.ratioToFloor.toFixed(2)}x floor)` : ''}`);
    }

    const report: Report = {
      command, startedAt: startedAt.toISOString(), finishedAt: new Date().toISOString(), machine, versions,
      code: { commit: git.commit, uncommitted: git.dirty, bundleSource },
      options: { ...opts, nodes }, definitions,
      floor, runs, imports, targets: targets(opts, runs, floor), files: [],
    };
    const note = await writeResults(report, base, logDir);
    printReport(report);
    if (note) console.log(note);
    return runs.every((r) => r.converged === r.apps) ? 0 : 2;
  } catch (err) {
    const where = err instanceof PhaseError ? err.phase : phaseNow();
    console.error(`\nbenchmark failed in phase "${where}": ${err instanceof PhaseError ? (err.cause instanceof Error ? err.cause.message : String(err.cause)) : err instanceof Error ? err.message : String(err)}`);
    console.error(`operator logs: ${logDir}${stateDir ? `; the stack's server logs are in ${stateDir}/logs${opts.keepStack ? '' : ' (removed with the stack; --keep-stack keeps them)'}` : ''}`);
    return 1;
  } finally {
    api?.close();
    await closeTemporal().catch(() => undefined);
    await teardown();
  }
}

main().then((code) => process.exit(code), (err: unknown) => {
  console.error(`benchmark failed: ${err instanceof Error ? err.message : String(err)}`);
  process.exit(1);
});
