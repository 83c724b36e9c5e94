import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { FINALIZER } from '../../api/constants.ts';
import { changeReason, podChangeReason, settledRecord, startupDrift, type Observation, type WatchEvent } from '../../watcher/change.ts';
import { ourNewestWrite, weOwn } from '../../kube/managed-fields.ts';

const app = (o: Partial<Observation> = {}): Observation => ({ kind: 'Application', generation: 1, deleting: false, status: '', finalizer: true, ...o });
const child = (kind: string, o: Partial<Observation> = {}): Observation => ({ kind, generation: 1, deleting: false, status: '{"ready":1}', finalizer: false, ...o });
const ev = (type: WatchEvent['type'], initialSync = false): WatchEvent => ({ type, initialSync });
const T1 = '2026-12-03T10:00:00Z';
const T2 = '2026-12-03T10:00:07Z';

describe('changeReason', () => {
  const cases: { name: string; before: Observation | undefined; after: Observation; event: WatchEvent; reason: string | null }[] = [
    { name: 'an Application listed at start: resync', before: undefined, after: app(), event: ev('add', true), reason: 'resync' },
    { name: 'a new Application: spec', before: undefined, after: app(), event: ev('add'), reason: 'spec' },
    { name: 'a spec change bumps the generation: spec', before: app(), after: app({ generation: 2 }), event: ev('update'), reason: 'spec' },
    { name: 'our own status write: nothing', before: app(), after: app(), event: ev('update'), reason: null },
    { name: 'deletion requested: deleted', before: app(), after: app({ deleting: true }), event: ev('update'), reason: 'deleted' },
    { name: 'a later update while deleting: nothing', before: app({ deleting: true }), after: app({ deleting: true }), event: ev('update'), reason: null },
    { name: 'gone with our finalizer released: the workflow saw it through', before: app(), after: app({ finalizer: true }), event: ev('delete'), reason: null },
    { name: 'gone without our finalizer: deleted', before: app(), after: app({ finalizer: false }), event: ev('delete'), reason: 'deleted' },
    { name: 'a child deleted: drift', before: child('Service'), after: child('Service'), event: ev('delete'), reason: 'child' },
    { name: 'a child edited (generation): drift', before: child('Service'), after: child('Service', { generation: 2 }), event: ev('update'), reason: 'child' },
    { name: 'a child changed by our own apply (generation, ours newest): nothing', before: child('VirtualService', { oursAt: T1 }), after: child('VirtualService', { generation: 2, oursAt: T2 }), event: ev('update'), reason: null },
    { name: 'a child changed by our own apply after a hand edit: nothing', before: child('VirtualService'), after: child('VirtualService', { generation: 2, oursAt: T2 }), event: ev('update'), reason: null },
    { name: 'a Deployment changed by our own apply whose status moved too: child-status', before: child('Deployment'), after: child('Deployment', { generation: 2, oursAt: T2, status: '{"ready":0}' }), event: ev('update'), reason: 'child-status' },
    // kubectl scale and the HPA write through /scale, which records no writer and leaves our older write the newest.
    { name: 'a Deployment scaled through /scale (our write the newest, but not new): drift', before: child('Deployment', { oursAt: T1 }), after: child('Deployment', { generation: 2, oursAt: T1 }), event: ev('update'), reason: 'child' },
    { name: 'a child of ours deleted: drift all the same', before: child('Service', { oursAt: T1 }), after: child('Service', { oursAt: T1 }), event: ev('delete'), reason: 'child' },
    { name: 'a Deployment status moved: child-status', before: child('Deployment'), after: child('Deployment', { status: '{"ready":2}' }), event: ev('update'), reason: 'child-status' },
    { name: "another kind's status: nothing", before: child('HorizontalPodAutoscaler'), after: child('HorizontalPodAutoscaler', { status: '{"x":2}' }), event: ev('update'), reason: null },
    { name: 'a Deployment unchanged: nothing', before: child('Deployment'), after: child('Deployment'), event: ev('update'), reason: null },
    { name: 'a Deployment seen again on a relist: child-status', before: undefined, after: child('Deployment'), event: ev('add'), reason: 'child-status' },
    { name: 'a Deployment with nothing to report yet (just created): nothing', before: undefined, after: child('Deployment', { status: '' }), event: ev('add'), reason: null },
    { name: 'a Service added: nothing (our own apply)', before: undefined, after: child('Service'), event: ev('add'), reason: null },
    { name: 'children listed during the first sync: nothing', before: undefined, after: child('Deployment'), event: ev('add', true), reason: null },
    // The Gateways' report on an HTTPRoute (reconcile/status.ts routeSignature) decides its RouteAccepted condition.
    { name: 'a Gateway reported on an HTTPRoute: child-status', before: child('HTTPRoute', { status: '[]' }), after: child('HTTPRoute', { status: '[["gw/local","c",[["Accepted","True","Accepted"]]]]' }), event: ev('update'), reason: 'child-status' },
    { name: 'an HTTPRoute whose report is unchanged (our weights moved): nothing', before: child('HTTPRoute', { oursAt: T1 }), after: child('HTTPRoute', { generation: 2, oursAt: T2 }), event: ev('update'), reason: null },
    { name: 'an HTTPRoute with no report yet, seen again on a relist: nothing', before: undefined, after: child('HTTPRoute', { status: '[]' }), event: ev('add'), reason: null },
  ];
  for (const c of cases) test(c.name, () => assert.equal(changeReason(c.before, c.after, c.event), c.reason));
});

