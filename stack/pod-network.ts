// The network namespace a stack's pods "live" in. The API server refuses loopback addresses in EndpointSlices, so pod
// addresses must be real ones, and the only real addresses this project may send to are inside a namespace it creates
// itself. Per stack: a namespace, a veth pair with one end inside, the stack's pod slice made local inside it
// (`ip route add local <slice> dev lo`: a server there may bind or accept on any pod address) and routed to it on the
// host (`ip route add <slice> dev <host end>`). The host route is also the claim on the slice: the kernel refuses a
// second route to the same prefix, so two stacks starting at once cannot take the same slice.
import { execFile } from 'node:child_process';
import { createHash } from 'node:crypto';
import { promisify } from 'node:util';
import { freeSlices, overlaps, podPool, slicePrefix, slicesOf } from './pod-cidr.ts';

const exec = promisify(execFile);

/** The names of one stack's namespace and veth ends, derived from its state folder so a rerun finds its leftovers. */
export interface PodNetworkNames {
  netns: string;
  hostVeth: string;
  nsVeth: string;
}

/** Everything that makes up one stack's pod network. */
export interface PodNetwork extends PodNetworkNames {
  podCidr: string;
}

/** Names for the stack in `stateDir` (an absolute path): `aop-<hash>`, and veth ends `aop<hash>h` / `aop<hash>n` (15 characters at most). */
export function podNetworkNames(stateDir: string): PodNetworkNames {
  const hash = createHash('sha256').update(stateDir).digest('hex').slice(0, 8);
  return { netns: `aop-${hash}`, hostVeth: `aop${hash}h`, nsVeth: `aop${hash}n` };
}

async function ip(args: string[]): Promise<string> {
  try {
    return (await exec('ip', args, { timeout: 15_000 })).stdout;
  } catch (err) {
    const e = err as Error & { stderr?: string; code?: string | number };
    if (e.code === 'ENOENT') throw new Error('the data plane needs the `ip` command (iproute2)', { cause: err });
    const why = (e.stderr ?? e.message).trim();
    const hint = /Operation not permitted/.test(why) ? ' (the data plane needs root, or CAP_NET_ADMIN and CAP_SYS_ADMIN, for network namespaces)' : '';
    throw new Error(`ip ${args.join(' ')}: ${why}${hint}`, { cause: err });
  }
}

/** ip, treating "does not exist" as done (for removals). */
async function ipIfPresent(args: string[]): Promise<void> {
  await ip(args).catch((err: unknown) => {
    if (!/Cannot find device|No such file|No such process|does not exist|Cannot open network namespace/.test((err as Error).message)) throw err;
  });
}

async function netnsExists(name: string): Promise<boolean> {
  return (await ip(['netns', 'list'])).split('\n').some((l) => l.split(' ')[0] === name);
}

/** Destinations of the host's main routing table (`default`, `a.b.c.d/n` or a single address). */
async function hostRouteDestinations(): Promise<{ dst: string; dev?: string }[]> {
  return JSON.parse((await ip(['-j', 'route', 'show', 'table', 'main'])) || '[]') as { dst: string; dev?: string }[];
}

/** What is wrong with the network, or undefined when namespace, veth, host route and local route are all in place. */
export async function podNetworkProblem(net: PodNetwork): Promise<string | undefined> {
  if (!(await netnsExists(net.netns))) return `network namespace ${net.netns} is missing`;
  const link = JSON.parse((await ip(['-j', 'link', 'show', 'dev', net.hostVeth]).catch(() => '[]')) || '[]') as { operstate?: string }[];
  if (link[0]?.operstate !== 'UP') return `veth ${net.hostVeth} is ${link[0] ? link[0].operstate ?? 'down' : 'missing'}`;
  const route = (await hostRouteDestinations()).find((r) => r.dst === net.podCidr);
  if (route?.dev !== net.hostVeth) return `the host routes ${net.podCidr} ${route ? `to ${route.dev ?? 'elsewhere'}` : 'nowhere'}, not to ${net.hostVeth}`;
  const local = await ip(['-n', net.netns, 'route', 'show', 'table', 'local', net.podCidr]);
  if (!local.includes('dev lo')) return `${net.podCidr} is not local inside ${net.netns}`;
  return undefined;
}

