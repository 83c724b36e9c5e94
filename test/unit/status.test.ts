import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { Phase, Reason } from '../../api/constants.ts';
import {
  autoscaledCondition,
  canaryCondition,
  canarySpecCondition,
  decideConditions,
  decidePhase,
  degradedEvent,
  deploymentSignature,
  desiredStatus,
  routeAcceptedCondition,
  routeSignature,
  endpointsOf,
  needsPods,
  appImage,
  podIssue,
  podSignature,
  statusChanged,
  withCanaryCondition,
  withTransitionTimes,
  type Condition,
  type ObservedPod,
  type PodIssue,
  type Failure,
  type Observed,
  type ObservedDeployment,
  type ObservedService,
} from '../../reconcile/status.ts';

const T0 = '2025-01-01T00:00:00Z';
const T1 = '2025-01-01T00:05:00Z';

function app(deletionTimestamp?: string) {
  return { metadata: { name: 'shop', namespace: 'prod', ...(deletionTimestamp ? { deletionTimestamp } : {}) } };
}

interface DeploymentShape {
  desired?: number;
  generation?: number;
  observedGeneration?: number;
  replicas?: number;
  updated?: number;
  ready?: number;
  available?: number;
  progressing?: { reason: string; message?: string };
}

/** A Deployment of 3 replicas, fully rolled out at generation 2, with `o` overriding any count. */
function deployment(o: DeploymentShape = {}): ObservedDeployment {
  const desired = 'desired' in o ? o.desired : 3;
  return {
    metadata: { generation: o.generation ?? 2 },
    spec: desired === undefined ? {} : { replicas: desired },
    status: {
      observedGeneration: o.observedGeneration ?? 2,
      replicas: o.replicas ?? 3,
      updatedReplicas: o.updated ?? 3,
      readyReplicas: o.ready ?? 3,
      availableReplicas: o.available ?? 3,
      ...(o.progressing ? { conditions: [{ type: 'Progressing', status: 'False', ...o.progressing }] } : {}),
    },
  };
}

function observed(d: ObservedDeployment | null, service: ObservedService | null = null): Observed {
  return { deployment: d, service };
}

const applyFailed: Failure = { reason: Reason.ApplyFailed, message: 'applying Deployment shop: forbidden' };
const invalidSpec: Failure = { reason: Reason.InvalidSpec, message: 'spec.replicas: must be at least 0' };

describe('decidePhase', () => {
  const cases: { name: string; deletion?: string; deployment: ObservedDeployment | null; failure?: Failure; phase: Phase; reason: string; message: string }[] = [
    { name: 'no Deployment yet', deployment: null, phase: Phase.Pending, reason: Reason.DeploymentProgressing, message: 'waiting for the Deployment to report status' },
    {
      name: 'a Deployment without status',
      deployment: { metadata: { generation: 1 }, spec: { replicas: 3 } },
      phase: Phase.Pending,
      reason: Reason.DeploymentProgressing,
      message: 'waiting for the Deployment to report status',
    },
    {
      name: 'new pods not available, not rolled out',
      deployment: deployment({ updated: 0, ready: 0, available: 0 }),
      phase: Phase.Pending,
      reason: Reason.DeploymentProgressing,
      message: '0/3 replicas available',
    },
    {
      name: 'rolled out but no pod available',
      deployment: deployment({ ready: 0, available: 0 }),
      phase: Phase.Pending,
      reason: Reason.NoReplicasReady,
      message: '0/3 replicas available',
    },
    {
      name: 'some pods available',
      deployment: deployment({ ready: 2, available: 2 }),
      phase: Phase.Updating,
      reason: Reason.DeploymentProgressing,
      message: '2/3 replicas available, 3 updated',
    },
    {
      name: 'old pods available, new ones not updated yet',
      deployment: deployment({ updated: 1 }),
      phase: Phase.Updating,
      reason: Reason.DeploymentProgressing,
      message: '3/3 replicas available, 1 updated',
    },
    {
      name: 'surge pod of the old ReplicaSet still around',
      deployment: deployment({ replicas: 4 }),
      phase: Phase.Updating,
      reason: Reason.DeploymentProgressing,
      message: '3/3 replicas available, 3 updated',
    },
    {
      name: 'the Deployment controller has not seen the new generation',
      deployment: deployment({ generation: 3, observedGeneration: 2 }),
      phase: Phase.Updating,
      reason: Reason.DeploymentProgressing,
      message: '3/3 replicas available, 3 updated',
    },
    { name: 'all replicas available', deployment: deployment(), phase: Phase.Running, reason: Reason.AllReplicasReady, message: '3/3 replicas available' },
    {
      name: 'replicas unset means one',
      deployment: deployment({ desired: undefined, replicas: 1, updated: 1, ready: 1, available: 1 }),
      phase: Phase.Running,
      reason: Reason.AllReplicasReady,
      message: '1/1 replicas available',
    },
    {
      name: 'scaled to zero',
      deployment: deployment({ desired: 0, replicas: 0, updated: 0, ready: 0, available: 0 }),
      phase: Phase.Running,
      reason: Reason.AllReplicasReady,
      message: '0/0 replicas available',
    },
    {
      name: 'a Progressing condition that is not a deadline',
      deployment: deployment({ progressing: { reason: 'NewReplicaSetAvailable' } }),
      phase: Phase.Running,
      reason: Reason.AllReplicasReady,
      message: '3/3 replicas available',
    },
    {
      name: 'progress deadline exceeded, with the controller message',
      deployment: deployment({ updated: 1, available: 2, progressing: { reason: 'ProgressDeadlineExceeded', message: 'ReplicaSet "shop-7d" has timed out progressing.' } }),
      phase: Phase.Failed,
      reason: Reason.ProgressDeadlineExceeded,
      message: 'ReplicaSet "shop-7d" has timed out progressing.',
    },
    {
      name: 'progress deadline exceeded, without a message',
      deployment: deployment({ available: 0, progressing: { reason: 'ProgressDeadlineExceeded' } }),
      phase: Phase.Failed,
      reason: Reason.ProgressDeadlineExceeded,
      message: 'the Deployment exceeded its progress deadline',
    },
    { name: 'apply failed, even with a healthy Deployment', deployment: deployment(), failure: applyFailed, phase: Phase.Failed, ...applyFailed },
    { name: 'invalid spec, no Deployment', deployment: null, failure: invalidSpec, phase: Phase.Failed, ...invalidSpec },
    {
      name: 'being deleted wins over a failure',
      deletion: T0,
      deployment: deployment(),
      failure: applyFailed,
      phase: Phase.Deleting,
      reason: Reason.Deleting,
      message: 'removing children before releasing the finalizer',
    },
  ];
  for (const c of cases) {
    test(c.name, () => {
      assert.deepEqual(decidePhase(app(c.deletion), observed(c.deployment), c.failure ?? null), { phase: c.phase, reason: c.reason, message: c.message });
    });
  }
});

