import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { isQuantity, parseQuantity } from '../../api/quantity.ts';

const NANO = 1_000_000_000n;

describe('parseQuantity', () => {
  const values: [string | number, bigint][] = [
    ['1', NANO],
    [2, 2n * NANO],
    ['500m', NANO / 2n],
    ['0.5', NANO / 2n],
    ['.5', NANO / 2n],
    ['1.', NANO],
    ['1k', 1000n * NANO],
    ['1Ki', 1024n * NANO],
    ['1.5Gi', 1_610_612_736n * NANO],
    ['128Mi', 134_217_728n * NANO],
    ['1e3', 1000n * NANO],
    ['1E-3', NANO / 1000n],
    ['+4', 4n * NANO],
    ['-1', -NANO],
    ['100n', 100n],
    ['1E', 10n ** 18n * NANO],
    // Kubernetes rounds what is below a nano-unit up, away from zero.
    ['1e-10', 1n],
    ['-1e-10', -1n],
    // apimachinery's parser takes a bare suffix or sign as zero.
    ['M', 0n],
    ['+', 0n],
  ];
  for (const [input, nanos] of values) {
    test(`${JSON.stringify(input)} is ${nanos} nano-units`, () => assert.equal(parseQuantity(input), nanos));
  }

  for (const input of ['', 'lots', '1 Gi', '1GB', '1gi', '1Ki5', '1e', '1ee3', '1.2.3', '1-', ' 1', '1e99999999999999999999', 0.5]) {
    test(`${JSON.stringify(input)} is not a quantity`, () => {
      assert.equal(parseQuantity(input), null);
      assert.equal(isQuantity(input), false);
    });
  }

  const orders: [string, '<' | '=' | '>', string][] = [
    ['1G', '<', '1Gi'],
    ['999m', '<', '1'],
    ['1000m', '=', '1'],
    ['0.1', '=', '100m'],
    ['1k', '=', '1e3'],
    ['2Gi', '>', '1Gi'],
  ];
  for (const [a, order, b] of orders) {
    test(`${a} ${order} ${b}`, () => {
      const [x, y] = [parseQuantity(a), parseQuantity(b)];
      assert.ok(x !== null && y !== null);
      assert.equal(x < y ? '<' : x > y ? '>' : '=', order);
    });
  }
});
