// Disruptive: restarts the run's kube-apiserver under a running operator. The watcher's informers stop on the error,
// restart with backoff from their last resourceVersion, and no event is lost.
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { startServer, stopServer } from '../../stack/stack.ts';
import { appManifest, closeTemporal, getDeployment, getObject, kube, testNamespace, waitForObject, waitForPhase, type Json } from '../../testkit/apps.ts';
import { ownStack } from '../../testkit/env.ts';
import { startOperator, type OperatorProcess } from '../../testkit/operator.ts';

const apply = (obj: Json) => kube(['apply', '--server-side', '--field-manager=test-user', '-f', '-'], JSON.stringify(obj));

describe('watcher across an API server restart', () => {
  let ns: { name: string; cleanup: () => Promise<void> };
  let op: OperatorProcess;

  before(async () => {
    ns = await testNamespace('apirestart');
    op = await startOperator({ namespaces: [ns.name] });
  });
  after(async () => {
    await op?.stop();
    await closeTemporal();
    await ns?.cleanup();
  });

  it('keeps reconciling spec changes and drift after kube-apiserver is killed and restarted', async () => {
    const stack = await ownStack();
    await apply(appManifest(ns.name, 'web', { image: 'nginx:1.25', replicas: 1 }));
    await waitForPhase(ns.name, 'web', 'Running');

    await stopServer(stack, 'kube-apiserver', 'SIGKILL');
    await sleep(3000);
    await startServer(stack, 'kube-apiserver');

    // Changes made right after the restart, while the informers may still be backing off, must not be lost.
    await kube(['-n', ns.name, 'patch', 'application', 'web', '--type=merge', '-p', JSON.stringify({ spec: { image: 'nginx:1.27' } })]);
    await waitForObject('image rolled out after the restart', () => getDeployment(ns.name, 'web'), (d) => d?.spec.template.spec.containers[0].image === 'nginx:1.27', 90_000);
    const app = await waitForPhase(ns.name, 'web', 'Running');
    assert.equal(app.status.observedGeneration, 2);

    const before = await getObject('v1', 'Service', ns.name, 'web');
    await kube(['-n', ns.name, 'delete', 'service', 'web']);
    await waitForObject('service recreated', () => getObject('v1', 'Service', ns.name, 'web'), (s) => s !== null && s.metadata.uid !== before!.metadata.uid, 60_000);
    assert.match(await op.logs(), /informer stopped; restarting/, 'the informers did stop and were restarted');
  });
});