describe('podChangeReason: a stable pod wakes its workflow only when a new problem keeps it from running', () => {
  const pull = 'ImagePullBackOff container=app image=x:1';
  const config = 'CreateContainerConfigError container=app image=x:1';
  const cases: { name: string; before: string | undefined; after: string; reason: string | null }[] = [
    { name: 'a new pod on its way: nothing', before: undefined, after: '', reason: null },
    { name: 'a pod first seen with a problem (created, or listed again): child-status', before: undefined, after: pull, reason: 'child-status' },
    { name: 'a pod that cannot pull its image: child-status', before: '', after: pull, reason: 'child-status' },
    { name: 'the same problem again (the kubelet retried): nothing', before: pull, after: pull, reason: null },
    { name: 'another problem: child-status', before: pull, after: config, reason: 'child-status' },
    { name: 'the problem gone (its Deployment says the rest): nothing', before: pull, after: '', reason: null },
  ];
  for (const c of cases) test(c.name, () => assert.equal(podChangeReason(c.before, c.after), c.reason));
});

describe('settledRecord: an Application a starting watcher need not signal', () => {
  const children = [{ kind: 'Service', name: 'shop', generation: 1 }, { kind: 'Deployment', name: 'shop', generation: 3 }, { kind: 'PersistentVolumeClaim', name: 'shop-data' }];
  const settled = (metadata: object = {}, status: object = {}) => ({
    metadata: { generation: 4, finalizers: [FINALIZER], ...metadata },
    status: { observedGeneration: 4, phase: 'Running', desiredReplicas: 2, readyReplicas: 2, availableReplicas: 2, children, ...status },
  });

  test('Running, reconciled at this generation, children recorded: its children sorted and its Deployment\'s signature', () => {
    assert.deepEqual(settledRecord(settled()), {
      children: ['Deployment/shop@3', 'PersistentVolumeClaim/shop-data@', 'Service/shop@1'],
      deployment: JSON.stringify(['Running', 2, 2, 2]),
    });
    assert.ok(settledRecord(settled({}, { canary: { phase: 'Promoted' } })), 'a finished rollout is settled');
  });

  const unsettled: [string, ReturnType<typeof settled> | { metadata?: object }][] = [
    ['a spec not reconciled yet', settled({ generation: 5 })],
    ['never reconciled', settled({}, { observedGeneration: undefined })],
    ['Updating', settled({}, { phase: 'Updating' })],
    ['Failed', settled({}, { phase: 'Failed' })],
    ['a rollout in flight', settled({}, { canary: { phase: 'Paused' } })],
    ['being deleted', settled({ deletionTimestamp: '2026-12-02T00:00:00Z' })],
    ['without our finalizer', settled({ finalizers: [] })],
    ['children not recorded (an older operator\'s status)', settled({}, { children: undefined })],
    ['no status', { metadata: { generation: 1, finalizers: [FINALIZER] } }],
  ];
  for (const [name, obj] of unsettled) test(`not settled: ${name}`, () => assert.equal(settledRecord(obj), null));

  test('with an HTTPRoute: its RouteAccepted condition\'s status and reason too, or \'\' when status has none (an older operator\'s)', () => {
    const routed = [...children, { kind: 'HTTPRoute', name: 'shop', generation: 1 }];
    const accepted = { type: 'RouteAccepted', status: 'True', reason: 'Accepted', message: 'served' };
    assert.equal(settledRecord(settled({}, { children: routed, conditions: [{ type: 'Ready', status: 'True', reason: 'AllReplicasReady' }, accepted] }))?.route, 'True/Accepted');
    assert.equal(settledRecord(settled({}, { children: routed }))?.route, '');
    assert.equal(settledRecord(settled())?.route, undefined, 'no route, nothing to compare');
  });
});

