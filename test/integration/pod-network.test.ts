// The pod network of a stack's data plane on the real kernel (as root): concurrent stacks get their own slices and
// namespaces, a request reaches only the namespace whose slice it is addressed to, a crashed run's leftovers do not
// stop the next start, and removal leaves nothing behind.
import assert from 'node:assert/strict';
import { spawn, execFile, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { request } from 'node:http';
import { after, describe, it } from 'node:test';
import { promisify } from 'node:util';
import { eventually } from '../../lib/poll.ts';
import { overlaps, podPool } from '../../stack/pod-cidr.ts';
import { createPodNetwork, podNetworkNames, podNetworkProblem, removePodNetwork, type PodNetwork } from '../../stack/pod-network.ts';

const exec = promisify(execFile);
const stateDir = () => `/tmp/pod-network-test-${randomBytes(4).toString('hex')}`;
const hostRoutes = async () => (await exec('ip', ['route', 'show', 'table', 'main'])).stdout;
const namespaces = async () => (await exec('ip', ['netns', 'list'])).stdout;

/** The n-th address of a slice (10.244.64.0/18, 5 -> 10.244.64.5). */
function addressIn(cidr: string, n: number): string {
  const [a, b, c, d] = cidr.split('/')[0]!.split('.').map(Number) as [number, number, number, number];
  return `${a}.${b}.${c}.${d + n}`;
}

/** A GET from the host; resolves with the body, or the error code (ECONNREFUSED) when nothing answers. */
function get(ip: string, port: number): Promise<string> {
  return new Promise((resolve) => {
    const req = request({ host: ip, port, path: '/', timeout: 5000 }, (res) => {
      let body = '';
      res.on('data', (d: Buffer) => (body += d.toString()));
      res.on('end', () => resolve(body));
    });
    req.on('timeout', () => req.destroy(Object.assign(new Error('timeout'), { code: 'TIMEOUT' })));
    req.on('error', (err: NodeJS.ErrnoException) => resolve(err.code ?? err.message));
    req.end();
  });
}

/** An HTTP server inside a namespace answering with its own name and the address the request came to. */
function serveInside(netns: string, port: number): ChildProcess {
  const code = `require('node:http').createServer((q, s) => s.end('${netns} ' + q.socket.localAddress)).listen(${port}, '0.0.0.0')`;
  return spawn('ip', ['netns', 'exec', netns, process.execPath, '-e', code], { stdio: 'ignore' });
}

describe('pod network', () => {
  const made: PodNetwork[] = [];
  const servers: ChildProcess[] = [];
  after(async () => {
    for (const s of servers) s.kill('SIGKILL');
    for (const net of made) await removePodNetwork(net).catch(() => undefined);
  });

  it('gives two stacks started at once their own slices, each routed to its own namespace only', async () => {
    const [a, b] = await Promise.all([stateDir(), stateDir()].map((d) => createPodNetwork(podNetworkNames(d), undefined)));
    made.push(a!, b!);
    assert.notEqual(a!.podCidr, b!.podCidr);
    assert.ok(!overlaps(a!.podCidr, b!.podCidr));
    for (const net of [a!, b!]) {
      assert.ok(overlaps(net.podCidr, podPool), `${net.podCidr} is in the pool`);
      assert.equal(await podNetworkProblem(net), undefined);
      assert.match(await hostRoutes(), new RegExp(`^${net.podCidr.replaceAll('.', '\\.')} dev ${net.hostVeth} `, 'm'));
    }
    const port = 18000 + Math.floor(Math.random() * 1000);
    servers.push(serveInside(a!.netns, port));
    const inA = addressIn(a!.podCidr, 7);
    const answer = await eventually('the server inside A answers', async () => {
      const got = await get(inA, port);
      return got.startsWith(a!.netns) ? got : undefined;
    }, { timeoutMs: 15_000 });
    assert.equal(answer, `${a!.netns} ${inA}`, 'any address of the slice is local inside the namespace');
    assert.equal(await get(addressIn(b!.podCidr, 7), port), 'ECONNREFUSED', 'B\'s slice leads to B, where nothing listens');
  });

  it('refuses a slice another stack holds, naming where it is routed', async () => {
    const holder = made[0]!;
    await assert.rejects(createPodNetwork(podNetworkNames(stateDir()), holder.podCidr), new RegExp(`pod range ${holder.podCidr.replaceAll('.', '\\.')} is routed to ${holder.hostVeth}`));
    assert.equal(await podNetworkProblem(holder), undefined, 'the holder keeps its network');
  });

  it('starts again over a crashed run\'s leftovers: namespace, veth, route and a process still inside', async () => {
    const dir = stateDir();
    const first = await createPodNetwork(podNetworkNames(dir), undefined);
    made.push(first);
    const leftover = serveInside(first.netns, 18999);
    servers.push(leftover);
    await eventually('the leftover process runs inside', async () => ((await exec('ip', ['netns', 'pids', first.netns])).stdout.trim() ? true : undefined));
    const again = await createPodNetwork(podNetworkNames(dir), first.podCidr);
    assert.deepEqual(again, first, 'same names, same slice');
    assert.equal(await podNetworkProblem(again), undefined);
    await eventually('the leftover process was stopped', () => Promise.resolve(leftover.exitCode !== null || leftover.signalCode !== null ? true : undefined), { timeoutMs: 5000 });
  });

  it('removes route, veth and namespace, and says what is missing', async () => {
    const net = made.pop()!;
    await removePodNetwork(net);
    assert.equal(await podNetworkProblem(net), `network namespace ${net.netns} is missing`);
    assert.doesNotMatch(await hostRoutes(), new RegExp(net.hostVeth));
    assert.doesNotMatch(await namespaces(), new RegExp(`^${net.netns}\\b`, 'm'));
    await removePodNetwork(net);
  });
});
