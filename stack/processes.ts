import { spawn } from 'node:child_process';
import { closeSync, openSync, readFileSync } from 'node:fs';
import { readFile } from 'node:fs/promises';
import { setTimeout as sleep } from 'node:timers/promises';
import { eventually, StopPolling } from '../lib/poll.ts';

/** How to (re)start one server of the stack; kept in the state file so any process can restart it. */
export interface ServerSpec {
  name: string;
  command: string;
  args: string[];
  log: string;
  ports: number[];
}

/** Starts a server detached from this process (it outlives a test runner or the CLI), logging to its file. */
export function startDetached(spec: ServerSpec): number {
  const fd = openSync(spec.log, 'a');
  try {
    const child = spawn(spec.command, spec.args, { detached: true, stdio: ['ignore', fd, fd] });
    child.unref();
    if (child.pid === undefined) throw new Error(`could not start ${spec.name} (${spec.command})`);
    return child.pid;
  } finally {
    closeSync(fd);
  }
}

/** True when pid is alive and is still the program we started (pids get reused). */
export function isOurs(pid: number | undefined, command: string): boolean {
  if (!pid) return false;
  try {
    process.kill(pid, 0);
  } catch {
    return false;
  }
  try {
    const cmdline = readFileSync(`/proc/${pid}/cmdline`, 'utf8');
    if (cmdline.length === 0) return false;
    return cmdline.split('\0')[0] === command;
  } catch {
    return false;
  }
}

/** True while pid runs (not a zombie). Right after spawn the child may not have exec'd its program yet, so start-up checks use this rather than isOurs. */
export function isAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
  } catch {
    return false;
  }
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    return stat.slice(stat.lastIndexOf(')') + 2, stat.lastIndexOf(')') + 3) !== 'Z';
  } catch {
    return false;
  }
}

/** Stops a server we started: the signal to its process group, then SIGKILL after the grace period. */
export async function stopPid(pid: number, command: string, signal: NodeJS.Signals = 'SIGTERM', graceMs = 10_000): Promise<void> {
  if (!isOurs(pid, command)) return;
  const kill = (sig: NodeJS.Signals) => {
    try {
      process.kill(-pid, sig);
    } catch {
      try {
        process.kill(pid, sig);
      } catch {
        // already gone
      }
    }
  };
  kill(signal);
  const deadline = Date.now() + graceMs;
  while (isOurs(pid, command) && Date.now() < deadline) await sleep(100);
  if (isOurs(pid, command)) {
    kill('SIGKILL');
    while (isOurs(pid, command)) await sleep(50);
  }
}

/**
 * Polls check() until it returns true; fails early with the log tail when the server died, at once when `signal`
 * aborts (a Ctrl-C of `up`), or on timeout.
 */
export async function waitFor(what: string, check: () => Promise<boolean>, opts: { timeoutMs: number; pid?: number; log?: string; signal?: AbortSignal | undefined }): Promise<void> {
  try {
    await eventually(what, async () => {
      if (opts.signal?.aborted) throw new StopPolling(`stopped while waiting for ${what}`);
      if (opts.pid !== undefined && !isAlive(opts.pid)) throw new StopPolling(`${what} exited during start-up.${await logTail(opts.log)}`);
      return (await check()) ? true : undefined;
    }, { timeoutMs: opts.timeoutMs, intervalMs: 250 });
  } catch (err) {
    if (err instanceof StopPolling) throw new Error(err.message, { cause: err });
    throw new Error(`${what} not ready after ${opts.timeoutMs / 1000} s (${(err as Error).message}).${await logTail(opts.log)}`, { cause: err });
  }
}

async function logTail(log: string | undefined): Promise<string> {
  if (!log) return '';
  const text = await readFile(log, 'utf8').catch(() => '');
  return `\n--- last lines of ${log} ---\n${text.split('\n').slice(-20).join('\n')}`;
}
