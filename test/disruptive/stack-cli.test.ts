// Disruptive: `npm run stack -- status | up | restart` against the run's real servers, with Prometheus as the one
// made to misbehave (nothing else in this phase needs it meanwhile). A server that runs but does not answer is not
// "up"; `up` right after a server was told to stop waits for it to go and starts it again; `restart` is a fault drill.
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { join, resolve } from 'node:path';
import { after, describe, it } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { eventually } from '../../lib/poll.ts';
import { isOurs } from '../../stack/processes.ts';
import { readStack, serverNames, status, type StackInfo } from '../../stack/stack.ts';
import { ownStack } from '../../testkit/env.ts';

const root = resolve(import.meta.dirname, '..', '..');

/**
 * Runs `npm run stack -- <args>` on the run's stack; resolves with its exit code and output. `seen` is what it has
 * printed so far, for a test that acts at a moment the command reports rather than after a guessed delay.
 */
function stackCli(info: StackInfo, args: string[], timeoutMs = 180_000, seen: { out: string } = { out: '' }): Promise<{ code: number; out: string }> {
  return new Promise((res) => {
    const child = spawn(process.execPath, [join(root, 'stack', 'cli.ts'), '--state-dir', info.stateDir, ...args], { cwd: root, timeout: timeoutMs });
    const take = (chunk: Buffer) => { seen.out += chunk.toString(); };
    child.stdout.on('data', take);
    child.stderr.on('data', take);
    child.on('close', (code) => res({ code: code ?? 1, out: seen.out }));
  });
}

const prometheusPid = async (info: StackInfo) => (await readStack(info.stateDir))!.servers.prometheus.pid!;
const row = (out: string, name: string) => out.split('\n').find((l) => l.startsWith(`${name} `)) ?? '';
const ready = async (info: StackInfo) => (await fetch(`${info.prometheusUrl}/-/ready`).catch(() => null))?.status === 200;

describe('the stack command against real servers', () => {
  let stopped: number | undefined;
  after(async () => {
    // A server left stopped by a failing test would fail every later test of the run: start it again.
    if (stopped) process.kill(stopped, 'SIGCONT');
    const info = await ownStack();
    await stackCli(info, ['up', '--headless']);
  });

  it('status: a server that runs but does not answer is unhealthy (exit 1), and up again once it answers', async () => {
    const info = await ownStack();
    const all = await stackCli(info, ['status']);
    assert.equal(all.code, 0, all.out);
    for (const name of serverNames) assert.match(row(all.out, name), /^\S+\s+up\s+pid \d+/, all.out);

    const pid = await prometheusPid(info);
    process.kill(pid, 'SIGSTOP');
    stopped = pid;
    const frozen = await stackCli(info, ['status']);
    process.kill(pid, 'SIGCONT');
    stopped = undefined;
    assert.equal(frozen.code, 1, frozen.out);
    assert.match(row(frozen.out, 'prometheus'), new RegExp(`^prometheus\\s+unhealthy\\s+pid ${pid}\\s+ports \\d+\\s+GET ${info.prometheusUrl}/-/ready: no answer within 3 s`), frozen.out);
    assert.match(row(frozen.out, 'etcd'), /^etcd\s+up\s/, 'the others are up');

    await eventually('prometheus up again', async () => ((await status(info.stateDir))!.every((r) => r.state === 'up') ? true : undefined), { timeoutMs: 30_000 });
  });

  it('up: waits for a server that was told to stop, then starts it again', async () => {
    const info = await ownStack();
    const pid = await prometheusPid(info);
    // Frozen with SIGTERM pending: it runs, does not answer, and exits as soon as it may (a server shutting down).
    process.kill(pid, 'SIGSTOP');
    stopped = pid;
    process.kill(pid, 'SIGTERM');
    const seen = { out: '' };
    const upping = stackCli(info, ['up', '--headless'], 180_000, seen);
    // Up checks the servers in turn (a loaded machine makes that slow): thaw Prometheus once up says it waits for it.
    await eventually('up waits for the frozen Prometheus', () => Promise.resolve(seen.out.includes(`prometheus (pid ${pid}) runs but is not healthy`) ? true : undefined), { timeoutMs: 120_000 });
    await sleep(500);
    assert.ok(isOurs(pid, info.servers.prometheus.command), 'still there while up waits');
    process.kill(pid, 'SIGCONT');
    stopped = undefined;
    const up = await upping;
    assert.equal(up.code, 0, up.out);
    assert.match(up.out, new RegExp(`prometheus \\(pid ${pid}\\) runs but is not healthy \\(.*\\): waiting up to 60 s for it to exit`), up.out);
    assert.match(up.out, new RegExp(`prometheus \\(pid ${pid}\\) exited; starting it again`), up.out);
    const now = await prometheusPid(info);
    assert.notEqual(now, pid, 'a new Prometheus');
    assert.ok(await ready(info), 'and it answers');
  });

  it('restart: stops a server (here with SIGKILL), leaves it down, and starts it again on the same port', async () => {
    const info = await ownStack();
    const pid = await prometheusPid(info);
    const t0 = Date.now();
    const r = await stackCli(info, ['restart', 'prometheus', '--signal', 'KILL', '--down-seconds', '2']);
    assert.equal(r.code, 0, r.out);
    assert.ok(Date.now() - t0 >= 2000, 'it stayed down for the time asked');
    assert.match(r.out, new RegExp(`prometheus stopped \\(pid ${pid}, SIGKILL\\)`), r.out);
    assert.match(r.out, /prometheus up \(pid \d+\)/, r.out);
    assert.ok(!isOurs(pid, info.servers.prometheus.command), 'the old process is gone');
    assert.notEqual(await prometheusPid(info), pid);
    assert.ok(await ready(info), `answers on the same address ${info.prometheusUrl}`);
  });

  it('restart: an unknown server or signal is refused and names the choices', async () => {
    const info = await ownStack();
    const server = await stackCli(info, ['restart', 'apiserver']);
    assert.equal(server.code, 1);
    assert.match(server.out, /no server "apiserver" in the stack; one of: etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kwok, temporal, prometheus/);
    const signal = await stackCli(info, ['restart', 'prometheus', '--signal', 'NOPE']);
    assert.equal(signal.code, 1);
    assert.match(signal.out, /--signal NOPE: not a signal/);
  });
});
