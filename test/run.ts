// The test command: one stack per run shared by every test file (started here on free ports, or reused when
// STACK_STATE_DIR names a running one), workflow code bundled once, then node's test runner over all files.
// SIGTERM or SIGINT (a CI timeout, Ctrl-C) stops everything the run started and exits non-zero: each child runs in
// a process group of its own, which holds the test files and every process they spawn (operators, servers of their
// own), and the whole group is signalled, then killed after a grace period; the stack's servers, started detached,
// are stopped by the pids recorded in its state folder; no further phase starts.
import { spawn, type ChildProcess } from 'node:child_process';
import { readdirSync, readFileSync } from 'node:fs';
import { mkdtemp, readFile } from 'node:fs/promises';
import { constants, tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { startRunStack, type RunStack } from '../testkit/stack.ts';

const root = resolve(import.meta.dirname, '..');
const args = process.argv.slice(2);
// Disruptive tests restart shared servers, so they run after the rest, one file at a time; chosen files too.
const disruptive = (p: string) => p.includes('test/disruptive/');
const chosen = args.length ? args : ['test/unit/**/*.test.ts', 'test/workflows/**/*.test.ts', 'test/integration/**/*.test.ts', 'test/disruptive/**/*.test.ts'];
const phases: { patterns: string[]; concurrency: string }[] = [
  { patterns: chosen.filter((p) => !disruptive(p)), concurrency: process.env['TEST_CONCURRENCY'] ?? '3' },
  { patterns: chosen.filter(disruptive), concurrency: '1' },
].filter((ph) => ph.patterns.length > 0);

/** How long the processes of a child's group get to stop after the signal before they are killed. */
const graceMs = 15_000;

/** Set by the first SIGTERM or SIGINT: the run stops what it started and starts nothing more. */
const interrupted = new AbortController();
/** The process groups of the children running now (each child leads its own). */
const groups = new Set<number>();

/** Known once the run's stack has a state folder (or reuses one); until then, while `building`, only the build's compilers run. */
let stackStateDir: string | undefined;
let building = false;

function onSignal(signal: NodeJS.Signals): void {
  if (!stackStateDir && groups.size === 0 && building) {
    // The build compiles into staging folders renamed only once complete: stopping here leaves nothing half-built.
    console.error(`\n${signal} while building the stack's servers: nothing else was started; exiting (a compiler already running may finish in the background)`);
    process.exit(128 + constants.signals[signal]);
  }
  if (interrupted.signal.aborted) {
    console.error(`\n${signal} again: killing the test processes now`);
    for (const g of groups) signalGroup(g, 'SIGKILL');
    return;
  }
  interrupted.abort(signal);
  console.error(`\n${signal}: stopping the test processes and the run's stack; no further phase starts`);
  for (const g of groups) signalGroup(g, signal);
}

/** Sends a signal to every process of a group; a group already gone is no error. */
function signalGroup(pgid: number, signal: NodeJS.Signals): void {
  try {
    process.kill(-pgid, signal);
  } catch {
    // no process left in it
  }
}

/**
 * Runs a command as the leader of a new process group and resolves with its exit code once it and every process of
 * its group are gone: what is left when it exits, or after an interruption, gets SIGTERM and graceMs to stop, then
 * SIGKILL. A test file's operator must not outlive the run (orphaned to init, it would go on reconciling against a
 * stack that is gone).
 */
function runGroup(command: string, argv: string[], opts: { env?: Record<string, string> }): Promise<number> {
  return new Promise<number>((res) => {
    const child: ChildProcess = spawn(command, argv, { cwd: root, env: opts.env ?? process.env, stdio: 'inherit', detached: true });
    const pgid = child.pid;
    if (pgid === undefined) {
      child.on('error', (err) => {
        console.error(`${command}: ${err.message}`);
        res(1);
      });
      return;
    }
    groups.add(pgid);
    // A signal that came while spawning reaches this group too.
    if (interrupted.signal.aborted) signalGroup(pgid, interrupted.signal.reason as NodeJS.Signals);
    child.on('close', (code, signal) => {
      void (async () => {
        // A test that leaked a process (an operator it did not stop) leaves it in the group: it goes too.
        if (!interrupted.signal.aborted && liveMembers(pgid).length > 0) {
          console.error(`processes of ${command} (group ${pgid}) still running after it exited: stopping them`);
          signalGroup(pgid, 'SIGTERM');
        }
        await drainGroup(pgid);
        groups.delete(pgid);
        res(code ?? (signal ? 128 + constants.signals[signal] : 1));
      })();
    });
  });
}

/** The processes of a group still running (a zombie has ended; only its parent's wait is missing). */
function liveMembers(pgid: number): number[] {
  const out: number[] = [];
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const stat = readFileSync(`/proc/${entry}/stat`, 'utf8');
      // Fields after the command (which may hold spaces, within parentheses): state, ppid, pgrp, ...
      const [state, , pgrp] = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
      if (Number(pgrp) === pgid && state !== 'Z') out.push(Number(entry));
    } catch {
      // gone meanwhile
    }
  }
  return out;
}

