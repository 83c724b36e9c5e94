// The Release's activities on the real API server, without an operator: each is idempotent, as a retry after a lost
// completion (a worker killed after its write) needs.
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { startCanary } from '../../activities/release.ts';
import type { ActivityDeps } from '../../activities/deps.ts';
import { API_VERSION, KIND, RELEASE_ANNOTATION } from '../../api/constants.ts';
import { applyAsUser, getApp, kubeApi, testNamespace, type Json } from '../../testkit/apps.ts';
import { meshApp } from '../../testkit/release.ts';

describe('Release activities', () => {
  let ns: { name: string; cleanup: () => Promise<void> } | undefined;
  let deps: ActivityDeps;
  before(async () => {
    ns = await testNamespace('relact');
    deps = { kube: await kubeApi(), temporalNamespace: 'default' };
  });
  after(async () => ns?.cleanup());

  const claimed = (name: string): Json => {
    const app = meshApp(ns!.name, name);
    return { ...app, metadata: { ...app['metadata'], annotations: { [RELEASE_ANNOTATION]: 'rel' } } };
  };
  const start = (app: string, canaryVersion = '2.0') => startCanary(deps, { namespace: ns!.name, release: 'rel', app, canaryVersion });

  it('startCanary writes the canary once: tried again, it writes nothing', async () => {
    await applyAsUser(claimed('fresh'));
    await start('fresh');
    const first = await getApp(ns!.name, 'fresh');
    assert.deepEqual([first!.spec.serviceMesh.canary.enabled, first!.spec.serviceMesh.canary.canaryVersion], [true, '2.0']);
    await start('fresh');
    assert.equal((await getApp(ns!.name, 'fresh'))!.metadata.resourceVersion, first!.metadata.resourceVersion, 'no second write');
  });

  it('startCanary tried again after the canary ran and was switched off does not switch it back on', async () => {
    // The first try's write landed, the canary ran and its rollout switched it off; the retry comes after.
    await applyAsUser(claimed('ran'));
    const api = await kubeApi();
    await api.mergePatch({ apiVersion: API_VERSION, kind: KIND, namespace: ns!.name, name: 'ran' }, {
      status: { canary: { version: '2.0', image: 'registry.example/ran:2.0', phase: 'Promoted', message: 'promoted' } },
    }, 'status');
    const before = await getApp(ns!.name, 'ran');
    await start('ran');
    const after = await getApp(ns!.name, 'ran');
    assert.equal(after!.spec.serviceMesh.canary?.enabled ?? false, false, 'the canary stays off');
    assert.equal(after!.metadata.resourceVersion, before!.metadata.resourceVersion, 'nothing written');
    // Another version (or image) is a new canary: started.
    await start('ran', '3.0');
    assert.deepEqual([(await getApp(ns!.name, 'ran'))!.spec.serviceMesh.canary.enabled, (await getApp(ns!.name, 'ran'))!.spec.serviceMesh.canary.canaryVersion], [true, '3.0']);
  });
});
