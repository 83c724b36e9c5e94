import { KubeConfig } from '@kubernetes/client-node';
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { Kube, KubeError } from '../../kube/client.ts';
import { fakeApiServer, tokenConfig } from '../fixtures/fake-api-server.ts';
import { collectionPath, objectPath, pluralOf, type ObjectRef } from '../../kube/resources.ts';

describe('collectionPath', () => {
  const cases: { name: string; apiVersion: string; kind: string; namespace?: string; path: string }[] = [
    { name: 'core, in a namespace', apiVersion: 'v1', kind: 'Service', namespace: 'prod', path: '/api/v1/namespaces/prod/services' },
    { name: 'core, all namespaces', apiVersion: 'v1', kind: 'Pod', path: '/api/v1/pods' },
    { name: 'grouped, in a namespace', apiVersion: 'apps/v1', kind: 'Deployment', namespace: 'prod', path: '/apis/apps/v1/namespaces/prod/deployments' },
    { name: 'grouped, all namespaces', apiVersion: 'myapp.example.com/v1', kind: 'Application', path: '/apis/myapp.example.com/v1/applications' },
    { name: 'cluster-scoped ignores a namespace', apiVersion: 'v1', kind: 'Namespace', namespace: 'prod', path: '/api/v1/namespaces' },
    {
      name: 'same kind in another group',
      apiVersion: 'events.k8s.io/v1',
      kind: 'Event',
      namespace: 'prod',
      path: '/apis/events.k8s.io/v1/namespaces/prod/events',
    },
  ];
  for (const c of cases) test(c.name, () => assert.equal(collectionPath(c), c.path));
});

describe('objectPath', () => {
  const cases: { name: string; ref: ObjectRef; subresource?: string; path: string }[] = [
    { name: 'core', ref: { apiVersion: 'v1', kind: 'ConfigMap', namespace: 'prod', name: 'cfg' }, path: '/api/v1/namespaces/prod/configmaps/cfg' },
    {
      name: 'grouped',
      ref: { apiVersion: 'networking.istio.io/v1', kind: 'VirtualService', namespace: 'prod', name: 'shop' },
      path: '/apis/networking.istio.io/v1/namespaces/prod/virtualservices/shop',
    },
    { name: 'cluster-scoped', ref: { apiVersion: 'v1', kind: 'Namespace', name: 'prod' }, path: '/api/v1/namespaces/prod' },
    { name: 'cluster-scoped ignores a namespace', ref: { apiVersion: 'v1', kind: 'Namespace', namespace: 'x', name: 'prod' }, path: '/api/v1/namespaces/prod' },
    {
      name: 'status subresource',
      ref: { apiVersion: 'myapp.example.com/v1', kind: 'Application', namespace: 'prod', name: 'shop' },
      subresource: 'status',
      path: '/apis/myapp.example.com/v1/namespaces/prod/applications/shop/status',
    },
    {
      name: 'scale subresource',
      ref: { apiVersion: 'apps/v1', kind: 'Deployment', namespace: 'prod', name: 'shop-canary' },
      subresource: 'scale',
      path: '/apis/apps/v1/namespaces/prod/deployments/shop-canary/scale',
    },
  ];
  for (const c of cases) test(c.name, () => assert.equal(objectPath(c.ref, c.subresource), c.path));

  test('a namespaced kind without a namespace throws', () => {
    assert.throws(() => objectPath({ apiVersion: 'apps/v1', kind: 'Deployment', name: 'shop' }), /Deployment shop needs a namespace/);
  });

  const unknown: { name: string; apiVersion: string; kind: string }[] = [
    { name: 'unknown kind', apiVersion: 'v1', kind: 'ServiceAccount' },
    { name: 'known kind in the wrong group', apiVersion: 'v1', kind: 'Deployment' },
    { name: 'known kind at another version', apiVersion: 'networking.istio.io/v1beta1', kind: 'VirtualService' },
  ];
  for (const c of unknown) {
    test(`${c.name} throws`, () => {
      const message = new RegExp(`unknown kind ${c.kind} in ${c.apiVersion.replaceAll('.', '\\.')}`);
      assert.throws(() => objectPath({ apiVersion: c.apiVersion, kind: c.kind, namespace: 'prod', name: 'x' }), message);
      assert.throws(() => collectionPath({ ...c, namespace: 'prod' }), message);
      assert.throws(() => pluralOf(c.apiVersion, c.kind), message);
    });
  }
});