describe('endpointsOf', () => {
  const svc = (spec: ObservedService['spec'], status?: ObservedService['status'], namespace: string | null = 'prod'): ObservedService => ({
    metadata: { name: 'shop', ...(namespace !== null ? { namespace } : {}) },
    spec,
    ...(status ? { status } : {}),
  });
  const cases: { name: string; service: ObservedService | null; endpoints: string[] }[] = [
    { name: 'no Service', service: null, endpoints: [] },
    { name: 'a Service without spec', service: { metadata: { name: 'shop' } }, endpoints: [] },
    { name: 'ClusterIP, one DNS name per port', service: svc({ type: 'ClusterIP', ports: [{ port: 80 }, { port: 9102 }] }), endpoints: ['shop.prod.svc:80', 'shop.prod.svc:9102'] },
    { name: 'namespace unset means default', service: svc({ ports: [{ port: 80 }] }, undefined, null), endpoints: ['shop.default.svc:80'] },
    {
      name: 'NodePort adds the node port',
      service: svc({ type: 'NodePort', ports: [{ port: 80, nodePort: 30080 }] }),
      endpoints: ['shop.prod.svc:80', '<node>:30080'],
    },
    {
      name: 'a node port on a ClusterIP Service is not reachable',
      service: svc({ type: 'ClusterIP', ports: [{ port: 80, nodePort: 30080 }] }),
      endpoints: ['shop.prod.svc:80'],
    },
    {
      name: 'LoadBalancer adds each ingress IP or hostname per port',
      service: svc(
        { type: 'LoadBalancer', ports: [{ port: 80, nodePort: 30080 }, { port: 443, nodePort: 30443 }] },
        { loadBalancer: { ingress: [{ ip: '203.0.113.7' }, { hostname: 'lb.example.com' }] } },
      ),
      endpoints: ['shop.prod.svc:80', '203.0.113.7:80', 'lb.example.com:80', 'shop.prod.svc:443', '203.0.113.7:443', 'lb.example.com:443'],
    },
  ];
  for (const c of cases) test(c.name, () => assert.deepEqual(endpointsOf(c.service), c.endpoints));
});

describe('decideConditions', () => {
  type Row = [type: string, status: Condition['status'], reason: string, message: string];
  const msg = 'some message';
  const cases: { name: string; phase: Phase; reason: string; rows: Row[] }[] = [
    {
      name: 'Running',
      phase: Phase.Running,
      reason: Reason.AllReplicasReady,
      rows: [
        ['Ready', 'True', Reason.AllReplicasReady, msg],
        ['Progressing', 'False', Reason.Reconciled, msg],
        ['Degraded', 'False', Reason.Reconciled, 'no problems'],
        ['InvalidSpec', 'False', Reason.ValidSpec, 'spec is valid'],
      ],
    },
    {
      name: 'Pending',
      phase: Phase.Pending,
      reason: Reason.NoReplicasReady,
      rows: [
        ['Ready', 'False', Reason.NoReplicasReady, msg],
        ['Progressing', 'True', Reason.NoReplicasReady, msg],
        ['Degraded', 'False', Reason.Reconciled, 'no problems'],
        ['InvalidSpec', 'False', Reason.ValidSpec, 'spec is valid'],
      ],
    },
    {
      name: 'Updating',
      phase: Phase.Updating,
      reason: Reason.DeploymentProgressing,
      rows: [
        ['Ready', 'False', Reason.DeploymentProgressing, msg],
        ['Progressing', 'True', Reason.DeploymentProgressing, msg],
        ['Degraded', 'False', Reason.Reconciled, 'no problems'],
        ['InvalidSpec', 'False', Reason.ValidSpec, 'spec is valid'],
      ],
    },
    {
      name: 'Failed to apply',
      phase: Phase.Failed,
      reason: Reason.ApplyFailed,
      rows: [
        ['Ready', 'False', Reason.ApplyFailed, msg],
        ['Progressing', 'False', Reason.ApplyFailed, msg],
        ['Degraded', 'True', Reason.ApplyFailed, msg],
        ['InvalidSpec', 'False', Reason.ValidSpec, 'spec is valid'],
      ],
    },
    {
      name: 'Failed on an invalid spec',
      phase: Phase.Failed,
      reason: Reason.InvalidSpec,
      rows: [
        ['Ready', 'False', Reason.InvalidSpec, msg],
        ['Progressing', 'False', Reason.InvalidSpec, msg],
        ['Degraded', 'True', Reason.InvalidSpec, msg],
        ['InvalidSpec', 'True', Reason.InvalidSpec, msg],
      ],
    },
    {
      name: 'Failed on the progress deadline',
      phase: Phase.Failed,
      reason: Reason.ProgressDeadlineExceeded,
      rows: [
        ['Ready', 'False', Reason.ProgressDeadlineExceeded, msg],
        ['Progressing', 'False', Reason.ProgressDeadlineExceeded, msg],
        ['Degraded', 'True', Reason.ProgressDeadlineExceeded, msg],
        ['InvalidSpec', 'False', Reason.ValidSpec, 'spec is valid'],
      ],
    },
    {
      name: 'Deleting',
      phase: Phase.Deleting,
      reason: Reason.Deleting,
      rows: [
        ['Ready', 'False', Reason.Deleting, msg],
        ['Progressing', 'False', Reason.Deleting, msg],
        ['Degraded', 'False', Reason.Reconciled, 'no problems'],
        ['InvalidSpec', 'False', Reason.ValidSpec, 'spec is valid'],
      ],
    },
  ];
  for (const c of cases) {
    test(c.name, () => {
      const expected = c.rows.map(([type, status, reason, message]) => ({ type, status, reason, message, observedGeneration: 7 }));
      assert.deepEqual(decideConditions(c.phase, c.reason, msg, 7), expected);
    });
  }

  test('leaves observedGeneration out when it is unknown', () => {
    for (const c of decideConditions(Phase.Running, Reason.AllReplicasReady, msg, undefined)) assert.ok(!('observedGeneration' in c), c.type);
  });
});

