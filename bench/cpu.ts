// CPU time by component over a window, from /proc: each stack server and operator process by pid, the benchmark
// itself, and the whole machine (so the share of other work on a shared machine is visible).
import { readFileSync } from 'node:fs';
import type { StackInfo } from '../stack/stack.ts';

const TICKS_PER_SECOND = 100; // USER_HZ on Linux

export type CpuSnapshot = Record<string, number>;

function processSeconds(pid: number | undefined): number | undefined {
  if (!pid) return undefined;
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    // Fields after the command (which may contain spaces) start at state; utime and stime are fields 14 and 15.
    const rest = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    return (Number(rest[11]) + Number(rest[12])) / TICKS_PER_SECOND;
  } catch {
    return undefined;
  }
}

function machineBusySeconds(): number {
  try {
    const line = readFileSync('/proc/stat', 'utf8').split('\n')[0] ?? '';
    const v = line.trim().split(/\s+/).slice(1).map(Number);
    // user nice system idle iowait irq softirq steal (guest time is already in user)
    const busy = (v[0] ?? 0) + (v[1] ?? 0) + (v[2] ?? 0) + (v[5] ?? 0) + (v[6] ?? 0) + (v[7] ?? 0);
    return busy / TICKS_PER_SECOND;
  } catch {
    return 0;
  }
}

/** CPU seconds used so far by each named pid (pids of one name are summed), this process ("bench") and the machine ("machine"). */
export function cpuSnapshot(pids: [string, number | undefined][]): CpuSnapshot {
  const out: CpuSnapshot = {};
  for (const [name, pid] of pids) {
    const s = processSeconds(pid);
    if (s !== undefined) out[name] = (out[name] ?? 0) + s;
  }
  const u = process.cpuUsage();
  out['bench'] = (u.user + u.system) / 1e6;
  out['machine'] = machineBusySeconds();
  return out;
}

/** CPU seconds used in a window; "others" is the machine's busy time not used by any measured process. */
export function cpuDelta(after: CpuSnapshot, before: CpuSnapshot): CpuSnapshot {
  const out: CpuSnapshot = {};
  for (const [k, v] of Object.entries(after)) if (before[k] !== undefined) out[k] = Math.max(0, v - before[k]);
  const ours = Object.entries(out).filter(([k]) => k !== 'machine').reduce((n, [, v]) => n + v, 0);
  out['others'] = Math.max(0, (out['machine'] ?? 0) - ours);
  return out;
}

/** The stack's servers by pid, for CPU accounting. */
export function stackPids(info: StackInfo): [string, number | undefined][] {
  return [
    ['apiserver', info.servers['kube-apiserver'].pid], ['etcd', info.servers.etcd.pid], ['controller-manager', info.servers['kube-controller-manager'].pid],
    ['scheduler', info.servers['kube-scheduler'].pid], ['kwok', info.servers.kwok.pid], ['temporal', info.servers.temporal.pid],
  ];
}
