import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import type { KubeObject } from '../../kube/client.ts';
import { compareVersions, RecentObjects } from '../../kube/recent.ts';
import type { ObjectRef } from '../../kube/resources.ts';

const ref: ObjectRef = { apiVersion: 'apps/v1', kind: 'Deployment', namespace: 'prod', name: 'web' };
const deployment = (rv: string, replicas = 1): KubeObject => ({
  apiVersion: 'apps/v1', kind: 'Deployment',
  metadata: { name: 'web', namespace: 'prod', resourceVersion: rv, managedFields: [{ manager: 'x' }] },
  spec: { replicas },
});

/** A cache following a watch whose latest versions the test sets. */
function following(): { recent: RecentObjects; watched: Map<string, string> } {
  const watched = new Map<string, string>();
  const recent = new RecentObjects(3);
  recent.follow((r) => watched.get(`${r.kind}/${r.namespace}/${r.name}`));
  return { recent, watched };
}

describe('RecentObjects', () => {
  test('serves a copy of the object while its resourceVersion is the one the watch last delivered', () => {
    const { recent, watched } = following();
    recent.remember(deployment('10', 2));
    watched.set('Deployment/prod/web', '10');
    const got = recent.current<KubeObject & { spec: { replicas: number } }>(ref);
    assert.equal(got?.spec.replicas, 2);
    assert.equal(got?.metadata['managedFields'], undefined, 'managed fields are not kept');
    got.spec.replicas = 9;
    assert.equal(recent.current<KubeObject & { spec: { replicas: number } }>(ref)?.spec.replicas, 2, 'a caller cannot change what is kept');
    assert.deepEqual(recent.counts, { served: 2, missed: 0 });
  });

  test('an answer newer than what the watch delivered is served; once the watch moves past it, it is not', () => {
    const { recent, watched } = following();
    watched.set('Deployment/prod/web', '10');
    recent.remember(deployment('11'));
    assert.equal(recent.current(ref)?.metadata.resourceVersion, '11', 'read after the watch\'s 10: the newer copy');
    watched.set('Deployment/prod/web', '11');
    assert.equal(recent.current(ref)?.metadata.resourceVersion, '11');
    watched.set('Deployment/prod/web', '12');
    assert.equal(recent.current(ref), undefined, 'someone wrote 12');
    recent.remember(deployment('9'));
    assert.equal(recent.current(ref), undefined, 'older than the watch\'s 12: never served');
    assert.deepEqual(recent.counts, { served: 2, missed: 2 });
  });

  test('a watch event older than what is kept does not replace it; versions that do not compare are current only while equal', () => {
    const { recent, watched } = following();
    recent.remember(deployment('100', 3));
    recent.remember(deployment('99', 1));
    watched.set('Deployment/prod/web', '99');
    assert.equal(recent.current<KubeObject & { spec: { replicas: number } }>(ref)?.spec.replicas, 3, 'the watch catching up leaves the newer answer');
    recent.forget(ref);
    recent.remember(deployment('abc'));
    watched.set('Deployment/prod/web', 'abb');
    assert.equal(recent.current(ref), undefined, 'opaque versions: not the watch\'s, not served');
    watched.set('Deployment/prod/web', 'abc');
    assert.ok(recent.current(ref), 'opaque but equal');
    recent.remember(deployment('07'));
    watched.set('Deployment/prod/web', '1');
    assert.equal(recent.current(ref), undefined, 'a leading zero is no number: no comparison');
  });

  test('nothing is current without a watch to follow, or once it stops, or once forgotten', () => {
    const recent = new RecentObjects();
    recent.remember(deployment('10'));
    assert.equal(recent.current(ref), undefined);
    recent.follow(() => '10');
    assert.ok(recent.current(ref));
    recent.forget(ref);
    assert.equal(recent.current(ref), undefined);
    recent.remember(deployment('10'));
    recent.follow(undefined);
    assert.equal(recent.current(ref), undefined);
  });

  test('keeps at most its capacity, dropping the least recently used', () => {
    const { recent, watched } = following();
    for (const name of ['a', 'b', 'c']) {
      recent.remember({ ...deployment('1'), metadata: { name, namespace: 'prod', resourceVersion: '1' } });
      watched.set(`Deployment/prod/${name}`, '1');
    }
    assert.ok(recent.current({ ...ref, name: 'a' }), 'a used: b is now the oldest');
    recent.remember({ ...deployment('1'), metadata: { name: 'd', namespace: 'prod', resourceVersion: '1' } });
    watched.set('Deployment/prod/d', '1');
    assert.equal(recent.size, 3);
    assert.equal(recent.current({ ...ref, name: 'b' }), undefined);
    for (const name of ['a', 'c', 'd']) assert.ok(recent.current({ ...ref, name }), name);
  });

  test('this process\'s own write is never served as it was before it: its answer is, before the watch delivers it', () => {
    const { recent, watched } = following();
    recent.remember(deployment('10', 1));
    watched.set('Deployment/prod/web', '10');
    recent.wrote(ref, deployment('11', 3));
    assert.equal(recent.current<KubeObject & { spec: { replicas: number } }>(ref)?.spec.replicas, 3, 'the watch still says 10: the answer, not the copy before it');
    watched.set('Deployment/prod/web', '11');
    assert.equal(recent.current<KubeObject & { spec: { replicas: number } }>(ref)?.spec.replicas, 3);
    recent.wrote(ref, null);
    assert.equal(recent.current(ref), undefined, 'deleted: nothing is served until the watch says otherwise');
  });

  test('a write of a kind not kept drops what is kept of the object', () => {
    const watched = new Map<string, string>([['Deployment/prod/web', '10']]);
    const recent = new RecentObjects(10, new Set(['Service']));
    recent.follow((r) => watched.get(`${r.kind}/${r.namespace}/${r.name}`));
    recent.remember(deployment('10'));
    recent.wrote(ref, deployment('11'));
    assert.equal(recent.size, 0);
    watched.set('Deployment/prod/web', '11');
    assert.equal(recent.current(ref), undefined);
  });

  test('an object without a resourceVersion (a dry-run, a null answer) is not kept', () => {
    const { recent } = following();
    recent.remember(null);
    recent.remember({ apiVersion: 'v1', kind: 'Service', metadata: { name: 'x', namespace: 'prod' } });
    assert.equal(recent.size, 0);
  });

  test('what may exist: this process\'s writes (until it deletes them), then the watch once it has listed, else unknown', () => {
    const hpa: ObjectRef = { apiVersion: 'autoscaling/v2', kind: 'HorizontalPodAutoscaler', namespace: 'prod', name: 'web' };
    const recent = new RecentObjects(2, new Set(['Deployment']));
    assert.equal(recent.mayExist(hpa), undefined, 'no watch, no write: only a read can tell');
    recent.wrote(hpa, { ...hpa, metadata: { name: 'web', namespace: 'prod', resourceVersion: '5' } });
    assert.equal(recent.mayExist(hpa), true, 'written here, though its kind is not kept');
    recent.wrote(hpa, null);
    assert.equal(recent.mayExist(hpa), undefined, 'deleted here');
    recent.wrote(hpa, { ...hpa, metadata: { name: 'web', namespace: 'prod', resourceVersion: '6' } });
    // A write that took the last finalizer off an object being deleted: the answer is its last state, it is gone.
    recent.wrote(hpa, { ...hpa, metadata: { name: 'web', namespace: 'prod', resourceVersion: '7', deletionTimestamp: '2026-12-05T00:00:00Z', finalizers: [] } });
    assert.equal(recent.mayExist(hpa), undefined, 'its last finalizer released here: deleted');
    recent.wrote(hpa, { ...hpa, metadata: { name: 'web', namespace: 'prod', resourceVersion: '8', deletionTimestamp: '2026-12-05T00:00:00Z', finalizers: ['other'] } });
    assert.equal(recent.mayExist(hpa), true, 'another finalizer holds it');
    recent.forget(hpa);
    assert.equal(recent.mayExist(hpa), undefined, 'forgotten (the watch saw it go, or a write conflicted): the watch says again');
    const seen = new Set<string>();
    let listed = false;
    recent.follow(() => undefined, (r) => (listed ? seen.has(r.name) : undefined));
    assert.equal(recent.mayExist(hpa), undefined, 'the watch has not listed yet');
    listed = true;
    assert.equal(recent.mayExist(hpa), false, 'listed, not there');
    seen.add('web');
    assert.equal(recent.mayExist(hpa), true, 'the watch sees it');
    recent.follow(undefined, () => true);
    assert.equal(recent.mayExist(hpa), undefined, 'no watch: presence is not taken without one');
    // Bounded: the oldest writes are forgotten first.
    for (const name of ['a', 'b', 'c']) recent.wrote({ ...hpa, name }, { ...hpa, metadata: { name, namespace: 'prod', resourceVersion: '1' } });
    assert.equal(recent.mayExist({ ...hpa, name: 'a' }), undefined);
    assert.equal(recent.mayExist({ ...hpa, name: 'c' }), true);
  });
});