describe('withTransitionTimes', () => {
  const cond = (type: string, status: Condition['status'], lastTransitionTime?: string): Condition => ({
    type,
    status,
    reason: 'R',
    message: 'm',
    ...(lastTransitionTime ? { lastTransitionTime } : {}),
  });
  const next = [cond('Ready', 'True'), cond('Degraded', 'False')];
  const cases: { name: string; previous: Condition[] | undefined; times: [string, string] }[] = [
    { name: 'no previous status: all now', previous: undefined, times: [T1, T1] },
    { name: 'statuses unchanged: times kept', previous: [cond('Ready', 'True', T0), cond('Degraded', 'False', T0)], times: [T0, T0] },
    { name: 'matched by type, not position', previous: [cond('Degraded', 'False', T0), cond('Ready', 'True', T0)], times: [T0, T0] },
    { name: 'a flipped status gets now', previous: [cond('Ready', 'False', T0), cond('Degraded', 'False', T0)], times: [T1, T0] },
    { name: 'a new condition gets now', previous: [cond('Degraded', 'False', T0)], times: [T1, T0] },
    { name: 'a previous condition without a time gets now', previous: [cond('Ready', 'True'), cond('Degraded', 'False', T0)], times: [T1, T0] },
  ];
  for (const c of cases) {
    test(c.name, () => {
      const out = withTransitionTimes(next, c.previous, T1);
      assert.deepEqual(out, [{ ...next[0], lastTransitionTime: c.times[0] }, { ...next[1], lastTransitionTime: c.times[1] }]);
    });
  }

  test('a changed reason alone keeps the time', () => {
    const [out] = withTransitionTimes([{ ...cond('Ready', 'False'), reason: 'NoReplicasReady' }], [{ ...cond('Ready', 'False', T0), reason: 'DeploymentProgressing' }], T1);
    assert.equal(out?.lastTransitionTime, T0);
  });
});

const service: ObservedService = { metadata: { name: 'shop', namespace: 'prod' }, spec: { type: 'ClusterIP', ports: [{ name: 'http', port: 80 }] } };
const info = { workflowId: 'application/prod/shop', temporalUI: 'http://ui/namespaces/default/workflows/application%2Fprod%2Fshop', observedGeneration: 4 };

describe('desiredStatus', () => {
  test('a running app', () => {
    assert.deepEqual(desiredStatus(app(), observed(deployment({ ready: 3 }), service), null, info), {
      observedGeneration: 4,
      phase: Phase.Running,
      message: '3/3 replicas available',
      desiredReplicas: 3,
      replicas: 3,
      readyReplicas: 3,
      availableReplicas: 3,
      selector: 'app.kubernetes.io/name=shop',
      conditions: decideConditions(Phase.Running, Reason.AllReplicasReady, '3/3 replicas available', 4),
      endpoints: ['shop.prod.svc:80'],
      workflowId: 'application/prod/shop',
      temporalUI: info.temporalUI,
    });
  });

  test('counts come from the Deployment status', () => {
    const s = desiredStatus(app(), observed(deployment({ replicas: 4, ready: 2, available: 1 })), null, info);
    assert.deepEqual([s.replicas, s.readyReplicas, s.availableReplicas], [4, 2, 1]);
  });

  test('an invalid spec with nothing observed', () => {
    assert.deepEqual(desiredStatus(app(), observed(null), invalidSpec, { workflowId: 'w', observedGeneration: undefined }), {
      phase: Phase.Failed,
      message: invalidSpec.message,
      replicas: 0,
      readyReplicas: 0,
      availableReplicas: 0,
      selector: 'app.kubernetes.io/name=shop',
      conditions: decideConditions(Phase.Failed, Reason.InvalidSpec, invalidSpec.message, undefined),
      endpoints: [],
      workflowId: 'w',
    });
  });
});

