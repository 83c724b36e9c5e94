import { createServer } from 'node:net';

/** A free TCP port on 127.0.0.1, from the kernel. */
export function freePort(): Promise<number> {
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