/** Waits until no process of the group runs, killing what is left after graceMs. */
async function drainGroup(pgid: number): Promise<void> {
  const deadline = Date.now() + graceMs;
  while (liveMembers(pgid).length > 0 && Date.now() < deadline) await sleep(100);
  const left = liveMembers(pgid);
  if (left.length === 0) return;
  console.error(`processes of test group ${pgid} still running after ${graceMs / 1000} s (${left.join(', ')}): killing them`);
  signalGroup(pgid, 'SIGKILL');
  const killDeadline = Date.now() + 5000;
  while (liveMembers(pgid).length > 0 && Date.now() < killDeadline) await sleep(50);
}

async function main(): Promise<number> {
  const needsStack = phases.some((ph) => ph.patterns.some((p) => !p.startsWith('test/unit')));
  let stack: RunStack | undefined;
  const env: Record<string, string> = { ...process.env } as Record<string, string>;
  try {
    // The browser tests need Debian's Chromium: installed here when missing, so that this command alone sets a fresh
    // machine up (the script says why when it cannot; the browser tests then fail and say so too).
    if (phases.some((ph) => ph.patterns.some((p) => p.includes('test/integration')))) await runGroup('bash', [join(root, 'scripts', 'ensure-chromium.sh')], {});
    if (needsStack && !interrupted.signal.aborted) {
      const reuse = process.env['STACK_STATE_DIR'];
      stackStateDir = reuse;
      building = !reuse;
      stack = await startRunStack({
        prefix: 'app-operator-test', workflowsPath: join(root, 'test', 'fixtures', 'bundle.ts'),
        reuse, keep: Boolean(process.env['KEEP_STACK']), signal: interrupted.signal,
        // The traffic tests send real requests through the proxy to the pods (test/integration/dataplane.test.ts).
        dataPlane: true,
        // The tracing tests find the operator's, the API server's and etcd's spans in Jaeger (test/integration/tracing.test.ts).
        tracing: true,
        onStateDir: (dir) => {
          stackStateDir = dir;
          building = false;
        },
      });
      Object.assign(env, stack.env);
    }
    let exit = 0;
    const totals = { pass: 0, fail: 0, skipped: 0 };
    const tapDir = await mkdtemp(join(tmpdir(), 'app-operator-tap-'));
    for (const [i, phase] of phases.entries()) {
      if (interrupted.signal.aborted) break;
      const tapFile = join(tapDir, `phase-${i}.tap`);
      const code = await runTests(phase.patterns, phase.concurrency, env, tapFile);
      if (code !== 0) exit = code;
      const tap = await readFile(tapFile, 'utf8').catch(() => '');
      for (const key of ['pass', 'fail', 'skipped'] as const) totals[key] += Number(new RegExp(`^# ${key} (\\d+)$`, 'm').exec(tap)?.[1] ?? 0);
    }
    if (interrupted.signal.aborted) return interruptedExit();
    // One closing line for the whole run (the runner prints one summary per phase).
    console.log(`\n${totals.pass} passed, ${totals.fail} failed${totals.skipped ? `, ${totals.skipped} skipped` : ''}`);
    if (totals.pass === 0 && exit === 0) exit = 1;
    return exit;
  } catch (err) {
    if (interrupted.signal.aborted) return interruptedExit();
    throw err;
  } finally {
    await stack?.stop();
  }
}

/** The exit code of a run cut short by a signal: 128 plus its number, as a shell reports it. */
function interruptedExit(): number {
  const signal = interrupted.signal.reason as NodeJS.Signals;
  console.error(`test run interrupted by ${signal}: every process it started is stopped`);
  return 128 + constants.signals[signal];
}

function runTests(patterns: string[], concurrency: string, env: Record<string, string>, tapFile: string): Promise<number> {
  return runGroup(process.execPath, [
    '--test', `--test-concurrency=${concurrency}`, '--test-timeout=600000',
    '--test-reporter=spec', '--test-reporter-destination=stdout', '--test-reporter=tap', `--test-reporter-destination=${tapFile}`,
    ...patterns,
  ], { env });
}

process.on('SIGINT', onSignal);
process.on('SIGTERM', onSignal);
main().then((code) => process.exit(code), (err: unknown) => {
  console.error(`test run failed: ${err instanceof Error ? err.message : String(err)}`);
  process.exit(1);
});