describe('routeAcceptedCondition: whether the Gateways serve the HTTPRoute, as their controllers report', () => {
  const parent = (name: string, namespace?: string) => ({ name, ...(namespace ? { namespace } : {}) });
  const report = (ref: { name: string; namespace?: string }, ...conditions: [string, string, string?, string?][]) => ({
    parentRef: { group: 'gateway.networking.k8s.io', kind: 'Gateway', ...ref }, controllerName: 'traefik.io/gateway-controller',
    conditions: conditions.map(([type, status, reason, message]) => ({ type, status, ...(reason ? { reason } : {}), ...(message ? { message } : {}) })),
  });
  const route = (refs: { name: string; namespace?: string }[], parents?: ReturnType<typeof report>[]) => ({
    metadata: { name: 'shop', namespace: 'prod' }, spec: { parentRefs: refs }, ...(parents ? { status: { parents } } : {}),
  });
  const local = parent('local', 'gateway-system');
  const cases: { name: string; route: Parameters<typeof routeAcceptedCondition>[0]; status: string; reason: string; message: RegExp }[] = [
    { name: 'accepted by its one Gateway', route: route([local], [report(local, ['Accepted', 'True', 'Accepted'], ['ResolvedRefs', 'True', 'ResolvedRefs'])]), status: 'True', reason: 'Accepted', message: /^HTTPRoute shop accepted by Gateway gateway-system\/local$/ },
    { name: "a Gateway of the route's own namespace (parentRef without namespace), reported with it", route: route([parent('edge')], [report(parent('edge', 'prod'), ['Accepted', 'True', 'Accepted'])]), status: 'True', reason: 'Accepted', message: /Gateway prod\/edge$/ },
    { name: 'no report at all (a Gateway that does not exist, or no controller): Unknown, saying what to check', route: route([parent('locall', 'gateway-system')]), status: 'Unknown', reason: 'NoGatewayReport', message: /^no Gateway controller has reported on HTTPRoute shop for Gateway gateway-system\/locall: check that the Gateway exists/ },
    { name: "refused by its listeners: False with the controller's reason and words", route: route([local], [report(local, ['Accepted', 'False', 'NotAllowedByListeners', 'no listener allows routes from prod'])]), status: 'False', reason: 'NotAllowedByListeners', message: /^HTTPRoute shop is not served by Gateway gateway-system\/local \(traefik\.io\/gateway-controller\): Accepted False, NotAllowedByListeners: no listener allows routes from prod$/ },
    { name: 'accepted, but a backend not resolved: False', route: route([local], [report(local, ['Accepted', 'True', 'Accepted'], ['ResolvedRefs', 'False', 'BackendNotFound', 'service prod/shop-stable not found'])]), status: 'False', reason: 'BackendNotFound', message: /ResolvedRefs False, BackendNotFound: service prod\/shop-stable not found/ },
    { name: 'one of two accepted, the other silent: Unknown, naming the silent one', route: route([local, parent('other', 'gateway-system')], [report(local, ['Accepted', 'True', 'Accepted'])]), status: 'Unknown', reason: 'NoGatewayReport', message: /for Gateway gateway-system\/other:/ },
    { name: 'a refusal outranks a silence', route: route([local, parent('other', 'gateway-system')], [report(parent('other', 'gateway-system'), ['Accepted', 'False', 'NoMatchingListenerHostname'])]), status: 'False', reason: 'NoMatchingListenerHostname', message: /Gateway gateway-system\/other .*NoMatchingListenerHostname$/ },
    { name: "a report for another route's parent only (a section of it) does not count", route: route([local], [report({ ...local, sectionName: 'https' } as { name: string; namespace?: string }, ['Accepted', 'True', 'Accepted'])]), status: 'Unknown', reason: 'NoGatewayReport', message: /gateway-system\/local:/ },
    { name: 'no HTTPRoute yet', route: null, status: 'Unknown', reason: 'NoGatewayReport', message: /not there yet/ },
  ];
  for (const c of cases) {
    test(c.name, () => {
      const got = routeAcceptedCondition(c.route, 3);
      assert.equal(got.type, 'RouteAccepted');
      assert.equal(got.status, c.status);
      assert.equal(got.reason, c.reason);
      assert.match(got.message, c.message);
      assert.equal(got.observedGeneration, 3);
    });
  }

  test('desiredStatus carries it only for an Application whose route was observed', () => {
    const accepted = route([local], [report(local, ['Accepted', 'True', 'Accepted'])]);
    assert.equal(desiredStatus(app(), { ...observed(deployment({ ready: 3 }), service), route: accepted }, null, info).conditions.find((c) => c.type === 'RouteAccepted')?.status, 'True');
    assert.equal(desiredStatus(app(), observed(deployment({ ready: 3 }), service), null, info).conditions.find((c) => c.type === 'RouteAccepted'), undefined);
  });

  test('routeSignature: what a controller reports, not when (times and generations move with every weight change)', () => {
    const at = (generation: number, time: string) => route([local], [{ ...report(local, ['Accepted', 'True', 'Accepted']), conditions: [{ type: 'Accepted', status: 'True', reason: 'Accepted', observedGeneration: generation, lastTransitionTime: time } as { type: string; status: string }] }]);
    assert.equal(routeSignature(at(2, 'a')), routeSignature(at(7, 'b')));
    assert.notEqual(routeSignature(at(2, 'a')), routeSignature(route([local], [report(local, ['Accepted', 'False', 'NotAllowedByListeners'])])));
    assert.equal(routeSignature(route([local])), routeSignature(route([local])));
    // The Gateways it names count, reported on or not: the verdict changes with them (Unknown for one not there).
    const nope = { name: 'nope', namespace: 'gateway-system' };
    assert.notEqual(routeSignature(route([nope], [report(local, ['Accepted', 'True', 'Accepted'])])), routeSignature(at(2, 'a')), 'parentRefs changed, the old report still there');
    assert.notEqual(routeSignature(route([nope])), routeSignature(route([local])));
  });
});

type Json = Record<string, any>;

