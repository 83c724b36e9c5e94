import { Client, Connection, type ClientOptions, type ConnectionOptions } from '@temporalio/client';
import type { DataConverter } from '@temporalio/common';
import { NativeConnection, type NativeConnectionOptions } from '@temporalio/worker';
import { readFile } from 'node:fs/promises';
import { AesGcmPayloadCodec, loadPayloadKeys } from './codec.ts';
import type { ClientConfig, OperatorConfig } from './config.ts';

type TlsOptions = ConnectionOptions['tls'];

async function tlsOptions(cfg: ClientConfig): Promise<TlsOptions> {
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
export async function connectClient(cfg: ClientConfig, interceptors?: ClientOptions['interceptors']): Promise<{ client: Client; connection: Connection }> {
  const tls = await tlsOptions(cfg);
  const connection = await Connection.connect({
    address: cfg.temporalAddress,
    ...(tls ? { tls } : {}),
    ...(cfg.temporalApiKey ? { apiKey: cfg.temporalApiKey } : {}),
  });
  return { client: await clientOver(connection, cfg, interceptors), connection };
}

/**
 * A client over a connection already open: the worker's NativeConnection, over which the watcher can start
 * workflows eagerly (their first task handed to this process's worker in the start's answer).
 */
export async function clientOver(connection: Connection | NativeConnection, cfg: ClientConfig, interceptors?: ClientOptions['interceptors']): Promise<Client> {
  return new Client({ connection, namespace: cfg.temporalNamespace, dataConverter: await dataConverterFor(cfg), ...(interceptors ? { interceptors } : {}) });
}

/**
 * The data converter every client and worker of the operator must share: with payload encryption configured
 * (--payload-encryption-key-file or PAYLOAD_ENCRYPTION_KEY), an AES-256-GCM codec; otherwise the SDK's default.
 */
export async function dataConverterFor(cfg: Pick<OperatorConfig, 'payloadEncryptionKeyFile'>, env: NodeJS.ProcessEnv = process.env): Promise<DataConverter> {
  const keys = await loadPayloadKeys({ file: cfg.payloadEncryptionKeyFile, value: env['PAYLOAD_ENCRYPTION_KEY'] });
  return keys ? { payloadCodecs: [new AesGcmPayloadCodec(keys)] } : {};
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
