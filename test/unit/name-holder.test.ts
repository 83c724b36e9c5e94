// Who holds a child's name (activities/objects.ts nameHolder): an Application's derived names (`<app>-canary`,
// `<app>-preview`, `<app>-stable`) may be another Application's own children, or objects someone else made.
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { NameTakenError, nameHolder } from '../../activities/objects.ts';
import type { KubeObject } from '../../kube/client.ts';

const web = { name: 'web', uid: 'uid-web' };
const service = (ownerReferences?: unknown[]): KubeObject => ({ apiVersion: 'v1', kind: 'Service', metadata: { name: 'web-preview', ...(ownerReferences ? { ownerReferences } : {}) } });
const app = (name: string, uid: string, controller = true) => ({ apiVersion: 'myapp.example.com/v1', kind: 'Application', name, uid, controller });

describe('nameHolder', () => {
  test('absent: free', () => assert.equal(nameHolder(null, web), undefined));
  test("this Application's: free", () => assert.equal(nameHolder(service([app('web', 'uid-web')]), web), undefined));
  test('an earlier Application of the same name (not garbage-collected yet): free', () => assert.equal(nameHolder(service([app('web', 'uid-old')]), web), undefined));
  test("another Application's own child: held by it", () => assert.equal(nameHolder(service([app('web-preview', 'uid-other')]), web), 'Application web-preview'));
  test('made by someone else, no owner: held', () => assert.equal(nameHolder(service(), web), 'no Application (it was made by someone else)'));
  test('controlled by something else: held by it', () => assert.equal(nameHolder(service([{ kind: 'Rollout', name: 'web', uid: 'x', controller: true }]), web), 'Rollout web'));
  test('owned by this Application without being its controller: held (no controller of ours)', () => {
    assert.equal(nameHolder(service([app('web', 'uid-web', false)]), web), 'no Application (it was made by someone else)');
  });
  test('NameTakenError is a permanent refusal the pass reports as such', () => {
    const err = new NameTakenError('Service web-preview belongs to Application web-preview');
    assert.equal(err.permanent, true);
    assert.equal(err.status, 409);
  });
});