describe('status says why pods do not run, and who owns the replica count', () => {
  const pod = (name: string, containers: Json[], conditions: Json[] = [], deletionTimestamp?: string): ObservedPod =>
    ({ metadata: { name, ...(deletionTimestamp ? { deletionTimestamp } : {}) }, status: { containerStatuses: containers, conditions } }) as ObservedPod;
  const waiting = (reason: string, message?: string, image = 'x:1') => ({ name: 'app', image, state: { waiting: { reason, ...(message ? { message } : {}) } } });
  const cases: { name: string; pods: ObservedPod[]; issue: PodIssue | null }[] = [
    { name: 'no pods yet', pods: [], issue: null },
    { name: 'containers still creating', pods: [pod('a', [waiting('ContainerCreating')])], issue: null },
    {
      name: 'an image that cannot be pulled', pods: [pod('a', [waiting('ImagePullBackOff', 'Back-off pulling image "x"')])],
      issue: { reason: 'ImagePullBackOff', message: 'pod a: container app: ImagePullBackOff: Back-off pulling image "x"', key: 'ImagePullBackOff container=app image=x:1' },
    },
    {
      name: "the kubelet's pull retry between back-offs: the same problem",
      pods: [pod('a', [waiting('ErrImagePull', 'rpc error: code = NotFound desc = failed to pull and unpack image "x:1"')])],
      issue: { reason: 'ErrImagePull', message: 'pod a: container app: ErrImagePull: rpc error: code = NotFound desc = failed to pull and unpack image "x:1"', key: 'ImagePullBackOff container=app image=x:1' },
    },
    {
      name: 'a missing Secret, after a starting pod', pods: [pod('a', [waiting('ContainerCreating')]), pod('b', [waiting('CreateContainerConfigError', 'secret "s" not found')])],
      issue: { reason: 'CreateContainerConfigError', message: 'pod b: container app: CreateContainerConfigError: secret "s" not found', key: 'CreateContainerConfigError container=app image=x:1' },
    },
    {
      name: 'a crashed container: the same problem as its crash loop',
      pods: [pod('a', [{ name: 'app', image: 'x:1', state: { terminated: { reason: 'Error', exitCode: 2 } } }])],
      issue: { reason: 'Error', message: 'pod a: container app exited with 2', key: 'CrashLoopBackOff container=app image=x:1' },
    },
    {
      name: 'a crash loop', pods: [pod('a', [waiting('CrashLoopBackOff', 'back-off 20s restarting failed container')])],
      issue: { reason: 'CrashLoopBackOff', message: 'pod a: container app: CrashLoopBackOff: back-off 20s restarting failed container', key: 'CrashLoopBackOff container=app image=x:1' },
    },
    {
      name: 'an unschedulable pod', pods: [pod('a', [], [{ type: 'PodScheduled', status: 'False', reason: 'Unschedulable', message: '0/2 nodes are available' }])],
      issue: { reason: 'Unschedulable', message: 'pod a: 0/2 nodes are available', key: 'Unschedulable' },
    },
    {
      name: 'a pod being deleted keeps nothing from running (its container stopped with the deletion)',
      pods: [pod('old', [{ name: 'app', state: { terminated: { reason: 'Error', exitCode: 143 } } }], [], T0), pod('new', [waiting('ContainerCreating')])],
      issue: null,
    },
  ];
  for (const c of cases) test(c.name, () => assert.deepEqual(podIssue(c.pods), c.issue));

  test('podSignature: what the watcher compares of a stable pod', () => {
    assert.equal(podSignature(pod('a', [waiting('ContainerCreating')])), '');
    assert.equal(podSignature(pod('a', [waiting('ImagePullBackOff', 'Back-off pulling image "x:1"')])), 'ImagePullBackOff container=app image=x:1');
    assert.equal(podSignature(pod('b', [waiting('ErrImagePull', 'not found')])), podSignature(pod('a', [waiting('ImagePullBackOff', 'back-off')])), 'the same problem in another pod and another retry');
    assert.notEqual(podSignature(pod('a', [waiting('ImagePullBackOff', 'm', 'x:2')])), podSignature(pod('a', [waiting('ImagePullBackOff', 'm', 'x:1')])), 'another image is another problem');
  });

  test('the Ready condition and status.message carry the pod reason', () => {
    const pods = [pod('shop-1', [{ name: 'app', state: { waiting: { reason: 'ImagePullBackOff', message: 'nope' } } }])];
    const s = desiredStatus(app(), { ...observed(deployment({ replicas: 2, ready: 0, available: 0 })), pods }, null, info);
    assert.match(s.message ?? '', /^0\/3 replicas available; pod shop-1: container app: ImagePullBackOff: nope$/);
    assert.equal(s.conditions.find((x) => x.type === 'Ready')?.message, s.message);
  });

  const pullFailure = pod('shop-1', [waiting('ImagePullBackOff', 'Back-off pulling image "x:1"')]);
  const pullIssue = podIssue([pullFailure])!;
  const timedOut = deployment({ replicas: 3, ready: 0, available: 0, progressing: { reason: 'ProgressDeadlineExceeded', message: 'ReplicaSet "shop-7d" has timed out progressing.' } });
  const phaseCases: { name: string; d: ObservedDeployment; pods: ObservedPod[]; phase: Phase; reason: string; message: string; issue?: PodIssue }[] = [
    {
      name: 'pods that cannot pull their image', d: deployment({ ready: 0, available: 0 }), pods: [pullFailure],
      phase: Phase.Pending, reason: Reason.NoReplicasReady, message: `0/3 replicas available; ${pullIssue.message}`, issue: pullIssue,
    },
    {
      name: 'past the progress deadline: the pod problem stays in the Failed message', d: timedOut, pods: [pullFailure],
      phase: Phase.Failed, reason: Reason.ProgressDeadlineExceeded, message: `ReplicaSet "shop-7d" has timed out progressing; ${pullIssue.message}`, issue: pullIssue,
    },
    {
      name: 'past the progress deadline with pods merely not ready: the controller message alone', d: timedOut, pods: [pod('shop-1', [{ name: 'app', state: { running: {} } }])],
      phase: Phase.Failed, reason: Reason.ProgressDeadlineExceeded, message: 'ReplicaSet "shop-7d" has timed out progressing.',
    },
    {
      name: 'a spec change the controller has not seen yet: the old deadline is not the new spec\'s, the old pods\' problem still is',
      d: { ...timedOut, metadata: { generation: 3 } }, pods: [pullFailure],
      phase: Phase.Pending, reason: Reason.DeploymentProgressing, message: `0/3 replicas available; ${pullIssue.message}`, issue: pullIssue,
    },
    {
      name: 'pods failing before the controller counted them (status as created): the problem said anyway',
      d: { metadata: { generation: 1 }, spec: { replicas: 3 }, status: {} }, pods: [pullFailure],
      phase: Phase.Pending, reason: Reason.DeploymentProgressing, message: `0/3 replicas available; ${pullIssue.message}`, issue: pullIssue,
    },
    {
      name: 'pods failing before the Deployment has any status',
      d: { metadata: { generation: 1 }, spec: { replicas: 3 } }, pods: [pullFailure],
      phase: Phase.Pending, reason: Reason.DeploymentProgressing, message: `waiting for the Deployment to report status; ${pullIssue.message}`, issue: pullIssue,
    },
    {
      name: 'some available, one cannot start', d: deployment({ ready: 2, available: 2 }), pods: [pullFailure],
      phase: Phase.Updating, reason: Reason.DeploymentProgressing, message: `2/3 replicas available, 3 updated; ${pullIssue.message}`, issue: pullIssue,
    },
  ];
  for (const c of phaseCases) {
    test(`decidePhase: ${c.name}`, () => assert.deepEqual(decidePhase(app(), { ...observed(c.d), pods: c.pods }, null), {
      phase: c.phase, reason: c.reason, message: c.message, ...(c.issue ? { issue: c.issue } : {}),
    }));
  }

  test('Degraded is True while a pod problem keeps stable pods from running, with the problem as its reason', () => {
    const degraded = (s: ReturnType<typeof desiredStatus>) => s.conditions.find((x) => x.type === 'Degraded');
    const pending = desiredStatus(app(), { ...observed(deployment({ ready: 0, available: 0 })), pods: [pullFailure] }, null, info);
    assert.deepEqual(degraded(pending), { type: 'Degraded', status: 'True', reason: 'ImagePullBackOff', message: pending.message, observedGeneration: info.observedGeneration });
    assert.equal(pending.phase, Phase.Pending);
    const failed = desiredStatus(app(), { ...observed(timedOut), pods: [pullFailure] }, null, info);
    assert.deepEqual([failed.phase, degraded(failed)?.status, degraded(failed)?.reason], [Phase.Failed, 'True', 'ImagePullBackOff']);
    assert.match(degraded(failed)!.message, /timed out progressing; pod shop-1: container app: ImagePullBackOff: Back-off pulling image "x:1"$/);
    assert.deepEqual(failed.conditions.find((x) => x.type === 'Ready')?.reason, Reason.ProgressDeadlineExceeded, 'Ready says how far the Deployment got');
    const starting = desiredStatus(app(), { ...observed(deployment({ ready: 0, available: 0 })), pods: [pod('shop-1', [waiting('ContainerCreating')])] }, null, info);
    assert.deepEqual([degraded(starting)?.status, degraded(starting)?.message], ['False', 'no problems']);
  });

  test('pods are read only while some are not available', () => {
    assert.equal(needsPods(deployment({ ready: 3 })), false);
    assert.equal(needsPods(deployment({ ready: 1, available: 1 })), true);
    assert.equal(needsPods(null), false);
  });

  test('before the controller saw a change, pods are read only when some of the previous spec\'s are not available', () => {
    assert.equal(needsPods(deployment({ generation: 3, observedGeneration: 2 })), false, 'a change to a healthy app: nothing to explain');
    assert.equal(needsPods(deployment({ generation: 3, observedGeneration: 2, ready: 0, available: 0 })), true, 'a change to an app whose pods cannot start');
  });

  test('pods are not read before the Deployment controller created any (a first pass lists nothing that can exist)', () => {
    assert.equal(needsPods({ metadata: { generation: 1 }, spec: { replicas: 1 }, status: {} }), false);
    assert.equal(needsPods(deployment({ observedGeneration: 1, replicas: 0, available: 0, ready: 0, updated: 0 })), false);
    assert.equal(needsPods(deployment({ replicas: 0, available: 0, ready: 0, updated: 0 })), false);
    assert.equal(needsPods(deployment({ replicas: 3, available: 0, ready: 0 })), true);
  });

  test('Autoscaled says who sets the count', () => {
    assert.deepEqual(autoscaledCondition({ specReplicas: 3, hpa: { min: 2, max: 10 } }, 4), {
      type: 'Autoscaled', status: 'True', reason: 'HorizontalPodAutoscaler', observedGeneration: 4,
      message: 'the HorizontalPodAutoscaler sets the replica count (2-10); spec.replicas (3) is ignored and kubectl scale has no effect',
    });
    assert.equal(autoscaledCondition({ specReplicas: 3 }, 4).status, 'False');
  });
});

