// The cluster and Temporal as tests, the benchmark and the chaos run see them: kubectl and our JSON client against
// the run's stack, Application manifests, waits on their status, and a Temporal client.
import { Client, Connection } from '@temporalio/client';
import { randomBytes } from 'node:crypto';
import { API_VERSION, KIND } from '../api/constants.ts';
import { Kube, type KubeObject } from '../kube/client.ts';
import { eventually } from '../lib/poll.ts';
import { kubectl } from '../stack/stack.ts';
import { testEnv } from './env.ts';

export type Json = Record<string, any>;
export type { KubeObject };

let kubeSingleton: Kube | undefined;

/** Our JSON client over the run's admin kubeconfig (reads are plain GETs against the real API server). */
export async function kubeApi(): Promise<Kube> {
  kubeSingleton ??= new Kube((await testEnv()).kc);
  return kubeSingleton;
}

/** kubectl against the run's stack. */
export async function kube(args: string[], input?: string): Promise<string> {
  const env = await testEnv();
  return kubectl({ kubeconfig: env.kubeconfigPath }, args, input);
}

export async function kubeJson<T = any>(args: string[]): Promise<T> {
  return JSON.parse(await kube([...args, '-o', 'json'])) as T;
}

/** Server-side apply of a manifest as a user would (`kubectl apply --server-side`). */
export function applyAsUser(obj: Json, fieldManager = 'test-user'): Promise<string> {
  return kube(['apply', '--server-side', `--field-manager=${fieldManager}`, '--force-conflicts', '-f', '-'], JSON.stringify(obj));
}

/** A fresh namespace for one test; the returned function deletes it (without waiting). */
export async function testNamespace(prefix: string): Promise<{ name: string; cleanup: () => Promise<void> }> {
  const name = `${prefix}-${randomBytes(3).toString('hex')}`.toLowerCase();
  await kube(['create', 'namespace', name]);
  return { name, cleanup: async () => void (await kube(['delete', 'namespace', name, '--wait=false']).catch(() => '')) };
}

/** An Application manifest. */
export function appManifest(namespace: string, name: string, spec: Json, metadata: Json = {}): Json {
  return { apiVersion: API_VERSION, kind: KIND, metadata: { name, namespace, ...metadata }, spec };
}

export async function getObject(apiVersion: string, kind: string, namespace: string, name: string): Promise<Json | null> {
  return (await kubeApi()).get<Json>({ apiVersion, kind, namespace, name });
}

export const getApp = (ns: string, name: string) => getObject(API_VERSION, KIND, ns, name);
export const getDeployment = (ns: string, name: string) => getObject('apps/v1', 'Deployment', ns, name);

/** Waits until the Application has reported status for its current generation with the given phase. */
export async function waitForPhase(ns: string, name: string, phase: string, timeoutMs = 90_000): Promise<Json> {
  return eventually(`${ns}/${name} phase ${phase}`, async () => {
    const app = await getApp(ns, name);
    if (!app) throw new Error('application not found');
    const s = app.status ?? {};
    if (s.observedGeneration === app.metadata.generation && s.phase === phase) return app;
    throw new Error(`phase=${s.phase} observedGeneration=${s.observedGeneration} generation=${app.metadata.generation} conditions=${JSON.stringify(s.conditions?.map((c: Json) => `${c.type}=${c.status}:${c.reason}`))}`);
  }, { timeoutMs, intervalMs: 300 });
}

/** Waits until a predicate on an object holds, returning the object. */
export async function waitForObject(what: string, read: () => Promise<Json | null>, ok: (o: Json | null) => boolean, timeoutMs = 60_000): Promise<Json | null> {
  return eventually(what, async () => {
    const o = await read();
    if (ok(o)) return o ?? null;
    throw new Error(`not yet: ${JSON.stringify(o?.status ?? o?.metadata?.name ?? null).slice(0, 300)}`);
  }, { timeoutMs, intervalMs: 300 });
}

/** The Events of an object by uid, oldest first. */
export async function eventsOf(ns: string, uid: string): Promise<{ reason: string; note: string; type: string; time: string }[]> {
  const list = JSON.parse(await kube(['-n', ns, 'get', 'events.events.k8s.io', '--field-selector', `regarding.uid=${uid}`, '-o', 'json'])) as { items: Json[] };
  return list.items.map((e) => ({ reason: e.reason, note: e.note, type: e.type, time: e.eventTime ?? e.metadata.creationTimestamp })).sort((a, b) => a.time.localeCompare(b.time));
}

let temporal: { client: Client; connection: Connection } | undefined;

/** A Temporal client on the run's dev server. */
export async function temporalClient(): Promise<Client> {
  if (!temporal) {
    const env = await testEnv();
    const connection = await Connection.connect({ address: env.temporalAddress });
    temporal = { connection, client: new Client({ connection, namespace: env.temporalNamespace }) };
  }
  return temporal.client;
}

export async function closeTemporal(): Promise<void> {
  await temporal?.connection.close();
  temporal = undefined;
}