/**
 * Creates the namespace and veth pair, claims `podCidr` (or, when undefined, the first free slice of the pool) with
 * the host route, and makes the slice local inside. Leftovers of the same names (a crashed run) are removed first.
 * On any failure what was created is removed again. Returns the network with the slice it got.
 */
export async function createPodNetwork(names: PodNetworkNames, podCidr: string | undefined): Promise<PodNetwork> {
  await removePodNetwork({ ...names, podCidr: podCidr ?? '' });
  await ip(['netns', 'add', names.netns]);
  try {
    await ip(['link', 'add', names.hostVeth, 'type', 'veth', 'peer', 'name', names.nsVeth, 'netns', names.netns]);
    await ip(['link', 'set', names.hostVeth, 'up']);
    await ip(['-n', names.netns, 'link', 'set', 'lo', 'up']);
    await ip(['-n', names.netns, 'link', 'set', names.nsVeth, 'up']);
    // Answers go back to whichever host address the client used, always over the veth: the host is the only peer.
    await ip(['-n', names.netns, 'route', 'add', 'default', 'dev', names.nsVeth]);
    const cidr = await claimSlice(names.hostVeth, podCidr);
    await ip(['-n', names.netns, 'route', 'add', 'local', cidr, 'dev', 'lo']);
    return { ...names, podCidr: cidr };
  } catch (err) {
    await removePodNetwork({ ...names, podCidr: podCidr ?? '' }).catch(() => undefined);
    throw err;
  }
}

/** Adds the host route for `wanted`, or for the first free slice; the kernel's refusal of a duplicate prefix makes this the lock. */
async function claimSlice(hostVeth: string, wanted: string | undefined): Promise<string> {
  const routes = await hostRouteDestinations();
  if (wanted) {
    const holder = routes.find((r) => r.dst === wanted);
    if (holder) throw new Error(`this stack's pod range ${wanted} is routed to ${holder.dev ?? 'another device'} (another stack took it while this one was down); stop that stack, or start this one afresh with \`down --purge\``);
    await ip(['route', 'add', wanted, 'dev', hostVeth]);
    return wanted;
  }
  const free = freeSlices(routes.map((r) => r.dst));
  for (const slice of free) {
    try {
      await ip(['route', 'add', slice, 'dev', hostVeth]);
      return slice;
    } catch (err) {
      // Another stack claimed it between the listing and now: try the next one.
      if (!/File exists/.test((err as Error).message)) throw err;
    }
  }
  const stacks = routes.filter((r) => r.dev?.startsWith('aop')).map((r) => `${r.dst} (${r.dev})`);
  const others = routes.filter((r) => r.dst !== 'default' && !r.dev?.startsWith('aop') && slicesOf(podPool, slicePrefix).some((s) => overlaps(s, r.dst.includes('/') ? r.dst : `${r.dst}/32`)));
  throw new Error(`no pod range of ${podPool} is free: ${free.length ? 'the free ones were claimed meanwhile; try again' : ''}`
    + `${stacks.length ? `taken by running stacks: ${stacks.join(', ')} (stop one with npm run stack -- --state-dir <dir> down)` : ''}`
    + `${others.length ? `${stacks.length ? '; ' : ''}overlapping this machine's routes: ${others.map((r) => `${r.dst} dev ${r.dev ?? '?'}`).join(', ')}` : ''}`);
}

/**
 * Removes the host route, the veth pair and the namespace, killing what still runs inside (a pod server left by a
 * crash: the namespace lives on while a process is in it). Parts already gone are skipped.
 */
export async function removePodNetwork(net: PodNetwork): Promise<void> {
  if (await netnsExists(net.netns)) {
    const pids = (await ip(['netns', 'pids', net.netns]).catch(() => '')).split('\n').map(Number).filter((p) => p > 0);
    for (const pid of pids) {
      try {
        process.kill(pid, 'SIGKILL');
      } catch {
        // already gone
      }
    }
  }
  if (net.podCidr) await ipIfPresent(['route', 'del', net.podCidr, 'dev', net.hostVeth]);
  await ipIfPresent(['link', 'del', net.hostVeth]);
  await ipIfPresent(['netns', 'del', net.netns]);
}