describe('the CanaryProgressing condition follows status.canary', () => {
  const cond = (type: string, status: Condition['status']): Condition => ({ type, status, reason: 'r', message: 'm' });
  const cases: { name: string; canary: Json | undefined; want: [string, string] | null }[] = [
    { name: 'no rollout yet: no condition', canary: undefined, want: null },
    { name: 'running', canary: { phase: 'Progressing', message: 'step 1/2' }, want: ['True', 'Progressing'] },
    { name: 'paused', canary: { phase: 'Paused', message: 'step 2/2' }, want: ['True', 'Paused'] },
    { name: 'rolled back: the reason of the outcome', canary: { phase: 'RolledBack', reason: 'HealthGateFailed', message: 'x' }, want: ['False', 'HealthGateFailed'] },
    { name: 'promoted', canary: { phase: 'Promoted', reason: 'CanaryPromoted', message: 'x' }, want: ['False', 'CanaryPromoted'] },
  ];
  for (const c of cases) {
    test(c.name, () => {
      const got = canaryCondition(c.canary, 3);
      assert.deepEqual(got ? [got.status, got.reason] : null, c.want);
    });
  }
  test('replaces an earlier one and keeps the rest', () => {
    const out = withCanaryCondition([cond('Ready', 'True'), { ...cond('CanaryProgressing', 'True'), reason: 'Paused' }], { phase: 'Aborted', reason: 'CanaryAborted', message: 'm' }, 1);
    assert.deepEqual(out.map((x) => `${x.type}=${x.status}:${x.reason}`), ['Ready=True:r', 'CanaryProgressing=False:CanaryAborted']);
  });
});

