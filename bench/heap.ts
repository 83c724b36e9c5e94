// What a V8 heap snapshot holds, by constructor: `node bench/heap.ts <after.heapsnapshot> [before.heapsnapshot]
// [--per N]`. With two snapshots it prints what grew between them, and with --per N that growth per Application
// (a snapshot of an operator with N more Applications than the other). Take a snapshot of a running operator by
// starting it with NODE_OPTIONS=--heapsnapshot-signal=SIGUSR2 (the benchmark's and the tests' operators inherit it)
// and sending it SIGUSR2: the file lands in its working directory. docs/benchmark.md ("Where the memory goes").
import { readFile } from 'node:fs/promises';
import { parseArgs } from 'node:util';

interface Snapshot {
  snapshot: { meta: { node_fields: string[]; node_types: [string[], ...unknown[]] } };
  nodes: number[];
  strings: string[];
}

/** Bytes and object count per group: objects by constructor, everything else by its V8 type (string, code, ...). */
export type HeapGroups = Map<string, { bytes: number; count: number }>;

export function groupHeap(s: Snapshot): HeapGroups {
  const fields = s.snapshot.meta.node_fields;
  const types = s.snapshot.meta.node_types[0];
  const width = fields.length;
  const [typeAt, nameAt, sizeAt] = [fields.indexOf('type'), fields.indexOf('name'), fields.indexOf('self_size')];
  const out: HeapGroups = new Map();
  for (let i = 0; i < s.nodes.length; i += width) {
    const type = types[s.nodes[i + typeAt]!] ?? '?';
    const name = s.strings[s.nodes[i + nameAt]!] ?? '?';
    // Closures and plain objects are told apart by name; strings, arrays and code only by their type.
    const key = type === 'object' || type === 'closure' ? `${type} ${name}` : type === 'array' || type === 'hidden' ? `${type} ${name.slice(0, 60)}` : type;
    const g = out.get(key) ?? { bytes: 0, count: 0 };
    g.bytes += s.nodes[i + sizeAt]!;
    g.count++;
    out.set(key, g);
  }
  return out;
}

async function load(path: string): Promise<HeapGroups> {
  return groupHeap(JSON.parse(await readFile(path, 'utf8')) as Snapshot);
}

async function main(): Promise<void> {
  const { positionals, values } = parseArgs({ allowPositionals: true, options: { per: { type: 'string' }, top: { type: 'string', default: '30' } } });
  const [afterPath, beforePath] = positionals;
  if (!afterPath) throw new Error('usage: node bench/heap.ts <after.heapsnapshot> [before.heapsnapshot] [--per N] [--top 30]');
  const after = await load(afterPath);
  const before: HeapGroups = beforePath ? await load(beforePath) : new Map();
  const per = Number(values.per ?? 1);
  const rows = [...new Set([...after.keys(), ...before.keys()])].map((key) => {
    const a = after.get(key) ?? { bytes: 0, count: 0 };
    const b = before.get(key) ?? { bytes: 0, count: 0 };
    return { key, bytes: a.bytes - b.bytes, count: a.count - b.count };
  }).sort((x, y) => y.bytes - x.bytes);
  const total = rows.reduce((sum, r) => sum + r.bytes, 0);
  const unit = per > 1 ? `bytes per one of ${per}` : 'MB';
  const fmt = (bytes: number) => (per > 1 ? (bytes / per).toFixed(0) : (bytes / 2 ** 20).toFixed(2));
  console.log(`${beforePath ? 'grown' : 'held'}: ${fmt(total)} ${unit} in all`);
  console.log(`${unit.padStart(24)}  ${'objects'.padStart(10)}  group`);
  for (const r of rows.slice(0, Number(values.top))) {
    console.log(`${fmt(r.bytes).padStart(24)}  ${(per > 1 ? (r.count / per).toFixed(1) : String(r.count)).padStart(10)}  ${r.key}`);
  }
}

if (import.meta.main) await main();
