// freePort picks below the kernel's ephemeral range, so an outgoing connection cannot take the port before its
// server binds it (a test's operator once failed with EADDRINUSE on a port freshly picked by the kernel).
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { describe, test } from 'node:test';
import { freePort, pickRange } from '../../lib/net.ts';

describe('freePort', () => {
  test('stays below the ephemeral range and the stack\'s fixed ports', () => {
    const ephemeralLow = Number(readFileSync('/proc/sys/net/ipv4/ip_local_port_range', 'utf8').trim().split(/\s+/)[0]);
    assert.ok(pickRange.high < ephemeralLow, `${pickRange.high} < ${ephemeralLow}`);
    assert.ok(pickRange.high < 26443 && pickRange.low < pickRange.high);
  });

  test('gives ports in that range that can be bound, and not one already bound', async () => {
    const held = createServer();
    const ports: number[] = [];
    try {
      for (let i = 0; i < 20; i++) ports.push(await freePort());
      for (const p of ports) assert.ok(p >= pickRange.low && p <= pickRange.high, `${p} in range`);
      await new Promise<void>((r) => held.listen(ports[0], '127.0.0.1', () => r()));
      for (let i = 0; i < 50; i++) assert.notEqual(await freePort(), ports[0]);
    } finally {
      held.close();
    }
  });
});
