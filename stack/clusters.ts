// Member clusters of the local stack, for fleet Releases: besides the hub (the stack `up` starts, where the operator
// runs), each member is a Kubernetes control plane of its own (etcd, kube-apiserver, controller manager, scheduler,
// kwok) in <hub state>/clusters/<name>/, registered with the hub the way the operator reads it (a labelled Secret in
// its namespace) and given a Temporal namespace on the hub's Temporal, where the member's own operator runs.
import { execFile } from 'node:child_process';
import { copyFile, mkdir, readdir, rm, writeFile } from 'node:fs/promises';
import { join, resolve } from 'node:path';
import { promisify } from 'node:util';
import { stringify } from 'yaml';
import { CLUSTER_KUBECONFIG_KEY, CLUSTER_LABEL, CLUSTER_TEMPORAL_NAMESPACE_KEY, DEFAULT_CLUSTERS_NAMESPACE } from '../api/constants.ts';
import { freePortsBesides } from '../lib/net.ts';
import { searchAttributeKeys } from '../workflows/search-attributes.ts';
import { defaultDataPlanePorts } from './dataplane.ts';
import { waitFor } from './processes.ts';
import {
  controlPlaneServerNames, controlPlaneSpecs, defaultPorts, kubeconfigYaml, kubectl, loadPki, pkiDirOf, prepareCluster, readStack,
  saveStack, startServer, status, stopServer, toolDirs, updateStack,
  type ControlPlanePorts, type ControlPlaneServerName, type ServerStatus, type StackInfo,
} from './stack.ts';
import { defaultTracingPorts } from './tracing.ts';
import { artifactPaths } from './versions.ts';

// Nothing of stack.ts may be used at this module's top level: the two import each other.

const exec = promisify(execFile);

/** A member cluster's stack.json: its control plane's servers only; Temporal and Prometheus are the hub's. */
export type MemberStackInfo = StackInfo<ControlPlaneServerName>;

/** kwok nodes in each member. */
const memberNodes = 2;

/** Members with fixed ports (a hub on the default ports) take the hub's control-plane ports plus 1000 × slot, up to this slot; later ones free ports. */
const lastFixedSlot = 6;

/** The names `up --clusters <count>` gives the members (count includes the hub, which is unnamed): 3 → b, c. */
export function memberNames(count: number): string[] {
  if (!Number.isInteger(count) || count < 1 || count > 26) throw new Error(`${count} clusters: want the number of clusters including the hub, 1 to 26`);
  return Array.from({ length: count - 1 }, (_, i) => String.fromCharCode('b'.charCodeAt(0) + i));
}

/** Where a member keeps its stack.json, kubeconfig, data and logs. */
export function memberStateDir(hubStateDir: string, name: string): string {
  return join(resolve(hubStateDir), 'clusters', name);
}

/** The Secret in the hub's DEFAULT_CLUSTERS_NAMESPACE that registers a member. */
export function memberSecretName(name: string): string {
  return `cluster-${name}`;
}

/** The Temporal namespace (on the hub's Temporal) the member's own operator runs in. */
export function memberTemporalNamespace(name: string): string {
  return `cluster-${name}`;
}

function assertMemberName(name: string): void {
  // A DNS-1123 label: it names a folder, a context, and (prefixed) a Secret and a Temporal namespace.
  if (!/^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$/.test(name)) throw new Error(`member cluster name ${JSON.stringify(name)}: want a DNS-1123 label (lower-case letters, digits and '-', at most 63)`);
}

function assertHub(hub: Pick<StackInfo, 'stateDir' | 'member'>): void {
  if (hub.member) throw new Error(`${hub.stateDir} is member cluster ${hub.member.name} of ${hub.member.hubStateDir}, not a hub`);
}

/** A member's state, or null when the hub has no member of that name. */
export async function readMemberCluster(hubStateDir: string, name: string): Promise<MemberStackInfo | null> {
  return readStack(memberStateDir(hubStateDir, name));
}

/** The hub's members: those its stack.json lists, then any other with a state folder (one whose recording was lost). */
export async function memberClusterNames(hub: Pick<StackInfo, 'stateDir'>): Promise<string[]> {
  const listed = (await readStack(hub.stateDir))?.clusters ?? [];
  const found = await readdir(join(resolve(hub.stateDir), 'clusters')).catch(() => [] as string[]);
  return [...new Set([...listed, ...found.sort()])];
}

