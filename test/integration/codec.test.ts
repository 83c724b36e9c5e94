// Payload encryption on the real Temporal dev server: with the codec, the stored history holds no plaintext of a
// workflow's input or result; without it (the control) it does, so the check can fail.
import { Client, Connection } from '@temporalio/client';
import proto from '@temporalio/proto';
import { DefaultLogger, NativeConnection, Runtime, Worker } from '@temporalio/worker';
import assert from 'node:assert/strict';
import { randomBytes, randomUUID } from 'node:crypto';
import { mkdtemp, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import type { OperatorConfig } from '../../operator/config.ts';
import { connectClient, dataConverterFor } from '../../operator/temporal.ts';
import { testEnv, workflowBundle } from '../../testkit/env.ts';

type Cfg = Pick<OperatorConfig, 'temporalAddress' | 'temporalNamespace' | 'payloadEncryptionKeyFile'>;

/** Runs sleeperWorkflow with a secret token on a worker of its own, both sides built from cfg; returns what the client got and the raw history. */
async function runSleeper(cfg: Cfg, token: string): Promise<{ result: string; historyBytes: Buffer; workflowId: string }> {
  const taskQueue = `codec-${randomUUID()}`;
  const workflowId = `codec-${randomUUID()}`;
  const { client, connection } = await connectClient(cfg);
  const native = await NativeConnection.connect({ address: cfg.temporalAddress });
  try {
    const worker = await Worker.create({
      connection: native, namespace: cfg.temporalNamespace, taskQueue, workflowBundle: await workflowBundle(),
      dataConverter: await dataConverterFor(cfg),
    });
    const result = await worker.runUntil(client.workflow.execute('sleeperWorkflow', { taskQueue, workflowId, args: [{ sleepMs: 10, token }] })) as string;
    const history = await plain.workflow.getHandle(workflowId).fetchHistory();
    return { result, historyBytes: Buffer.from(proto.temporal.api.history.v1.History.encode(history).finish()), workflowId };
  } finally {
    await native.close();
    await connection.close();
  }
}

let plainConnection: Connection;
/** A client without the codec: what anyone reading the Temporal server sees. */
let plain: Client;

describe('payload encryption', () => {
  let cfg: Cfg;
  before(async () => {
    Runtime.install({ logger: new DefaultLogger('WARN') });
    const env = await testEnv();
    assert.equal(process.env['PAYLOAD_ENCRYPTION_KEY'], undefined, 'the test configures its key through a file');
    const dir = await mkdtemp(join(tmpdir(), 'codec-it-'));
    await writeFile(join(dir, 'keys'), `it-key:${randomBytes(32).toString('base64')}\n`);
    cfg = { temporalAddress: env.temporalAddress, temporalNamespace: env.temporalNamespace, payloadEncryptionKeyFile: join(dir, 'keys') };
    plainConnection = await Connection.connect({ address: env.temporalAddress });
    plain = new Client({ connection: plainConnection, namespace: env.temporalNamespace });
  });
  after(async () => plainConnection?.close());

  it('keeps a secret input and result out of the stored history, and the client with the key still reads them', async () => {
    const secret = `db-password-${randomBytes(8).toString('hex')}`;
    const run = await runSleeper(cfg, secret);
    assert.equal(run.result, `woke:${secret}`, 'the worker and the client with the key see the plaintext');
    for (const form of [secret, Buffer.from(secret).toString('base64'), Buffer.from(`"${secret}"`).toString('base64')]) {
      assert.equal(run.historyBytes.indexOf(form), -1, `history contains ${form === secret ? 'the secret' : 'a base64 form of the secret'}`);
    }
    assert.ok(run.historyBytes.includes('binary/encrypted'), 'payloads are marked encrypted');
    assert.ok(run.historyBytes.includes('it-key'), 'payloads name their key');
    // Without the key the result cannot be decoded at all.
    await assert.rejects(plain.workflow.getHandle(run.workflowId).result(), /binary\/encrypted|[Uu]nknown encoding/);
  });

  it('control: without a key the same run stores the secret in clear (so the check above can fail)', async () => {
    const secret = `db-password-${randomBytes(8).toString('hex')}`;
    const run = await runSleeper({ ...cfg, payloadEncryptionKeyFile: undefined }, secret);
    assert.equal(run.result, `woke:${secret}`);
    assert.ok(run.historyBytes.includes(secret), 'the plaintext secret is in the history');
  });
});
