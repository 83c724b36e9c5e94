// The operator's side of fleet Releases: signals to member clusters' rollouts (in their operators' Temporal
// namespaces on the same server), and the leader's probe of every member's health (kube/clusters.ts).
import { Client, WorkflowNotFoundError, type Connection } from '@temporalio/client';
import { setTimeout as sleep } from 'node:timers/promises';
import { probeClusters, type MemberClusters } from '../kube/clusters.ts';
import { Kube, KubeError } from '../kube/client.ts';
import type { OperatorConfig } from './config.ts';
import type { Logger } from './log.ts';
import { connectClient, dataConverterFor } from './temporal.ts';

/** Sends signals to workflows of other namespaces over one connection, opened at the first signal. */
export function temporalSignaller(cfg: OperatorConfig): { send: (namespace: string, workflowId: string, signal: string, arg: unknown) => Promise<boolean>; close: () => Promise<void> } {
  let connection: Promise<Connection> | undefined;
  const clients = new Map<string, Client>();
  return {
    send: async (namespace, workflowId, signal, arg) => {
      connection ??= connectClient(cfg).then(({ connection: c }) => c).catch((err: unknown) => {
        connection = undefined;
        throw err;
      });
      const c = await connection;
      let client = clients.get(namespace);
      if (!client) {
        client = new Client({ connection: c, namespace, dataConverter: await dataConverterFor(cfg) });
        clients.set(namespace, client);
      }
      // No such workflow (a rollout over, or not started yet) is an answer, not a failure.
      return client.workflow.getHandle(workflowId).signal(signal, arg).then(() => true, (err: unknown) => {
        if (err instanceof WorkflowNotFoundError) return false;
        throw err;
      });
    },
    close: async () => {
      const c = await connection?.catch(() => undefined);
      await c?.close();
    },
  };
}

/**
 * Probes the member clusters every `seconds` and writes their health on their Secrets (only what changed). A hub
 * whose role may not read Secrets says so once, and keeps trying.
 */
export function probeLoop(clusters: MemberClusters, hub: Kube, seconds: number, log: Logger): { stop: () => Promise<void> } {
  const stopping = new AbortController();
  let last = '';
  const loop = (async () => {
    while (!stopping.signal.aborted) {
      try {
        const found = await probeClusters(clusters, hub);
        const said = [...found].map(([name, p]) => `${name}:${p.health}`).join(',');
        if (said !== last) log.info({ clusters: Object.fromEntries([...found].map(([name, p]) => [name, `${p.health}: ${p.message}`])) }, 'member clusters probed');
        last = said;
      } catch (err) {
        const why = err instanceof KubeError ? `${err.status} ${err.message}` : err instanceof Error ? err.message : String(err);
        if (last !== `error:${why}`) log.warn({ err: why, namespace: clusters.namespace }, 'could not probe the member clusters');
        last = `error:${why}`;
      }
      await sleep(seconds * 1000, undefined, { signal: stopping.signal }).catch(() => undefined);
    }
  })();
  return {
    stop: async () => {
      stopping.abort();
      await loop;
    },
  };
}
