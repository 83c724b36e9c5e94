// Disruptive: restarts the run's shared Temporal server, so test/run.ts runs this folder after the others, one file at a time.
import { Client, Connection } from '@temporalio/client';
import { NativeConnection, Worker } from '@temporalio/worker';
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { describe, it } from 'node:test';
import { startServer, stopServer } from '../../stack/stack.ts';
import { ownStack, testEnv, workflowBundle } from '../../testkit/env.ts';
import { eventually } from '../../lib/poll.ts';

describe('local Temporal dev server', () => {
  it('runs a workflow on a worker and resumes a sleeping workflow after a server restart on the same database', async () => {
    const env = await testEnv();
    const stack = await ownStack();
    const taskQueue = `stack-test-${randomUUID()}`;
    const workflowId = `sleeper-${randomUUID()}`;

    const runWorker = async () => {
      const connection = await NativeConnection.connect({ address: env.temporalAddress });
      const worker = await Worker.create({ connection, namespace: env.temporalNamespace, taskQueue, workflowBundle: await workflowBundle() });
      const running = worker.run();
      return { worker, running, connection };
    };

    let w = await runWorker();
    let connection = await Connection.connect({ address: env.temporalAddress });
    let client = new Client({ connection, namespace: env.temporalNamespace });
    await client.workflow.start('sleeperWorkflow', { taskQueue, workflowId, args: [{ sleepMs: 8000, token: 'a' }] });
    // Wait until the timer is durably recorded before pulling the server down.
    await eventually('timer started', async () => {
      const history = await client.workflow.getHandle(workflowId).fetchHistory();
      return history.events?.some((e) => e.timerStartedEventAttributes) ? true : undefined;
    });

    w.worker.shutdown();
    await w.running;
    await w.connection.close();
    await connection.close();

    await stopServer(stack, 'temporal', 'SIGKILL');
    await startServer(stack, 'temporal');

    w = await runWorker();
    try {
      connection = await Connection.connect({ address: env.temporalAddress });
      client = new Client({ connection, namespace: env.temporalNamespace });
      const result = await client.workflow.getHandle(workflowId).result();
      assert.equal(result, 'woke:a');
    } finally {
      w.worker.shutdown();
      await w.running;
      await w.connection.close();
      await connection.close();
    }
  });
});