/** Adds names to (and removes drop from) the hub's list of members, keeping what other processes wrote meanwhile. */
async function recordMembers(hubStateDir: string, add: string[], drop: string[]): Promise<void> {
  await updateStack(hubStateDir, (current) => {
    const names = [...(current.clusters ?? []).filter((n) => !drop.includes(n)), ...add.filter((n) => !current.clusters?.includes(n))];
    if (names.length) current.clusters = names;
    else delete current.clusters;
  });
}

/**
 * Creates (once) and starts the named member clusters of a hub, one after another, and registers each with it: a
 * Temporal namespace `cluster-<name>` on the hub's Temporal and a Secret `cluster-<name>` in the hub's
 * DEFAULT_CLUSTERS_NAMESPACE. Idempotent: a member that runs is left as it is. Returns the members' states.
 */
export async function addMemberClusters(hub: StackInfo, names: string[], opts: { print?: (line: string) => void; signal?: AbortSignal } = {}): Promise<MemberStackInfo[]> {
  assertHub(hub);
  names.forEach(assertMemberName);
  const print = opts.print ?? (() => {});
  const unique = [...new Set(names)];
  // Recorded before anything starts, so that `down` stops a member whose start fails halfway.
  await recordMembers(hub.stateDir, unique, []);
  const out: MemberStackInfo[] = [];
  for (const name of unique) {
    const t0 = Date.now();
    print(`cluster ${name}:`);
    const member = await createMember(hub, name);
    const indented = (l: string) => print(`  ${l}`);
    for (const server of controlPlaneServerNames) await startServer(member, server, indented, opts.signal);
    await prepareCluster(member, { nodes: memberNodes, signal: opts.signal });
    await ensureTemporalNamespace(hub, member.temporalNamespace, opts.signal);
    await registerMember(hub, member, opts.signal);
    print(`  cluster ${name} up in ${((Date.now() - t0) / 1000).toFixed(1)} s: ${member.apiserverUrl}, Temporal namespace ${member.temporalNamespace}, Secret ${DEFAULT_CLUSTERS_NAMESPACE}/${memberSecretName(name)} in the hub`);
    out.push(member);
  }
  return out;
}

/** A member's state, written the first time: its ports, kubeconfig, kwok stages and servers. */
async function createMember(hub: StackInfo, name: string): Promise<MemberStackInfo> {
  const existing = await readMemberCluster(hub.stateDir, name);
  if (existing) return existing;
  const dir = memberStateDir(hub.stateDir, name);
  await mkdir(join(dir, 'logs'), { recursive: true });
  const ports = await memberPorts(hub);
  // The hub's PKI serves every member: its serving certificate is for 127.0.0.1, whatever the port.
  const pkiDir = pkiDirOf(hub);
  const pki = await loadPki(pkiDir);
  const kubeconfig = join(dir, 'kubeconfig');
  const apiserverUrl = `https://127.0.0.1:${ports.apiserver}`;
  await writeFile(kubeconfig, kubeconfigYaml({ ca: pki.caCertPem, cert: pki.adminCertPem, key: pki.adminKeyPem }, apiserverUrl, name), { mode: 0o600 });
  // The hub's stages, so a member's pods behave (and take as long) as the hub's.
  await copyFile(join(hub.stateDir, 'kwok.yaml'), join(dir, 'kwok.yaml'));
  const member: MemberStackInfo = {
    stateDir: dir, kubeconfig, apiserverUrl, headless: hub.headless,
    // Temporal and Prometheus are the hub's: the member's operator connects to them.
    temporalAddress: hub.temporalAddress, temporalNamespace: memberTemporalNamespace(name),
    temporalUiUrl: hub.temporalUiUrl, prometheusUrl: hub.prometheusUrl,
    ports: { ...hub.ports, ...ports },
    pkiDir, member: { name, hubStateDir: hub.stateDir },
    servers: controlPlaneSpecs(artifactPaths(), pki, dir, ports, kubeconfig),
  };
  await saveStack(member);
  return member;
}

