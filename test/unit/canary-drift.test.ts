// What a gate check calls a hand edit of the canary Deployment (activities/canary.ts canaryDrift): its size or its
// image changed from what the rollout applies, read from the Deployment as the API server or the watch has it.
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { canaryDrift, driftByOthers } from '../../activities/canary.ts';
import { parseApplication, type Application } from '../../api/application.ts';
import { renderCanaryDeployment } from '../../render/deployment.ts';

function app(canary: Record<string, unknown> = {}): Application {
  const parsed = parseApplication({
    apiVersion: 'myapp.example.com/v1', kind: 'Application', metadata: { name: 'web', namespace: 'default', uid: 'b7d6c1a2-0000-4000-8000-000000000001' },
    spec: { image: 'nginx:1.25', serviceMesh: { enabled: true, canary: { enabled: true, canaryVersion: 'v2', replicas: 2, ...canary } } },
  });
  assert.ok(parsed.ok, parsed.ok ? '' : parsed.message);
  return parsed.app;
}

/** The Deployment as the API server gives it back: what was applied, with `edit` made to it by hand. */
function running(a: Application, edit: { replicas?: number; image?: string } = {}) {
  const d = structuredClone(renderCanaryDeployment(a));
  if (edit.replicas !== undefined) d.spec!.replicas = edit.replicas;
  if (edit.image !== undefined) d.spec!.template.spec!.containers[0]!.image = edit.image;
  return { metadata: { generation: 2 }, spec: d.spec as { replicas?: number }, status: { readyReplicas: 2 } };
}

describe('canaryDrift', () => {
  const a = app();
  const want = renderCanaryDeployment(a);
  test('the canary as applied: no drift', () => assert.equal(canaryDrift(running(a), want, 'istio'), undefined));
  test('scaled by hand (kubectl scale --replicas=0)', () => {
    assert.deepEqual(canaryDrift(running(a, { replicas: 0 }), want, 'istio'), { what: 'replicas', message: "the canary Deployment has 0 replicas, not the rollout's 2" });
    assert.deepEqual(canaryDrift(running(a, { replicas: 5 }), want, 'gatewayAPI'), { what: 'replicas', message: "the canary Deployment has 5 replicas, not the rollout's 2" });
  });
  test('re-imaged by hand (kubectl set image)', () => {
    assert.deepEqual(canaryDrift(running(a, { image: 'evil:1' }), want, 'istio'), { what: 'image', message: "the canary Deployment's container app runs evil:1, not the rollout's nginx:v2" });
    // Both: the image is the graver.
    assert.equal(canaryDrift(running(a, { image: 'evil:1', replicas: 0 }), want, 'istio')?.what, 'image');
  });
  test('the replicas router sizes the canary with the weight itself: its size is not drift, its image still is', () => {
    assert.equal(canaryDrift(running(a, { replicas: 4 }), want, 'replicas'), undefined);
    assert.match(canaryDrift(running(a, { image: 'evil:1' }), want, 'replicas')?.message ?? '', /runs evil:1/);
  });
  test("the rollout's own image, not the one today's spec would derive", () => {
    const pinned = renderCanaryDeployment(app({ image: 'registry.example.com/web:2.0' }));
    assert.equal(canaryDrift(running(a), pinned, 'istio')?.message, "the canary Deployment's container app runs nginx:v2, not the rollout's registry.example.com/web:2.0");
  });
  test('a Deployment without its containers (a partial copy) is drift, not a crash', () => {
    assert.match(canaryDrift({ metadata: {}, spec: { replicas: 2 } }, want, 'istio')?.message ?? '', /runs nothing/);
  });
});

describe('driftByOthers: another image is drift only when someone wrote after the rollout', () => {
  const a = app();
  const want = renderCanaryDeployment(a);
  const written = (image: string, entries: { manager: string; time: string; subresource?: string }[]) => {
    const d = running(a, { image });
    return { ...d, metadata: { ...d.metadata, managedFields: entries } };
  };
  test('kubectl set image after the rollout applied it: drift', () => {
    const d = written('evil:1', [{ manager: 'application-operator', time: '2026-12-07T10:00:00Z' }, { manager: 'kubectl-set', time: '2026-12-07T10:00:05Z' }]);
    assert.equal(driftByOthers(d, want, 'istio')?.what, 'image');
  });
  test('a mutating webhook rewrote the image during the rollout\'s own apply: not drift (putting it back would never end)', () => {
    const d = written('mirror.example.com/library/nginx:v2@sha256:' + 'a'.repeat(64), [{ manager: 'application-operator', time: '2026-12-07T10:00:05Z' }, { manager: 'kube-controller-manager', time: '2026-12-07T10:00:06Z', subresource: 'status' }]);
    assert.equal(driftByOthers(d, want, 'istio'), undefined);
  });
});

describe('driftByOthers: another size is drift only when it was not set in the rollout\'s own apply', () => {
  const a = app();
  const want = renderCanaryDeployment(a);
  const ours = (owns: boolean) => ({ manager: 'application-operator', time: '2026-12-07T10:00:05Z', fieldsV1: { 'f:spec': { ...(owns ? { 'f:replicas': {} } : {}), 'f:template': {} } } });
  const written = (edit: { replicas?: number; image?: string }, entries: object[]) => {
    const d = running(a, edit);
    return { ...d, metadata: { ...d.metadata, managedFields: entries as never } };
  };
  test('a policy raised the size during the rollout\'s apply (its write the newest, spec.replicas its own): not drift', () => {
    assert.equal(driftByOthers(written({ replicas: 3 }, [ours(true)]), want, 'istio'), undefined);
  });
  test('kubectl scale through /scale: the rollout\'s write still the newest, but spec.replicas taken from it: drift', () => {
    assert.equal(driftByOthers(written({ replicas: 0 }, [ours(false)]), want, 'istio')?.what, 'replicas');
  });
  test('an image admission rewrote, then kubectl scale: the size is drift, the image is not', () => {
    const d = written({ replicas: 0, image: `mirror.example.com/nginx:v2@sha256:${'a'.repeat(64)}` }, [ours(false)]);
    assert.deepEqual(driftByOthers(d, want, 'istio'), { what: 'replicas', message: "the canary Deployment has 0 replicas, not the rollout's 2" });
  });
  test('the replicas router sizes the canary itself: no size drift either way', () => {
    assert.equal(driftByOthers(written({ replicas: 0 }, [ours(false)]), want, 'replicas'), undefined);
  });
  test('another manager wrote after the rollout: drift as canaryDrift says', () => {
    assert.equal(driftByOthers(written({ replicas: 5 }, [ours(true), { manager: 'kubectl-edit', time: '2026-12-07T10:00:09Z' }]), want, 'istio')?.what, 'replicas');
  });
});
