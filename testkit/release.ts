// Helpers of the Release tests (integration and disruptive): an Application a Release can roll out, a Release's
// manifest, its reads and waits, and the end state every Application of a finished Release must be in.
import assert from 'node:assert/strict';
import { API_VERSION, RELEASE_ANNOTATION, RELEASE_KIND } from '../api/constants.ts';
import { readRouteWeights } from '../render/istio.ts';
import { appManifest, getApp, getDeployment, getObject, waitForObject, type Json } from './apps.ts';
import { virtualService } from './canary.ts';

/**
 * An Application on the mesh at registry.example/<name>:1.0, one replica, with quick health gates (a start-up grace of
 * 5 s: a canary's pod on a loaded machine can take more than the 2 s it was, and was rolled back for it).
 */
export const meshApp = (ns: string, name: string): Json => appManifest(ns, name, {
  image: `registry.example/${name}:1.0`, replicas: 1,
  serviceMesh: { enabled: true, canary: { healthGates: { interval: '1s', failureThreshold: 2, initialDelay: '5s' } } },
});

export const releaseManifest = (ns: string, name: string, spec: Json): Json => ({ apiVersion: API_VERSION, kind: RELEASE_KIND, metadata: { name, namespace: ns }, spec });

export const getRelease = (ns: string, name: string) => getObject(API_VERSION, RELEASE_KIND, ns, name);

/** Waits until the Release `name` is as `ok` wants it (`what` says how, in the failure). */
export async function waitRelease(ns: string, name: string, ok: (r: Json) => boolean, what: string, timeoutMs = 120_000): Promise<Json> {
  return (await waitForObject(`release ${name} ${what}`, () => getRelease(ns, name), (r) => Boolean(r && ok(r)), timeoutMs))!;
}

export const releasePhaseIs = (phase: string) => (r: Json) => r.status?.phase === phase;

/**
 * `name` ends as a finished Release leaves it: running `image` at its current generation with its canary switched
 * off in the spec and removed, all traffic on stable (its VirtualService's, on the mesh), and the Release's claim gone.
 */
export async function assertRunsStable(ns: string, name: string, image: string, timeoutMs = 120_000): Promise<void> {
  const app = await waitForObject(`${name} runs ${image}`, () => getApp(ns, name),
    (a) => a?.spec?.image === image && a.status?.phase === 'Running' && a.status.observedGeneration === a.metadata.generation, timeoutMs);
  assert.equal(app!.spec.serviceMesh.canary.enabled, false, `${name}'s canary switched off`);
  await waitForObject(`${name}'s Deployment runs ${image}`, () => getDeployment(ns, name), (d) => d?.spec?.template?.spec?.containers?.[0]?.image === image && d.status?.availableReplicas >= 1, timeoutMs);
  await waitForObject(`${name}-canary removed`, () => getDeployment(ns, `${name}-canary`), (d) => d === null, timeoutMs);
  if (app!.spec.serviceMesh.enabled) {
    assert.deepEqual({ ...readRouteWeights(await virtualService(ns, name)) }, { stable: 100, canary: 0, total: 100, headerRoute: false, mirror: 0 }, `${name}: all traffic on stable`);
  }
  assert.equal(app!.metadata.annotations?.[RELEASE_ANNOTATION], undefined, `${name} let go by the release`);
}