/** Fixed ports of the member in `slot` (1, 2, ...): the hub's default control-plane ports plus 1000 × slot. */
function fixedMemberPorts(slot: number): ControlPlanePorts {
  const off = 1000 * slot;
  const ports = { etcd: defaultPorts.etcd + off, etcdPeer: defaultPorts.etcdPeer + off, apiserver: defaultPorts.apiserver + off, scheduler: defaultPorts.scheduler + off, kwok: defaultPorts.kwok + off };
  const reserved = new Set([defaultPorts, defaultDataPlanePorts, defaultTracingPorts].flatMap((p) => Object.values<number>({ ...p })));
  const clash = Object.values<number>(ports).find((p) => reserved.has(p));
  if (clash !== undefined) throw new Error(`member slot ${slot}: port ${clash} is one of the hub's default ports`);
  return ports;
}

/** Free ports when the hub took free ones (tests); else the first fixed slot no other member has. */
async function memberPorts(hub: StackInfo): Promise<ControlPlanePorts> {
  const others = (await Promise.all((await memberClusterNames(hub)).map((n) => readMemberCluster(hub.stateDir, n)))).filter((m) => m !== null);
  if (hub.ports.apiserver === defaultPorts.apiserver) {
    const used = new Set(others.map((m) => m.ports.apiserver));
    for (let slot = 1; slot <= lastFixedSlot; slot++) {
      const ports = fixedMemberPorts(slot);
      if (!used.has(ports.apiserver)) return ports;
    }
  }
  const taken = [hub.ports, hub.dataPlane?.ports, hub.tracing?.ports, ...others.map((m) => m.ports)].flatMap((p) => Object.values<number>({ ...p }));
  const [etcd, etcdPeer, apiserver, scheduler, kwok] = (await freePortsBesides(taken, 5)) as [number, number, number, number, number];
  return { etcd, etcdPeer, apiserver, scheduler, kwok };
}

/** Runs the cached temporal CLI against the hub's Temporal; throws with its stderr. */
async function temporalCli(hub: Pick<StackInfo, 'temporalAddress'>, args: string[], signal?: AbortSignal): Promise<string> {
  try {
    const { stdout } = await exec(artifactPaths().temporal, [...args, `--address=${hub.temporalAddress}`], { timeout: 30_000, ...(signal ? { signal } : {}) });
    return stdout;
  } catch (err) {
    const e = err as { stderr?: string; message: string };
    throw new Error(`temporal ${args.join(' ')}: ${(e.stderr || e.message).trim()}`, { cause: err });
  }
}

/**
 * Creates a Temporal namespace on the hub's Temporal (an existing one is fine) with the operator's search attributes
 * (the dev server registers them only on the namespaces it starts with), and waits until both can be used.
 */
async function ensureTemporalNamespace(hub: StackInfo, namespace: string, signal?: AbortSignal): Promise<void> {
  const describe = () => temporalCli(hub, ['operator', 'namespace', 'describe', `--namespace=${namespace}`], signal);
  if (!(await describe().then(() => true, () => false))) {
    await temporalCli(hub, ['operator', 'namespace', 'create', `--namespace=${namespace}`], signal).catch((err: unknown) => {
      if (!/already exists|already registered/i.test((err as Error).message)) throw err;
    });
    await waitFor(`Temporal namespace ${namespace}`, () => describe().then(() => true), { timeoutMs: 60_000, signal });
  }
  const listed = () => temporalCli(hub, ['operator', 'search-attribute', 'list', `--namespace=${namespace}`, '--output=json'], signal)
    .then((out) => new Set(Object.keys((JSON.parse(out) as { customAttributes?: Record<string, unknown> }).customAttributes ?? {})));
  // A new namespace reaches every part of the server a moment after `describe` finds it: search attributes are
  // refused as of an unknown namespace until then.
  let have = new Set<string>();
  await waitFor(`Temporal namespace ${namespace} known to its search attributes`, async () => {
    have = await listed();
    return true;
  }, { timeoutMs: 60_000, signal });
  const add = searchAttributeKeys.filter((k) => !have.has(k.name));
  // One at a time: given several --name, temporal CLI v1.5.1 adds only the first.
  for (const k of add) await temporalCli(hub, ['operator', 'search-attribute', 'create', `--namespace=${namespace}`, `--name=${k.name}`, '--type=Keyword'], signal);
  await waitFor(`search attributes of Temporal namespace ${namespace}`, async () => {
    const now = await listed();
    return searchAttributeKeys.every((k) => now.has(k.name));
  }, { timeoutMs: 60_000, signal });
}

