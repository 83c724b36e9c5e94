import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { LABEL_MANAGED_BY, MANAGED_BY } from '../../api/constants.ts';
import { checkInvariants, type RolloutMemory, type Snapshot } from '../../chaos/invariants.ts';
import type { Json } from '../../testkit/apps.ts';

// Fixtures: one Application `a` that the run created, with every child it should have and a settled status; each
// case changes one thing. Objects carry their kind so that snapshot() can file them (list items do not).
const NOW = Date.parse('2026-01-01T00:00:00Z');
const iso = (msFromNow: number) => new Date(NOW + msFromNow).toISOString();

const app = (o: { spec?: Json; status?: Json; metadata?: Json } = {}): Json => ({
  metadata: { name: 'a', uid: 'uid-a', generation: 1, ...o.metadata },
  spec: { image: 'nginx:1', serviceMesh: { enabled: true }, ...o.spec },
  status: { observedGeneration: 1, phase: 'Running', canary: { phase: 'Promoted', version: 'v1' }, ...o.status },
});
const child = (kind: string, name: string, o: { owner?: { name: string; uid: string } | null; labels?: Json; metadata?: Json; spec?: Json } = {}): Json => {
  const owner = o.owner === undefined ? { name: 'a', uid: 'uid-a' } : o.owner;
  return {
    kind,
    metadata: { name, labels: o.labels ?? { [LABEL_MANAGED_BY]: MANAGED_BY }, ownerReferences: owner ? [{ kind: 'Application', ...owner }] : [], ...o.metadata },
    spec: o.spec ?? {},
  };
};
const deployment = (name = 'a', image = 'nginx:1', o: Parameters<typeof child>[2] = {}) =>
  child('Deployment', name, { ...o, spec: { template: { spec: { containers: [{ image }] } } } });
const virtualService = (canary = 0) => child('VirtualService', 'a', {
  spec: { http: [{ route: [{ destination: { subset: 'stable' }, weight: 100 - canary }, ...(canary ? [{ destination: { subset: 'canary' }, weight: canary }] : [])] }] },
});
const children = (): Json[] => [deployment(), child('Service', 'a'), virtualService(), child('DestinationRule', 'a')];

/** A rollout in flight: spec and status agree on v2, 20% to a canary that exists. */
const rollout = (canary: Json = {}) => ({
  apps: [app({
    spec: { serviceMesh: { enabled: true, canary: { enabled: true, canaryVersion: 'v2' } } },
    status: { canary: { version: 'v2', phase: 'Progressing', step: 0, weight: 20, message: 'canary at 20%', ...canary } },
  })],
  objects: [deployment(), deployment('a-canary', 'nginx:v2'), child('Service', 'a'), virtualService(20), child('DestinationRule', 'a')],
});

function snapshot(o: { apps?: Json[]; objects?: Json[]; runningWorkflows?: string[]; operator?: Snapshot['operator'] } = {}): Snapshot {
  const byKind: Record<string, Json[]> = {};
  for (const obj of o.objects ?? children()) (byKind[obj.kind] ??= []).push(obj);
  return { apps: o.apps ?? [app()], children: byKind, runningWorkflows: o.runningWorkflows ?? ['application/chaos/a'], operator: o.operator ?? { running: true, ready: null } };
}

const created = { pool: ['a'], exists: new Map([['a', true]]) };
const deleted = { pool: ['a'], exists: new Map([['a', false]]) };

const stuckKey = JSON.stringify(['v2', 'Progressing', 0, 20, 'canary at 20%']);