type Written = Record<string, unknown> & { conditions: (Condition & { lastTransitionTime: string })[] };

function sortedKeys(v: unknown): unknown {
  if (Array.isArray(v)) return v.map(sortedKeys);
  if (v && typeof v === 'object') return Object.fromEntries(Object.entries(v).sort(([a], [b]) => a.localeCompare(b)).map(([k, x]) => [k, sortedKeys(x)]));
  return v;
}

/** `next` as a later read returns it: timestamps stamped, conditions in another order, keys sorted as the API server does. */
function asStored(next: ReturnType<typeof desiredStatus>): Written {
  const written = { ...next, lastUpdateTime: T0, conditions: withTransitionTimes(next.conditions, undefined, T0).reverse() };
  return sortedKeys(JSON.parse(JSON.stringify(written))) as Written;
}

describe('statusChanged', () => {
  const next = desiredStatus(app(), observed(deployment(), service), null, info);
  const cond = (s: Written, type: string) => {
    const c = s.conditions.find((x) => x.type === type);
    assert.ok(c, type);
    return c;
  };

  test('nothing was written yet', () => assert.equal(statusChanged(undefined, next), true));
  test('the status it would write, as stored', () => assert.equal(statusChanged(asStored(next), next), false));
  test('only the timestamps differ', () => {
    const current = asStored(next);
    current['lastUpdateTime'] = T1;
    for (const c of current.conditions) c.lastTransitionTime = T1;
    assert.equal(statusChanged(current, next), false);
  });
  test('an undefined field is no field', () => assert.equal(statusChanged(asStored(next), { ...next, extra: undefined }), false));

  const changes: { name: string; change: (s: Written) => void }[] = [
    { name: 'phase', change: (s) => { s['phase'] = Phase.Updating; } },
    { name: 'observedGeneration', change: (s) => { s['observedGeneration'] = 3; } },
    { name: 'replicas', change: (s) => { s['replicas'] = 2; } },
    { name: 'readyReplicas', change: (s) => { s['readyReplicas'] = 2; } },
    { name: 'availableReplicas', change: (s) => { s['availableReplicas'] = 2; } },
    { name: 'selector', change: (s) => { s['selector'] = 'app.kubernetes.io/name=other'; } },
    { name: 'workflowId', change: (s) => { s['workflowId'] = 'application/prod/other'; } },
    { name: 'temporalUI missing', change: (s) => { delete s['temporalUI']; } },
    { name: 'an extra field', change: (s) => { s['message'] = 'old'; } },
    { name: 'an endpoint more', change: (s) => { s['endpoints'] = ['shop.prod.svc:80', '<node>:30080']; } },
    { name: 'no endpoints', change: (s) => { s['endpoints'] = []; } },
    { name: 'a condition status', change: (s) => { cond(s, 'Ready').status = 'False'; } },
    { name: 'a condition reason', change: (s) => { cond(s, 'Degraded').reason = Reason.ApplyFailed; } },
    { name: 'a condition message', change: (s) => { cond(s, 'Ready').message = '2/3 replicas available'; } },
    { name: 'a condition observedGeneration', change: (s) => { cond(s, 'InvalidSpec').observedGeneration = 3; } },
    { name: 'a condition missing', change: (s) => { s.conditions = s.conditions.filter((c) => c.type !== 'Progressing'); } },
    { name: 'no conditions', change: (s) => { delete (s as Record<string, unknown>)['conditions']; } },
  ];
  for (const { name, change } of changes) {
    test(`notices ${name}`, () => {
      const current = asStored(next);
      change(current);
      assert.equal(statusChanged(current, next), true);
    });
  }
});

describe('decidePhase with a Deployment that cannot create pods', () => {
  test('reports Failed with the ReplicaFailure message', () => {
    const observed = {
      deployment: {
        metadata: { generation: 2 }, spec: { replicas: 1 },
        status: {
          observedGeneration: 2, replicas: 1, updatedReplicas: 0, availableReplicas: 1,
          conditions: [{ type: 'ReplicaFailure', status: 'True', reason: 'FailedCreate', message: 'spec.containers[0].image: must not have leading or trailing whitespace' }],
        },
      },
      service: null,
    };
    const got = decidePhase({ metadata: { name: 'a', namespace: 'n', uid: 'u', generation: 2 } }, observed, null);
    assert.equal(got.phase, 'Failed');
    assert.equal(got.reason, 'ReplicaFailure');
    assert.match(got.message, /whitespace/);
  });
});