/** Registers a member with the hub as the operator reads it: Secret `cluster-<name>` (its kubeconfig and Temporal namespace) in DEFAULT_CLUSTERS_NAMESPACE. */
async function registerMember(hub: StackInfo, member: MemberStackInfo, signal?: AbortSignal): Promise<void> {
  const name = member.member!.name;
  const pki = await loadPki(pkiDirOf(hub));
  const manifests = [
    { apiVersion: 'v1', kind: 'Namespace', metadata: { name: DEFAULT_CLUSTERS_NAMESPACE } },
    {
      apiVersion: 'v1', kind: 'Secret', type: 'Opaque',
      metadata: { name: memberSecretName(name), namespace: DEFAULT_CLUSTERS_NAMESPACE, labels: { [CLUSTER_LABEL]: name } },
      stringData: {
        [CLUSTER_KUBECONFIG_KEY]: kubeconfigYaml({ ca: pki.caCertPem, cert: pki.adminCertPem, key: pki.adminKeyPem }, member.apiserverUrl, name),
        [CLUSTER_TEMPORAL_NAMESPACE_KEY]: member.temporalNamespace,
      },
    },
  ];
  await kubectl(hub, ['apply', '--server-side', '--force-conflicts', '--field-manager=local-stack', '-f', '-'], manifests.map((m) => stringify(m)).join('---\n'), signal);
}

async function stopMember(member: MemberStackInfo): Promise<void> {
  for (const name of [...controlPlaneServerNames].reverse()) if (member.servers[name]) await stopServer(member, name);
}

/** Stops every member's servers (`down` does, before the hub's); their state stays. */
export async function stopMemberClusters(hub: StackInfo): Promise<void> {
  for (const name of await memberClusterNames(hub)) {
    const member = await readMemberCluster(hub.stateDir, name);
    if (member) await stopMember(member);
  }
}

/**
 * Stops the named members, deletes their Secrets from the hub and their state folders, and drops them from the
 * hub's stack.json; their Temporal namespaces stay. A name the hub does not have is not an error.
 */
export async function removeMemberClusters(hub: StackInfo, names: string[]): Promise<void> {
  assertHub(hub);
  for (const name of names) {
    assertMemberName(name);
    const member = await readMemberCluster(hub.stateDir, name);
    if (member) await stopMember(member);
    await kubectl(hub, ['delete', 'secret', memberSecretName(name), '-n', DEFAULT_CLUSTERS_NAMESPACE, '--ignore-not-found']);
    await rm(memberStateDir(hub.stateDir, name), { recursive: true, force: true });
  }
  await recordMembers(hub.stateDir, [], names);
}

/** Each member's servers as `status` sees them (null: the hub lists a member that has no state folder). */
export async function memberStatuses(hub: StackInfo): Promise<{ name: string; rows: ServerStatus[] | null }[]> {
  return Promise.all((await memberClusterNames(hub)).map(async (name) => ({ name, rows: await status(memberStateDir(hub.stateDir, name)) })));
}

/** A member's state, or an error naming the hub's members. */
export async function requireMemberCluster(hub: StackInfo, name: string): Promise<MemberStackInfo> {
  const member = await readMemberCluster(hub.stateDir, name);
  if (member) return member;
  const names = await memberClusterNames(hub);
  throw new Error(`no member cluster ${JSON.stringify(name)} in the stack in ${hub.stateDir}; ${names.length ? `its members: ${names.join(', ')}` : 'it has none (npm run stack -- up --clusters 3 adds b and c)'}`);
}

/** Shell lines to export so kubectl and an operator use a member: its API server, and its namespace on the hub's Temporal. */
export function memberEnvLines(hub: StackInfo, member: MemberStackInfo): string {
  return [
    `export KUBECONFIG=${member.kubeconfig}`,
    `export TEMPORAL_ADDRESS=${hub.temporalAddress}`,
    `export TEMPORAL_NAMESPACE=${member.temporalNamespace}`,
    `export STACK_STATE_DIR=${hub.stateDir}`,
    `export PATH="${toolDirs().join(':')}:$PATH"`,
  ].join('\n');
}
