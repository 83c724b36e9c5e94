import { Client, Connection } from '@temporalio/client';
import { NativeConnection, Worker } from '@temporalio/worker';
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { describe, it } from 'node:test';
import { testEnv, workflowBundle } from '../../testkit/env.ts';

describe('local Temporal dev server', () => {
  it('runs a workflow on a real worker and records its history', async () => {
    const env = await testEnv();
    const taskQueue = `temporal-test-${randomUUID()}`;
    const nativeConnection = await NativeConnection.connect({ address: env.temporalAddress });
    const worker = await Worker.create({ connection: nativeConnection, namespace: env.temporalNamespace, taskQueue, workflowBundle: await workflowBundle() });
    const connection = await Connection.connect({ address: env.temporalAddress });
    const client = new Client({ connection, namespace: env.temporalNamespace });
    try {
      const result = await worker.runUntil(client.workflow.execute('sleeperWorkflow', { taskQueue, workflowId: `sleeper-${randomUUID()}`, args: [{ sleepMs: 100, token: 'x' }] }));
      assert.equal(result, 'woke:x');
    } finally {
      await connection.close();
      await nativeConnection.close();
    }
  });
});