describe('checkInvariants', () => {
  const cases: { name: string; snapshot: Snapshot; model?: typeof created; memory?: RolloutMemory; violations: string[] }[] = [
    { name: 'an Application as it should be', snapshot: snapshot(), violations: [] },
    { name: 'deleted and gone with its children', snapshot: snapshot({ apps: [], objects: [], runningWorkflows: [] }), model: deleted, violations: [] },
    {
      name: 'deleted but the Application is still there', model: deleted,
      snapshot: snapshot({ apps: [app({ metadata: { deletionTimestamp: iso(-5000), finalizers: ['myapp.example.com/finalizer'] } })] }),
      violations: ['a: deleted but the Application still exists (deletionTimestamp=2025-12-31T23:59:55.000Z, finalizers=["myapp.example.com/finalizer"])'],
    },
    { name: 'created but missing', snapshot: snapshot({ apps: [], objects: [], runningWorkflows: [] }), violations: ['a: Application missing'] },
    {
      name: 'observedGeneration lagging', snapshot: snapshot({ apps: [app({ metadata: { generation: 2 } })] }),
      violations: ['a: observedGeneration 1 != generation 2'],
    },
    {
      name: 'a phase other than Running, with its conditions',
      snapshot: snapshot({ apps: [app({ status: { phase: 'Pending', conditions: [{ type: 'Ready', status: 'False', reason: 'NoReplicasReady', message: '0/1 replicas available' }] } })] }),
      violations: ['a: phase Pending (conditions ["Ready=False:NoReplicasReady:0/1 replicas available"])'],
    },
    {
      name: 'not Running while a rollout says what it does', snapshot: (() => {
        const s = rollout();
        s.apps[0]!.status.phase = 'Updating';
        return snapshot(s);
      })(),
      violations: [],
    },
    { name: 'Deployment missing', snapshot: snapshot({ objects: children().filter((o) => o.kind !== 'Deployment') }), violations: ['a: Deployment missing'] },
    {
      name: 'Deployment image differing from spec (a hand edit not put back)',
      snapshot: snapshot({ objects: [deployment('a', 'busybox:hand-edited'), ...children().filter((o) => o.kind !== 'Deployment')] }),
      violations: ['a: Deployment image busybox:hand-edited != spec.image nginx:1'],
    },
    {
      name: 'several problems of one Application in one line',
      snapshot: snapshot({ objects: children().filter((o) => o.kind !== 'Deployment' && o.kind !== 'Service') }),
      violations: ['a: Deployment missing; Service missing'],
    },
    {
      name: 'mesh children missing', snapshot: snapshot({ objects: children().filter((o) => o.kind === 'Deployment' || o.kind === 'Service') }),
      violations: ['a: VirtualService missing; DestinationRule missing'],
    },
    {
      name: 'no mesh, no mesh children', snapshot: snapshot({
        apps: [app({ spec: { serviceMesh: { enabled: false } } })], objects: children().filter((o) => o.kind === 'Deployment' || o.kind === 'Service'),
      }),
      violations: [],
    },
    {
      name: 'VirtualService not 100% stable without a rollout',
      snapshot: snapshot({ objects: [...children().filter((o) => o.kind !== 'VirtualService'), virtualService(20)] }),
      violations: ['a: no rollout in flight but VirtualService weights {"stable":80,"canary":20,"total":100,"headerRoute":false,"mirror":0}'],
    },
    { name: 'canary traffic and a canary Deployment during a rollout', snapshot: snapshot(rollout()), violations: [] },
    {
      name: 'a canary enabled in spec that never started', snapshot: snapshot({ apps: [app({ spec: { serviceMesh: { enabled: true, canary: { enabled: true, canaryVersion: 'v3' } } } })] }),
      violations: ['a: canary v3 enabled in spec but status.canary is v1 Promoted: rollout not started'],
    },
    {
      name: 'a canary enabled in spec and done', snapshot: snapshot({ apps: [app({ spec: { serviceMesh: { enabled: true, canary: { enabled: true, canaryVersion: 'v1' } } } })] }),
      violations: [],
    },
    {
      name: 'canary Deployment left after a rollout', snapshot: snapshot({ objects: [...children(), deployment('a-canary', 'nginx:v1')] }),
      violations: ['a: no rollout in flight (canary phase Promoted) but a-canary exists'],
    },
    { name: 'a rollout without a status message', snapshot: snapshot(rollout({ message: undefined })), violations: ['a: rollout Progressing without a status message'] },
    {
      name: 'a rollout paused past its pause end', snapshot: snapshot(rollout({ phase: 'Paused', pauseEndsAt: iso(-60_000) })),
      violations: ['a: rollout paused past its pause end 2025-12-31T23:59:00.000Z by 60 s'],
    },
    { name: 'a rollout paused, within its pause end and slack', snapshot: snapshot(rollout({ phase: 'Paused', pauseEndsAt: iso(-10_000) })), violations: [] },
    {
      name: 'a stuck rollout: unchanged past its progress deadline', snapshot: snapshot(rollout()),
      memory: new Map([['a', { key: stuckKey, since: NOW - 130_000 }]]),
      violations: ['a: rollout Progressing unchanged for 130 s (deadline 90 s): canary at 20%'],
    },
    {
      name: 'a rollout that moved since the last check', snapshot: snapshot(rollout({ weight: 40 })),
      memory: new Map([['a', { key: stuckKey, since: NOW - 130_000 }]]), violations: [],
    },
    {
      name: 'being deleted although nobody deleted it', snapshot: snapshot({ apps: [app({ metadata: { deletionTimestamp: iso(-1000) } })] }),
      violations: ['a: being deleted although nobody deleted it'],
    },
    {
      name: 'an orphan child: its owner is gone',
      snapshot: snapshot({ objects: [...children(), child('HorizontalPodAutoscaler', 'b', { owner: { name: 'b', uid: 'uid-b' } })] }),
      violations: ['orphan HorizontalPodAutoscaler b: owner b (uid uid-b) is gone'],
    },
    {
      name: 'an orphan child: owned by an earlier incarnation of the name',
      snapshot: snapshot({ objects: [...children(), child('PersistentVolumeClaim', 'a', { owner: { name: 'a', uid: 'uid-old' } })] }),
      violations: ['orphan PersistentVolumeClaim a: owner a (uid uid-old) is gone'],
    },
    {
      name: 'an orphan child: no owner reference', snapshot: snapshot({ objects: [...children(), child('Service', 'x', { owner: null })] }),
      violations: ['orphan Service x: no owner reference'],
    },
    {
      name: 'children being deleted or not ours are no orphans', snapshot: snapshot({
        objects: [...children(), child('Service', 'b', { owner: { name: 'b', uid: 'uid-b' }, metadata: { deletionTimestamp: iso(0) } }), child('Service', 'y', { owner: null, labels: {} })],
      }),
      violations: [],
    },
    {
      name: 'a workflow running for a deleted Application', snapshot: snapshot({ runningWorkflows: ['application/chaos/a', 'application/chaos/b/canary', 'other/workflow'] }),
      violations: ['workflow application/chaos/b/canary still running for a deleted Application'],
    },
    { name: 'the operator exited', snapshot: snapshot({ operator: { running: false, ready: null } }), violations: ['the operator process exited by itself'] },
    { name: 'the operator not ready at the final check', snapshot: snapshot({ operator: { running: true, ready: false } }), violations: ['operator /readyz is not OK'] },
    { name: 'the operator ready at the final check', snapshot: snapshot({ operator: { running: true, ready: true } }), violations: [] },
  ];
  for (const c of cases) {
    test(c.name, () => assert.deepEqual(checkInvariants(c.snapshot, c.model ?? created, NOW, c.memory ?? new Map()).violations, c.violations));
  }
});