describe('startupDrift: what changed while no watcher watched', () => {
  const record = { children: ['Deployment/shop@3', 'HorizontalPodAutoscaler/shop@1', 'Service/shop@1'], deployment: JSON.stringify(['Running', 2, 2, 2]) };
  const watched = new Set(['Deployment', 'Service', 'HorizontalPodAutoscaler']);
  const listed = ['Service/shop@1', 'Deployment/shop@3', 'HorizontalPodAutoscaler/shop@1'];

  test('as recorded, in any order, with the Deployment as status says: nothing', () => {
    assert.equal(startupDrift(record, listed, watched, record.deployment), null);
  });
  test('a recorded child of a kind not watched (this cluster does not serve it) is not expected', () => {
    assert.equal(startupDrift(record, listed.filter((c) => !c.startsWith('Horizontal')), new Set(['Deployment', 'Service']), record.deployment), null);
  });
  const drifts: [string, string[], string | undefined, RegExp][] = [
    ['a child deleted', listed.filter((c) => !c.startsWith('Service')), record.deployment, /-Service\/shop@1/],
    ['a child edited (its generation moved)', ['Service/shop@1', 'Deployment/shop@4', 'HorizontalPodAutoscaler/shop@1'], record.deployment, /-Deployment\/shop@3 \+Deployment\/shop@4/],
    ['a child that status does not name (a canary left over)', [...listed, 'Deployment/shop-canary@1'], record.deployment, /\+Deployment\/shop-canary@1/],
    ['pods lost: the Deployment no longer ready', listed, JSON.stringify(['Pending', 2, 0, 0]), /stable Deployment is .*Pending/],
    ['the Deployment not listed at all', listed, undefined, /not listed/],
  ];
  for (const [name, now, deployment, why] of drifts) {
    test(`changed: ${name}`, () => assert.match(startupDrift(record, now, watched, deployment) ?? '', why));
  }

  describe('an HTTPRoute\'s Gateways', () => {
    const routed = { ...record, route: 'True/Accepted' };
    test('reporting what status says, or the route not listed whole: nothing', () => {
      assert.equal(startupDrift(routed, listed, watched, record.deployment, 'True/Accepted'), null);
      assert.equal(startupDrift(routed, listed, watched, record.deployment, undefined), null);
    });
    test('reporting something else (a Gateway deleted while away): changed', () => {
      assert.match(startupDrift(routed, listed, watched, record.deployment, 'Unknown/NoGatewayReport') ?? '', /report Unknown\/NoGatewayReport, status says RouteAccepted True\/Accepted/);
    });
    test('status without RouteAccepted (written before the operator had it): changed, so a pass writes it', () => {
      assert.match(startupDrift({ ...record, route: '' }, listed, watched, record.deployment, 'True/Accepted') ?? '', /status says RouteAccepted nothing/);
    });
  });
});

