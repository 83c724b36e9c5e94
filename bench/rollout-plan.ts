// The rollouts scenario's Applications and the canary each gets, shared by the scenario (rollouts.ts) and its floor
// (promote-floor.ts).

/** The rollout every app gets: short enough to run 100 at once in a minute, with a timed pause whose end is measured. */
export const plan = {
  gateIntervalMs: 2000,
  pauseMs: 5000,
  firstWeight: 20,
  secondWeight: 50,
  /** status.canary.step (0-based) of the approval, where every rollout waits for the promote. */
  approvalStep: 3,
} as const;

/** The spec.serviceMesh.canary that starts the rollout (failureThreshold as the promote sample's: a busy machine is not a failed canary). */
export const canarySpec = {
  enabled: true, canaryVersion: 'v2',
  steps: [{ setWeight: plan.firstWeight }, { pause: { duration: `${plan.pauseMs / 1000}s` } }, { setWeight: plan.secondWeight }, { pause: {} }],
  healthGates: { interval: `${plan.gateIntervalMs / 1000}s`, failureThreshold: 10 },
};

/** The Applications the scenario converges: a mesh (VirtualService, DestinationRule) but no canary yet. */
export const meshAppSpec = { image: 'nginx:1.25', replicas: 1, serviceMesh: { enabled: true } };
