import { Client, Connection, type ConnectionOptions } from '@temporalio/client';
import { NativeConnection, type NativeConnectionOptions } from '@temporalio/worker';
import { readFile } from 'node:fs/promises';
import type { OperatorConfig } from './config.ts';

type TlsOptions = ConnectionOptions['tls'];

async function tlsOptions(cfg: OperatorConfig): Promise<TlsOptions> {
  if (!cfg.temporalTlsCert && !cfg.temporalTlsCa && !cfg.temporalApiKey) return undefined;
  return {
    ...(cfg.temporalTlsCert && cfg.temporalTlsKey
      ? { clientCertPair: { crt: await readFile(cfg.temporalTlsCert), key: await readFile(cfg.temporalTlsKey) } }
      : {}),
    ...(cfg.temporalTlsCa ? { serverRootCACertificate: await readFile(cfg.temporalTlsCa) } : {}),
    ...(cfg.temporalTlsServerName ? { serverNameOverride: cfg.temporalTlsServerName } : {}),
  };
}

/** A client connection to Temporal with the configured TLS / API key. */
export async function connectClient(cfg: OperatorConfig): Promise<{ client: Client; connection: Connection }> {
  const tls = await tlsOptions(cfg);
  const connection = await Connection.connect({
    address: cfg.temporalAddress,
    ...(tls ? { tls } : {}),
    ...(cfg.temporalApiKey ? { apiKey: cfg.temporalApiKey } : {}),
  });
  return { client: new Client({ connection, namespace: cfg.temporalNamespace }), connection };
}

/** The worker's native connection with the same settings. */
export async function connectWorker(cfg: OperatorConfig): Promise<NativeConnection> {
  const tls = await tlsOptions(cfg);
  const opts: NativeConnectionOptions = {
    address: cfg.temporalAddress,
    ...(tls ? { tls: tls } : {}),
    ...(cfg.temporalApiKey ? { apiKey: cfg.temporalApiKey } : {}),
  };
  return NativeConnection.connect(opts);
}
