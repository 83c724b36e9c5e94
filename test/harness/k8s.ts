import { randomBytes } from 'node:crypto';
import { kubectl } from '../../stack/stack.ts';
import { testEnv } from './env.ts';

/** kubectl against the run's stack; returns parsed JSON when asked for -o json. */
export async function kube(args: string[], input?: string): Promise<string> {
  const env = await testEnv();
  return kubectl({ kubeconfig: env.kubeconfigPath }, args, input);
}

export async function kubeJson<T = any>(args: string[]): Promise<T> {
  return JSON.parse(await kube([...args, '-o', 'json'])) as T;
}

/** A fresh namespace for one test; the returned function deletes it (without waiting). */
export async function testNamespace(prefix: string): Promise<{ name: string; cleanup: () => Promise<void> }> {
  const name = `${prefix}-${randomBytes(3).toString('hex')}`.toLowerCase();
  await kube(['create', 'namespace', name]);
  return { name, cleanup: async () => void (await kube(['delete', 'namespace', name, '--wait=false']).catch(() => '')) };
}
