import assert from 'node:assert/strict';
import { writeHeapSnapshot } from 'node:v8';
import { readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, test } from 'node:test';
import { groupHeap } from '../../bench/heap.ts';

describe('the benchmark\'s heap summary', () => {
  test('groups a snapshot\'s nodes by constructor, strings and arrays by type, summing self sizes', () => {
    // Two node types, four nodes: [type, name, id, self_size, edge_count].
    const groups = groupHeap({
      snapshot: { meta: { node_fields: ['type', 'name', 'id', 'self_size', 'edge_count'], node_types: [['object', 'string', 'array']] } },
      strings: ['Map', 'hello', 'Observation', '(object elements)'],
      nodes: [0, 0, 1, 32, 0, 0, 2, 3, 48, 0, 0, 2, 5, 48, 0, 1, 1, 7, 24, 0, 2, 3, 9, 100, 0],
    });
    assert.deepEqual(Object.fromEntries(groups), {
      'object Map': { bytes: 32, count: 1 },
      'object Observation': { bytes: 96, count: 2 },
      string: { bytes: 24, count: 1 },
      'array (object elements)': { bytes: 100, count: 1 },
    });
  });

  test('finds this process\'s own objects in a real snapshot', () => {
    class HeldForTheTest { readonly n: number; constructor(n: number) { this.n = n; } }
    const held = Array.from({ length: 5000 }, (_, i) => new HeldForTheTest(i));
    const file = join(tmpdir(), `heap-test-${process.pid}.heapsnapshot`);
    writeHeapSnapshot(file);
    try {
      const groups = groupHeap(JSON.parse(readFileSync(file, 'utf8')));
      assert.equal(groups.get('object HeldForTheTest')?.count, held.length);
    } finally {
      rmSync(file, { force: true });
    }
  });
});