describe('checkInvariants: rollout memory', () => {
  test('a rollout is remembered from when it was first seen, and forgotten once it ends', () => {
    const first = checkInvariants(snapshot(rollout()), created, NOW, new Map());
    assert.deepEqual(first.memory.get('a'), { key: stuckKey, since: NOW });
    const later = checkInvariants(snapshot(rollout()), created, NOW + 60_000, first.memory);
    assert.deepEqual(later.memory.get('a'), { key: stuckKey, since: NOW }, 'unchanged: still since it was first seen');
    const ended = checkInvariants(snapshot(), created, NOW + 70_000, later.memory);
    assert.equal(ended.memory.has('a'), false);
  });

  test('a rollout that moved is remembered from its new state', () => {
    const moved = checkInvariants(snapshot(rollout({ weight: 40 })), created, NOW, new Map([['a', { key: stuckKey, since: NOW - 130_000 }]]));
    assert.deepEqual(moved.memory.get('a'), { key: JSON.stringify(['v2', 'Progressing', 0, 40, 'canary at 20%']), since: NOW });
  });

  test('the memory passed in is left as it was', () => {
    const memory: RolloutMemory = new Map();
    checkInvariants(snapshot(rollout()), created, NOW, memory);
    assert.equal(memory.size, 0);
  });
});