describe('pluralOf', () => {
  test('HorizontalPodAutoscaler', () => assert.equal(pluralOf('autoscaling/v2', 'HorizontalPodAutoscaler'), 'horizontalpodautoscalers'));
  test('Lease', () => assert.equal(pluralOf('coordination.k8s.io/v1', 'Lease'), 'leases'));
});

describe('KubeError.overQuota: a refusal that others freeing some quota may end', () => {
  test('a quota says so; a policy does not', () => {
    assert.equal(new KubeError(403, 'Forbidden', 'jobs.batch "c" is forbidden: exceeded quota: jobs, requested: count/jobs.batch=1, used: count/jobs.batch=5, limited: count/jobs.batch=5').overQuota, true);
    assert.equal(new KubeError(403, 'Forbidden', 'jobs.batch "c" is forbidden: ValidatingAdmissionPolicy \'p\' with binding \'p\' denied request: no').overQuota, false);
    assert.equal(new KubeError(422, 'Invalid', 'exceeded quota').overQuota, false, 'only a 403');
  });
});

describe('KubeError.forbiddenByRole: a verb the caller\'s role does not grant', () => {
  test('authorization says so; admission, a namespace going and a 401 do not', () => {
    const forbidden = (status: number, message: string) => new KubeError(status, 'Forbidden', message).forbiddenByRole;
    assert.equal(forbidden(403, 'deployments.apps "shop" is forbidden: User "system:serviceaccount:ops:operator" cannot patch resource "deployments" in API group "apps" in the namespace "prod"'), true);
    assert.equal(forbidden(403, 'horizontalpodautoscalers.autoscaling "shop" is forbidden: User "jane" cannot create resource "horizontalpodautoscalers" in API group "autoscaling" in the namespace "prod"'), true);
    assert.equal(forbidden(403, 'deployments.apps "shop" is forbidden: ValidatingAdmissionPolicy \'p\' with binding \'p\' denied request: cannot patch resource "x" as asked'), false, 'a policy\'s words');
    assert.equal(forbidden(403, 'deployments.apps "shop" is forbidden: ValidatingAdmissionPolicy \'p\' with binding \'p\' denied request: at most 5 replicas'), false);
    assert.equal(forbidden(403, 'deployments.apps "shop" is forbidden: unable to create new content in namespace prod because it is being terminated'), false);
    assert.equal(forbidden(403, 'deployments.apps "shop" is forbidden: not yet ready to handle request'), false);
    assert.equal(forbidden(401, 'Unauthorized'), false);
  });
});

describe('KubeError.permanent', () => {
  const cases: { status: number; reason: string; message: string; permanent: boolean }[] = [
    { status: 400, reason: 'BadRequest', message: 'bad request', permanent: true },
    { status: 415, reason: 'UnsupportedMediaType', message: 'unsupported media type', permanent: true },
    { status: 422, reason: 'Invalid', message: 'spec.replicas: Invalid value: -1', permanent: true },
    {
      status: 500,
      reason: 'InternalError',
      message: 'failed to create typed patch object (prod/shop; apps/v1, Kind=Deployment): .spec.foo: field not declared in schema',
      permanent: true,
    },
    { status: 500, reason: 'InternalError', message: 'etcdserver: request timed out', permanent: false },
    { status: 409, reason: 'Conflict', message: 'the object has been modified', permanent: false },
    { status: 429, reason: 'TooManyRequests', message: 'too many requests', permanent: false },
    { status: 503, reason: 'ServiceUnavailable', message: 'failed to create typed patch object', permanent: false },
    { status: 404, reason: 'NotFound', message: 'deployments.apps "shop" not found', permanent: false },
    // Admission refused what the object says: the same request is refused again until it or the policy changes.
    { status: 403, reason: 'Forbidden', message: 'deployments.apps "shop" is forbidden: ValidatingAdmissionPolicy \'max-replicas\' with binding \'max-replicas\' denied request: at most 5 replicas', permanent: true },
    { status: 403, reason: 'Forbidden', message: 'admission webhook "validate.kyverno.svc-fail" denied the request: policy require-labels: fail', permanent: true },
    { status: 403, reason: 'Forbidden', message: 'persistentvolumeclaims "db" is forbidden: exceeded quota: storage, requested: requests.storage=5Gi, used: requests.storage=0, limited: requests.storage=1Gi', permanent: true },
    { status: 403, reason: 'Forbidden', message: 'persistentvolumeclaims "db" is forbidden: maximum storage usage per PersistentVolumeClaim is 1Gi, but request is 5Gi', permanent: true },
    { status: 403, reason: 'Forbidden', message: 'persistentvolumeclaims "db" is forbidden: failed quota: storage: must specify requests.storage', permanent: true },
    // Authorization may be granted, a namespace admission may become ready, a namespace being deleted is its own case.
    { status: 403, reason: 'Forbidden', message: 'deployments.apps "shop" is forbidden: User "system:serviceaccount:ops:operator" cannot patch resource "deployments" in API group "apps" in the namespace "prod"', permanent: false },
    { status: 403, reason: 'Forbidden', message: 'deployments.apps "shop" is forbidden: not yet ready to handle request', permanent: false },
    { status: 403, reason: 'Forbidden', message: 'deployments.apps "shop" is forbidden: unable to create new content in namespace prod because it is being terminated', permanent: false },
  ];
  for (const c of cases) {
    test(`${c.status} ${c.reason}${[403, 500, 503].includes(c.status) ? `: ${c.message.slice(-60)}` : ''}`, () => {
      const err = new KubeError(c.status, c.reason, c.message);
      assert.equal(err.permanent, c.permanent);
      assert.ok(err instanceof Error);
      assert.deepEqual([err.name, err.status, err.reason, err.message], ['KubeError', c.status, c.reason, c.message]);
    });
  }
});