describe('deploymentSignature: the watcher wakes the workflow only when it changes', () => {
  const created: ObservedDeployment = { metadata: { generation: 1 }, spec: { replicas: 2 }, status: {} };
  const podsCreated = deployment({ desired: 2, generation: 1, observedGeneration: 1, replicas: 2, updated: 2, ready: 0, available: 0 });
  const oneReady = deployment({ desired: 2, generation: 1, observedGeneration: 1, replicas: 2, updated: 2, ready: 1, available: 1 });
  const running = deployment({ desired: 2, generation: 1, observedGeneration: 1, replicas: 2, updated: 2, ready: 2, available: 2 });
  const cases: { name: string; d: ObservedDeployment; signature: string }[] = [
    { name: 'just created, no status yet: nothing to report', d: { metadata: { generation: 1 }, spec: { replicas: 2 } }, signature: '' },
    { name: 'just created, empty status: nothing to report', d: created, signature: '' },
    { name: 'pods created, none ready: nothing to report', d: podsCreated, signature: '' },
    { name: 'one of two available', d: oneReady, signature: '["Updating",2,1,1]' },
    { name: 'all available', d: running, signature: '["Running",2,2,2]' },
    { name: 'cannot create pods', d: { ...podsCreated, status: { ...podsCreated.status, conditions: [{ type: 'ReplicaFailure', status: 'True', message: 'quota' }] } }, signature: '["Failed",2,0,0]' },
  ];
  for (const c of cases) test(c.name, () => assert.equal(deploymentSignature(c.d), c.signature));

  test('status writes that change neither phase nor counts do not change it', () => {
    const touched = { ...running, status: { ...running.status, conditions: [{ type: 'Progressing', status: 'True', reason: 'NewReplicaSetAvailable', message: 'ReplicaSet "x" has successfully progressed.' }] } };
    assert.equal(deploymentSignature(touched), deploymentSignature(running));
  });
});

describe('degradedEvent: one Warning Event per cause, not one per pass', () => {
  const degraded = (status: Condition['status'], reason: string, message: string): Condition[] => [
    { type: 'Ready', status: 'False', reason: Reason.NoReplicasReady, message },
    { type: 'Degraded', status, reason, message },
  ];
  const pull: PodIssue = { reason: 'ImagePullBackOff', message: 'pod a: container app: ImagePullBackOff: back-off', key: 'ImagePullBackOff container=app image=x:1' };
  const cases: { name: string; previous: Condition[] | undefined; next: Condition[]; issue?: PodIssue; event: ReturnType<typeof degradedEvent> }[] = [
    { name: 'healthy: none', previous: undefined, next: degraded('False', Reason.Reconciled, 'no problems'), event: null },
    {
      name: 'a pod problem appears: one, keyed by the problem', previous: degraded('False', Reason.Reconciled, 'no problems'),
      next: degraded('True', 'ImagePullBackOff', '0/2 replicas available; pod a: ...'), issue: pull,
      event: { reason: 'ImagePullBackOff', message: '0/2 replicas available; pod a: ...', key: pull.key },
    },
    { name: 'on the first status write too', previous: undefined, next: degraded('True', 'ImagePullBackOff', 'm'), issue: pull, event: { reason: 'ImagePullBackOff', message: 'm', key: pull.key } },
    { name: 'unchanged: none', previous: degraded('True', 'ImagePullBackOff', 'm'), next: degraded('True', 'ImagePullBackOff', 'm'), issue: pull, event: null },
    {
      name: 'reworded (another pod, a retry, the progress deadline): the same key, so recorded once',
      previous: degraded('True', 'ImagePullBackOff', '0/2 ...; pod a: ...'), next: degraded('True', 'ErrImagePull', 'ReplicaSet "x" has timed out progressing; pod b: ...'), issue: pull,
      event: { reason: 'ErrImagePull', message: 'ReplicaSet "x" has timed out progressing; pod b: ...', key: pull.key },
    },
    {
      name: 'a failure without a pod problem: keyed by reason and message', previous: degraded('False', Reason.Reconciled, 'no problems'),
      next: degraded('True', Reason.ProgressDeadlineExceeded, 'ReplicaSet "x" has timed out progressing.'),
      event: { reason: Reason.ProgressDeadlineExceeded, message: 'ReplicaSet "x" has timed out progressing.', key: 'ProgressDeadlineExceeded: ReplicaSet "x" has timed out progressing.' },
    },
    { name: 'recovered: none', previous: degraded('True', 'ImagePullBackOff', 'm'), next: degraded('False', Reason.Reconciled, 'no problems'), event: null },
  ];
  for (const c of cases) test(c.name, () => assert.deepEqual(degradedEvent(c.previous, c.next, c.issue), c.event));
});

describe('canarySpecCondition', () => {
  test('none between rollouts; True while one runs with this generation\'s spec; False with what changed under it', () => {
    assert.equal(canarySpecCondition({ running: false }, 4), null);
    const current = canarySpecCondition({ running: true, version: 'v2' }, 4)!;
    assert.deepEqual([current.type, current.status, current.reason], ['CanarySpecApplied', 'True', 'RolloutSpecCurrent']);
    const deferred = canarySpecCondition({ running: true, version: 'v2', deferred: ['steps', 'analysis'] }, 5)!;
    assert.deepEqual([deferred.status, deferred.reason, deferred.observedGeneration], ['False', 'RolloutSpecDeferred', 5]);
    assert.match(deferred.message, /^canary steps, analysis changed while the rollout of v2 runs \(generation 5\): it keeps the spec it started with; the change applies to the next rollout/);
  });
});

describe('appImage: what a Deployment of ours runs', () => {
  const d = (containers: { name?: string; image?: string }[]) => ({ metadata: {}, spec: { template: { spec: { containers } } } });
  test('the container app, even after a sidecar admission put first', () => {
    assert.equal(appImage(d([{ name: 'proxy', image: 'envoy:1.30' }, { name: 'app', image: 'nginx:v2' }])), 'nginx:v2');
    assert.equal(appImage(d([{ name: 'app', image: 'nginx:v2' }, { name: 'proxy', image: 'envoy:1.30' }])), 'nginx:v2');
  });
  test('the first container when none is named app; nothing without containers', () => {
    assert.equal(appImage(d([{ name: 'web', image: 'nginx:1' }])), 'nginx:1');
    assert.equal(appImage(d([])), undefined);
    assert.equal(appImage(null), undefined);
  });
});
