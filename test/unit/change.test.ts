import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { changeReason, podChangeReason, type Observation, type WatchEvent } from '../../watcher/change.ts';

const app = (o: Partial<Observation> = {}): Observation => ({ kind: 'Application', generation: 1, deleting: false, status: '', finalizer: true, ...o });
const child = (kind: string, o: Partial<Observation> = {}): Observation => ({ kind, generation: 1, deleting: false, status: '{"ready":1}', finalizer: false, ...o });
const ev = (type: WatchEvent['type'], initialSync = false): WatchEvent => ({ type, initialSync });

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
    { name: 'a Deployment status moved: child-status', before: child('Deployment'), after: child('Deployment', { status: '{"ready":2}' }), event: ev('update'), reason: 'child-status' },
    { name: "another kind's status: nothing", before: child('HorizontalPodAutoscaler'), after: child('HorizontalPodAutoscaler', { status: '{"x":2}' }), event: ev('update'), reason: null },
    { name: 'a Deployment unchanged: nothing', before: child('Deployment'), after: child('Deployment'), event: ev('update'), reason: null },
    { name: 'a Deployment seen again on a relist: child-status', before: undefined, after: child('Deployment'), event: ev('add'), reason: 'child-status' },
    { name: 'a Deployment with nothing to report yet (just created): nothing', before: undefined, after: child('Deployment', { status: '' }), event: ev('add'), reason: null },
    { name: 'a Service added: nothing (our own apply)', before: undefined, after: child('Service'), event: ev('add'), reason: null },
    { name: 'children listed during the first sync: nothing', before: undefined, after: child('Deployment'), event: ev('add', true), reason: null },
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
