// `npm test` (test/run.ts) interrupted as a CI timeout interrupts it: SIGTERM must stop every process and server the
// run started (the test files' operators too, which the test processes spawn) and exit non-zero without starting
// the next phase. Every process the run starts inherits a marker in its environment, so "none is left" is checked
// by looking at every process on the machine.
import assert from 'node:assert/strict';
import { spawn, type ChildProcess } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { existsSync, openSync, closeSync, readdirSync, readFileSync } from 'node:fs';
import { mkdir, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { after, describe, it } from 'node:test';
import { eventually } from '../../lib/poll.ts';
import { down, readStack } from '../../stack/stack.ts';

const root = resolve(import.meta.dirname, '..', '..');
const holdFixture = join(root, 'test', 'fixtures', 'runner-hold.ts');

/** The pids of the processes whose environment carries the marker (zombies have none to read). */
function marked(mark: string): number[] {
  const out: number[] = [];
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      if (readFileSync(`/proc/${entry}/environ`, 'utf8').split('\0').includes(`RUNNER_TEST_MARK=${mark}`)) out.push(Number(entry));
    } catch {
      // gone meanwhile, or not ours to read
    }
  }
  return out;
}

function commandOf(pid: number): string {
  try {
    return readFileSync(`/proc/${pid}/cmdline`, 'utf8').replaceAll('\0', ' ').trim();
  } catch {
    return '?';
  }
}

/** Runs test/run.ts on chosen files with the marker set; its output goes to a file. */
function runner(files: string[], env: Record<string, string | undefined>, logFile: string): { child: ChildProcess; exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }> } {
  const fd = openSync(logFile, 'a');
  // Without NODE_TEST_CONTEXT, which tells node --test that it runs inside a test file (it would then run nothing).
  const child = spawn(process.execPath, [join(root, 'test', 'run.ts'), ...files], { cwd: root, env: { ...env, NODE_TEST_CONTEXT: undefined }, stdio: ['ignore', fd, fd] });
  closeSync(fd);
  return { child, exited: new Promise((r) => child.once('exit', (code, signal) => r({ code, signal }))) };
}

async function within<T>(ms: number, what: string, p: Promise<T>, log: string): Promise<T> {
  const timeout = new Promise<'timeout'>((r) => setTimeout(() => r('timeout'), ms).unref());
  const out = await Promise.race([p, timeout]);
  if (out === 'timeout') assert.fail(`${what} not within ${ms / 1000} s; runner output:\n${(await readFile(log, 'utf8').catch(() => '')).slice(-3000)}`);
  return out;
}

describe('the test runner interrupted', () => {
  const marks: string[] = [];
  const stateDirs: string[] = [];
  after(async () => {
    // Whatever a failing runner left behind goes now, so that a failure here does not load the rest of the run.
    for (const mark of marks) for (const pid of marked(mark)) process.kill(pid, 'SIGKILL');
    for (const dir of stateDirs) await down(dir, { purge: true }).catch(() => undefined);
  });

  it('stops the test processes and their operators on SIGTERM, exits 143 and starts no further phase', async () => {
    const mark = randomUUID();
    marks.push(mark);
    const dir = await mkdtemp(join(tmpdir(), 'runner-test-'));
    const ready = join(dir, 'operator.pid');
    const secondPhaseRan = join(dir, 'second-phase-ran');
    // A file of the disruptive phase, which must never start: its path is what makes it disruptive.
    const secondPhase = join(dir, 'test', 'disruptive', 'second-phase.mts');
    await mkdir(join(dir, 'test', 'disruptive'), { recursive: true });
    await writeFile(secondPhase, `import { writeFileSync } from 'node:fs';\nwriteFileSync(${JSON.stringify(secondPhaseRan)}, 'ran');\n`);
    const log = join(dir, 'runner.log');
    // The run reuses this run's stack (STACK_STATE_DIR), which it must leave running.
    const { child, exited } = runner([holdFixture, secondPhase], { ...process.env, RUNNER_TEST_MARK: mark, RUNNER_HOLD_READY: ready, KEEP_STACK: undefined }, log);

    const operatorPid = Number(await within(120_000, 'the fixture\'s operator started', eventually('operator pid', async () => /^\d+$/.exec(await readFile(ready, 'utf8').catch(() => ''))?.[0], { timeoutMs: 120_000 }), log));
    const before = marked(mark);
    assert.ok(before.includes(operatorPid), `the operator (pid ${operatorPid}) is one of the run's processes: ${before.join(', ')}`);
    assert.ok(before.length >= 4, `the runner, node --test, the test file and the operator at least: ${before.map(commandOf).join(' | ')}`);

    child.kill('SIGTERM');
    const { code, signal } = await within(30_000, 'the runner exited', exited, log);
    assert.deepEqual({ code, signal }, { code: 143, signal: null }, await readFile(log, 'utf8'));
    const left = marked(mark);
    assert.deepEqual(left.map((pid) => `${pid} ${commandOf(pid)}`), [], 'no process of the run is left');
    assert.ok(!existsSync(secondPhaseRan), 'the disruptive phase did not start');
    const stateDir = process.env['STACK_STATE_DIR'];
    assert.ok(stateDir && (await readStack(stateDir)), 'the reused stack is still there');
    await rm(dir, { recursive: true, force: true });
  });

  it('stops the servers of a stack it was starting on SIGTERM and removes its state folder', async () => {
    const mark = randomUUID();
    marks.push(mark);
    const dir = await mkdtemp(join(tmpdir(), 'runner-test-'));
    const log = join(dir, 'runner.log');
    // No STACK_STATE_DIR: the run starts a stack of its own.
    const { child, exited } = runner([holdFixture], { ...process.env, RUNNER_TEST_MARK: mark, RUNNER_HOLD_READY: join(dir, 'unused'), STACK_STATE_DIR: undefined, KEEP_STACK: undefined }, log);

    const stateDir = await within(120_000, 'the run\'s stack folder', eventually('the stack folder in the runner\'s output', async () => {
      return /starting a stack for this run in (\S+)/.exec(await readFile(log, 'utf8'))?.[1];
    }, { timeoutMs: 120_000 }), log);
    stateDirs.push(stateDir);
    // Interrupted while the API server starts: etcd is up and the API server's pid is recorded.
    await within(60_000, 'kube-apiserver starting', eventually('kube-apiserver started', async () => (await readStack(stateDir))?.servers['kube-apiserver'].pid, { timeoutMs: 60_000 }), log);
    const servers = marked(mark).filter((pid) => !commandOf(pid).includes('node'));
    assert.ok(servers.length >= 2, `etcd and kube-apiserver run: ${servers.map(commandOf).join(' | ')}`);

    child.kill('SIGTERM');
    const { code, signal } = await within(40_000, 'the runner exited', exited, log);
    assert.deepEqual({ code, signal }, { code: 143, signal: null }, await readFile(log, 'utf8'));
    assert.deepEqual(marked(mark).map((pid) => `${pid} ${commandOf(pid)}`), [], 'no server of the half-started stack is left');
    assert.ok(!existsSync(stateDir), `the state folder ${stateDir} is removed`);
    await rm(dir, { recursive: true, force: true });
  });
});
