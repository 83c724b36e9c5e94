import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { retryOnConflict } from '../../activities/objects.ts';
import { KubeError } from '../../kube/client.ts';

const conflict = () => new KubeError(409, 'Conflict', 'the object has been modified');

describe('retryOnConflict', () => {
  test('a write that conflicts is tried again after a fresh read, and its answer returned', async () => {
    const calls: string[] = [];
    let left = 2;
    const got = await retryOnConflict(() => {
      calls.push('write');
      return left-- > 0 ? Promise.reject(conflict()) : Promise.resolve('written');
    }, () => {
      calls.push('read');
      return Promise.resolve(true);
    });
    assert.equal(got, 'written');
    assert.deepEqual(calls, ['write', 'read', 'write', 'read', 'write']);
  });

  test('gives up after its attempts, with the conflict', async () => {
    let writes = 0;
    await assert.rejects(retryOnConflict(() => (writes++, Promise.reject(conflict())), undefined, 3), (err) => err instanceof KubeError && err.status === 409);
    assert.equal(writes, 3);
  });

  test('anything but a conflict, and a conflict the fresh read says stands, is thrown at once', async () => {
    let writes = 0;
    await assert.rejects(retryOnConflict(() => (writes++, Promise.reject(new KubeError(422, 'Invalid', 'no')))), (err) => err instanceof KubeError && err.status === 422);
    await assert.rejects(retryOnConflict(() => (writes++, Promise.reject(conflict())), () => Promise.resolve(false)), (err) => err instanceof KubeError && err.status === 409);
    assert.equal(writes, 2);
  });
});
