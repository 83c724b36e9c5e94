// Waits and assertions on canary rollouts as a user sees them: status.canary, the VirtualService read back, the
// DestinationRule's subsets and the canary Deployment.
import assert from 'node:assert/strict';
import { ISTIO_API_VERSION, canaryName } from '../api/constants.ts';
import { rolloutHistory, type RolloutHistory } from '../client/history.ts';
import { eventually } from '../lib/poll.ts';
import { readRouteWeights } from '../render/istio.ts';
import { getApp, getDeployment, getObject, temporalClient, waitForObject, waitForPhase, type Json } from './apps.ts';

export const virtualService = (ns: string, name: string) => getObject(ISTIO_API_VERSION, 'VirtualService', ns, name);
export const destinationRule = (ns: string, name: string) => getObject(ISTIO_API_VERSION, 'DestinationRule', ns, name);

/** Waits until the VirtualService routes `canary`% to the canary and the rest to stable. */
export async function waitWeights(ns: string, name: string, canary: number, timeoutMs = 60_000): Promise<void> {
  await waitForObject(`${name} VirtualService at canary ${canary}%`, () => virtualService(ns, name), (vs) => {
    const w = readRouteWeights(vs);
    return w?.canary === canary && w.stable === 100 - canary;
  }, timeoutMs);
}

/** Waits until status.canary.phase is `phase`; returns the Application. */
export async function waitCanaryPhase(ns: string, name: string, phase: string, timeoutMs = 90_000): Promise<Json> {
  return (await waitForObject(`${name} canary phase ${phase}`, () => getApp(ns, name), (a) => a?.status?.canary?.phase === phase, timeoutMs))!;
}

/**
 * The history of the Application's latest rollout once its workflow has ended. Status says Promoted or RolledBack a
 * moment before the workflow records its result, so a history read at once may not have its outcome yet.
 */
export async function finishedRollout(ns: string, name: string, timeoutMs = 30_000): Promise<RolloutHistory> {
  const client = await temporalClient();
  return eventually(`the history of ${name}'s rollout to end`, async () => {
    const [latest] = await rolloutHistory(client, ns, name);
    return latest?.outcome ? latest : undefined;
  }, { timeoutMs });
}

/** The steady state after a rollout ends: all traffic on stable (read back), no canary subset, no canary Deployment. */
export async function assertSteadyState(ns: string, name: string): Promise<void> {
  await waitForObject(`${canaryName({ metadata: { name } })} Deployment removed`, () => getDeployment(ns, canaryName({ metadata: { name } })), (d) => d === null);
  assert.deepEqual({ ...readRouteWeights(await virtualService(ns, name)) }, { stable: 100, canary: 0, total: 100, headerRoute: false, mirror: 0 }, 'read back: all traffic on stable');
  assert.deepEqual((await destinationRule(ns, name))!.spec.subsets.map((s: Json) => s.name), ['stable']);
}

/** A promoted rollout: the spec names the new image with the canary off, stable runs it, and the app is Running. */
export async function assertPromoted(ns: string, name: string, image: string, timeoutMs = 120_000): Promise<void> {
  const app = await waitCanaryPhase(ns, name, 'Promoted', timeoutMs);
  assert.equal(app.spec.image, image);
  assert.equal(app.spec.serviceMesh.canary.enabled, false);
  await assertSteadyState(ns, name);
  assert.equal((await getDeployment(ns, name))!.spec.template.spec.containers[0].image, image);
  await waitForPhase(ns, name, 'Running');
}