const ns = { apiVersion: 'v1', kind: 'Namespace', name: 'default' };

describe('Kube transport', () => {
  test('keeps one connection alive across sequential requests (a TLS handshake per request costs both sides)', async () => {
    const api = await fakeApiServer((_req, res) => res.end(JSON.stringify({ kind: 'Namespace' })));
    try {
      const kube = new Kube(api.kc);
      for (let i = 0; i < 10; i++) assert.deepEqual(await kube.get(ns), { kind: 'Namespace' });
      assert.equal(api.connections(), 1);
    } finally {
      await api.close();
    }
  });

  test('tells onWrite of every write\'s answer (null for a delete), and of no read or dry-run', async () => {
    const api = await fakeApiServer((req, res) => {
      res.end(JSON.stringify({ apiVersion: 'v1', kind: 'ConfigMap', metadata: { name: 'c', namespace: 'prod', resourceVersion: req.method } }));
    });
    try {
      const kube = new Kube(api.kc);
      const told: string[] = [];
      kube.onWrite = (ref, answer) => told.push(`${ref.kind}/${ref.name}: ${answer?.metadata.resourceVersion ?? 'gone'}`);
      const c = { apiVersion: 'v1', kind: 'ConfigMap', metadata: { name: 'c', namespace: 'prod' } };
      const ref = { apiVersion: 'v1', kind: 'ConfigMap', namespace: 'prod', name: 'c' };
      await kube.get(ref);
      await kube.apply(c, { fieldManager: 't', dryRun: true });
      assert.deepEqual(told, []);
      await kube.apply(c, { fieldManager: 't' });
      await kube.mergePatch(ref, {});
      await kube.jsonPatch(ref, [], 'status');
      await kube.create(c);
      await kube.delete(ref);
      assert.deepEqual(told, ['ConfigMap/c: PATCH', 'ConfigMap/c: PATCH', 'ConfigMap/c: PATCH', 'ConfigMap/c: POST', 'ConfigMap/c: gone']);
    } finally {
      await api.close();
    }
  });

  test('a 401 resolves the credentials again and retries once (rotated tokens)', async () => {
    let accepted = 'old';
    const seen: string[] = [];
    const api = await fakeApiServer((req, res) => {
      seen.push(req.headers.authorization ?? '');
      res.statusCode = req.headers.authorization === `Bearer ${accepted}` ? 200 : 401;
      res.end(JSON.stringify(res.statusCode === 200 ? { kind: 'Namespace' } : { kind: 'Status', reason: 'Unauthorized', message: 'Unauthorized' }));
    });
    try {
      const kc = tokenConfig(new KubeConfig(), api.url, 'old');
      const kube = new Kube(kc);
      await kube.get(ns);
      accepted = 'new';
      tokenConfig(kc, api.url, 'new');
      assert.deepEqual(await kube.get(ns), { kind: 'Namespace' });
      assert.deepEqual(seen, ['Bearer old', 'Bearer old', 'Bearer new']);
      accepted = 'newer';
      await assert.rejects(kube.get(ns), (err: unknown) => err instanceof KubeError && err.status === 401);
    } finally {
      await api.close();
    }
  });
});
