import { readFileSync } from 'node:fs';
import { createServer } from 'node:net';

/**
 * Ports freePort picks from: below the kernel's ephemeral range (net.ipv4.ip_local_port_range, 32768-60999 on
 * Linux by default), so that no outgoing connection and no listen(0) elsewhere can take a port between the moment it
 * is picked and the moment its server binds it; and below the local stack's fixed ports (26443 and up).
 */
export const pickRange = { low: 15000, high: Math.min(26000, ephemeralLow()) - 1 };

function ephemeralLow(): number {
  try {
    const low = Number(readFileSync('/proc/sys/net/ipv4/ip_local_port_range', 'utf8').trim().split(/\s+/)[0]);
    return Number.isInteger(low) && low > 16000 ? low : 32768;
  } catch {
    return 32768;
  }
}

/** Whether 127.0.0.1:port can be bound right now. */
function canBind(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const srv = createServer();
    srv.once('error', () => resolve(false));
    srv.listen(port, '127.0.0.1', () => srv.close(() => resolve(true)));
  });
}

/** A free TCP port on 127.0.0.1, picked at random from pickRange (falling back to one from the kernel). */
export async function freePort(): Promise<number> {
  for (let i = 0; i < 50; i++) {
    const port = pickRange.low + Math.floor(Math.random() * (pickRange.high - pickRange.low + 1));
    if (await canBind(port)) return port;
  }
  return kernelPort();
}

/** `count` free ports, none of them in `taken` nor the same twice (a stack's extra servers beside its own ports). */
export async function freePortsBesides(taken: number[], count: number): Promise<number[]> {
  const used = new Set(taken);
  const out: number[] = [];
  while (out.length < count) {
    const p = await freePort();
    if (used.has(p)) continue;
    used.add(p);
    out.push(p);
  }
  return out;
}

function kernelPort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const srv = createServer();
    srv.once('error', reject);
    srv.listen(0, '127.0.0.1', () => {
      const addr = srv.address();
      const port = typeof addr === 'object' && addr ? addr.port : 0;
      srv.close(() => resolve(port));
    });
  });
}

/** Resolves when nothing listens on 127.0.0.1:port, else rejects naming the port. */
export function assertPortFree(port: number, what: string): Promise<void> {
  return new Promise((resolve, reject) => {
    const srv = createServer();
    srv.once('error', () => reject(new Error(`port ${port} on 127.0.0.1 (for ${what}) is already in use; stop what uses it or pick other ports`)));
    srv.listen(port, '127.0.0.1', () => srv.close(() => resolve()));
  });
}