describe('RecentObjects: kinds the cluster does not serve', () => {
  const route: ObjectRef = { apiVersion: 'gateway.networking.k8s.io/v1', kind: 'HTTPRoute', namespace: 'prod', name: 'web' };
  const other: ObjectRef = { ...route, name: 'api' };

  test('an object of a kind the cluster does not serve cannot exist; one it serves is the watch\'s to say', () => {
    const recent = new RecentObjects();
    recent.follow(() => undefined, () => undefined);
    assert.equal(recent.mayExist(route), undefined, 'nothing known: only a read can tell');
    recent.notServed([{ apiVersion: route.apiVersion, kind: route.kind }]);
    assert.equal(recent.mayExist(route), false);
    assert.equal(recent.mayExist(ref), undefined, 'another kind is untouched');
  });

  test('once this process wrote an object of that kind (its CRD installed since), any may exist again', () => {
    const recent = new RecentObjects();
    recent.follow(() => undefined, () => undefined);
    recent.notServed([{ apiVersion: route.apiVersion, kind: route.kind }]);
    recent.wrote(route, { apiVersion: route.apiVersion, kind: route.kind, metadata: { name: 'web', namespace: 'prod', resourceVersion: '5' } });
    assert.equal(recent.mayExist(route), true, 'the one written');
    assert.equal(recent.mayExist(other), undefined, 'another of its kind: only a read can tell');
    recent.forget(route);
    assert.equal(recent.mayExist(route), undefined, 'forgotten: the kind is still served');
  });

  test('a delete (a finalizer deletes every kind; one not served answers 404) does not say the kind is served', () => {
    const recent = new RecentObjects();
    recent.follow(() => undefined, () => undefined);
    recent.notServed([{ apiVersion: route.apiVersion, kind: route.kind }]);
    recent.wrote(route, null);
    assert.equal(recent.mayExist(other), false);
  });

  test('a new start of the watcher, or a sweep, says again what is not served; with no watcher following, nothing is ruled out', () => {
    const recent = new RecentObjects();
    recent.follow(() => undefined, () => undefined);
    recent.notServed([{ apiVersion: route.apiVersion, kind: route.kind }]);
    recent.notServed([]);
    assert.equal(recent.mayExist(route), undefined);
    recent.notServed([{ apiVersion: route.apiVersion, kind: route.kind }]);
    recent.follow(undefined);
    assert.equal(recent.mayExist(route), undefined, 'a stopped watcher (a standby replica): another process may write such kinds');
  });
});

describe('compareVersions', () => {
  test('orders resource versions as Kubernetes defines them: decimal numbers, the longer newer', () => {
    assert.equal(compareVersions('10', '9')! > 0, true);
    assert.equal(compareVersions('9', '10')! < 0, true);
    assert.equal(compareVersions('123', '124')! < 0, true);
    assert.equal(compareVersions('124', '124'), 0);
    assert.equal(compareVersions('18446744073709551617', '18446744073709551616')! > 0, true, 'beyond a double: compared as text');
  });

  test('anything but a plain decimal number does not compare', () => {
    for (const [a, b] of [['abc', '1'], ['1', ''], ['01', '2'], ['0', '1'], ['1.5', '2'], ['-1', '2'], [' 1', '2']] as const) {
      assert.equal(compareVersions(a, b), undefined, `${JSON.stringify(a)} vs ${JSON.stringify(b)}`);
      assert.equal(compareVersions(b, a), undefined, `${JSON.stringify(b)} vs ${JSON.stringify(a)}`);
    }
  });
});