describe('ourNewestWrite', () => {
  const e = (manager: string, time: string, subresource?: string) => ({ manager, time, ...(subresource ? { subresource } : {}) });
  test('our apply after every other writer: ours, and when', () => assert.equal(ourNewestWrite([e('kubectl-edit', '2026-12-03T10:00:00Z'), e('application-operator', '2026-12-03T10:00:05Z')]), '2026-12-03T10:00:05Z'));
  test('a hand edit after our apply: not ours', () => assert.equal(ourNewestWrite([e('application-operator', '2026-12-03T10:00:00Z'), e('kubectl-edit', '2026-12-03T10:00:05Z')]), undefined));
  test('the same second: not ours (a hand edit is put back rather than missed)', () => assert.equal(ourNewestWrite([e('application-operator', '2026-12-03T10:00:05Z'), e('kubectl-patch', '2026-12-03T10:00:05Z')]), undefined));
  test('status writes are left out', () => assert.equal(ourNewestWrite([e('application-operator', '2026-12-03T10:00:00Z'), e('kube-controller-manager', '2026-12-03T10:00:09Z', 'status')]), '2026-12-03T10:00:00Z'));
  test('a scale by another that records itself counts', () => assert.equal(ourNewestWrite([e('application-operator', '2026-12-03T10:00:00Z'), e('kube-controller-manager', '2026-12-03T10:00:09Z', 'scale')]), undefined));
  test('our latest entry is the one that counts', () => assert.equal(ourNewestWrite([e('application-operator', '2026-12-03T10:00:09Z'), e('application-operator', '2026-12-03T10:00:01Z', 'scale')]), '2026-12-03T10:00:09Z'));
  test('no entry of ours, or none at all: not ours', () => {
    assert.equal(ourNewestWrite([e('kubectl-client-side-apply', '2026-12-03T10:00:00Z')]), undefined);
    assert.equal(ourNewestWrite(undefined), undefined);
    assert.equal(ourNewestWrite([]), undefined);
  });
});

describe('weOwn: whether the operator\'s entry owns a field', () => {
  const entry = (manager: string, fieldsV1: object, subresource?: string) => ({ manager, time: '2026-12-07T10:00:00Z', fieldsV1: fieldsV1 as Record<string, unknown>, ...(subresource ? { subresource } : {}) });
  test('owned: spec.replicas in the operator\'s apply', () => assert.equal(weOwn([entry('application-operator', { 'f:spec': { 'f:replicas': {} } })], ['spec', 'replicas']), true));
  test('taken by /scale: the entry is there, the field is not', () => assert.equal(weOwn([entry('application-operator', { 'f:spec': { 'f:template': {} } })], ['spec', 'replicas']), false));
  test('another manager\'s, or the operator\'s status entry, is not the operator\'s', () => {
    assert.equal(weOwn([entry('kubectl', { 'f:spec': { 'f:replicas': {} } })], ['spec', 'replicas']), false);
    assert.equal(weOwn([entry('application-operator', { 'f:spec': { 'f:replicas': {} } }, 'status')], ['spec', 'replicas']), false);
  });
  test('no entries, no fields', () => {
    assert.equal(weOwn(undefined, ['spec', 'replicas']), false);
    assert.equal(weOwn([{ manager: 'application-operator', time: '2026-12-07T10:00:00Z' }], ['spec', 'replicas']), false);
  });
});
