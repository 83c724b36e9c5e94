// Pod address ranges for the stacks of one machine. Every stack with a data plane routes its own slice of a pool to
// its own network namespace, so that several stacks (a test run's, a helper's, `stack up`'s) run side by side
// without two of them wanting one route. Pure arithmetic here; stack/pod-network.ts claims a slice with a route.

/** The pool slices are taken from; kwok's upstream default pod range (10.244.0.0/16) is its first quarter. */
export const podPool = '10.244.0.0/14';

/** Each stack's slice: 16,384 addresses, 16 slices in the pool. */
export const slicePrefix = 18;

/** Pods one kwok node takes in a stack without a data plane (its capacity). */
export const podsPerNodeDefault = 5000;

interface Cidr {
  base: number;
  prefix: number;
}

function parseIp(ip: string): number {
  const parts = ip.split('.');
  if (parts.length !== 4 || parts.some((p) => !/^\d{1,3}$/.test(p) || Number(p) > 255)) throw new Error(`${ip} is not an IPv4 address`);
  return parts.reduce((acc, p) => acc * 256 + Number(p), 0);
}

function formatIp(n: number): string {
  return [24, 16, 8, 0].map((shift) => Math.floor(n / 2 ** shift) % 256).join('.');
}

/** Parses a.b.c.d/n; throws on anything else, or on host bits set (10.244.1.0/14). */
export function parseCidr(cidr: string): Cidr {
  const m = /^([\d.]+)\/(\d{1,2})$/.exec(cidr);
  const prefix = m ? Number(m[2]) : NaN;
  if (!m || !(prefix >= 0 && prefix <= 32)) throw new Error(`${cidr} is not an IPv4 CIDR (a.b.c.d/n)`);
  const base = parseIp(m[1]!);
  if (base % 2 ** (32 - prefix) !== 0) throw new Error(`${cidr} has host bits set`);
  return { base, prefix };
}

const size = (c: Cidr) => 2 ** (32 - c.prefix);

/** The pool's slices of /prefix, in order. */
export function slicesOf(pool: string, prefix: number): string[] {
  const p = parseCidr(pool);
  if (prefix < p.prefix) throw new Error(`a /${prefix} is larger than the pool ${pool}`);
  const step = 2 ** (32 - prefix);
  return Array.from({ length: size(p) / step }, (_, i) => `${formatIp(p.base + i * step)}/${prefix}`);
}

/** True when the two ranges share an address. */
export function overlaps(a: string, b: string): boolean {
  const x = parseCidr(a);
  const y = parseCidr(b);
  return x.base < y.base + size(y) && y.base < x.base + size(x);
}

/** The slices of the pool that overlap none of the given routes' destinations (a default route overlaps nothing here). */
export function freeSlices(routeDestinations: string[], pool = podPool, prefix = slicePrefix): string[] {
  const taken = routeDestinations.filter((d) => d !== 'default').map((d) => (d.includes('/') ? d : `${d}/32`));
  return slicesOf(pool, prefix).filter((s) => !taken.some((t) => overlaps(s, t)));
}

/** How a stack uses its slice: every address its API server and kwok hand out lies inside, routed to its namespace. */
export interface SliceLayout {
  /** The range kwok takes pod addresses from (the whole slice: kwok counts up from its first address). */
  podCidr: string;
  /** The kwok nodes' address: whatever connects to a node (the API server, for `kubectl logs`) stays inside. */
  nodeIp: string;
  /** The API server's --service-cluster-ip-range, the slice's last /24: a proxy sending to a ClusterIP stays inside too. */
  serviceCidr: string;
  /** Addresses pods can get before the node address: kwok hands them out without a bound, so node capacity must stop first. */
  podAddresses: number;
}

/** The layout of a /16 to /23 slice: pods from the start, the node address just below the last /24, ClusterIPs in it. */
export function sliceLayout(cidr: string): SliceLayout {
  const c = parseCidr(cidr);
  if (c.prefix > 23 || c.prefix < 16) throw new Error(`${cidr}: a stack's slice must be a /16 to a /23`);
  const serviceBase = c.base + size(c) - 256;
  const nodeIp = serviceBase - 2;
  return { podCidr: cidr, nodeIp: formatIp(nodeIp), serviceCidr: `${formatIp(serviceBase)}/24`, podAddresses: nodeIp - (c.base + 1) };
}

/**
 * Pods one node may hold so that all nodes together never need more addresses than the slice has for pods: kwok
 * counts pod addresses up without a bound, so a full slice would spill onto the node address, the ClusterIPs, and
 * then the next stack's slice; a node's pod capacity makes the scheduler stop first.
 */
export function podsPerNode(layout: SliceLayout, nodes: number): number {
  return Math.min(podsPerNodeDefault, Math.floor(layout.podAddresses / Math.max(1, nodes)));
}
