// The strategy registry: how each strategy turns an Application into the steps of the one rollout engine. A new
// strategy is a file beside these, one line here, and one in workflows/strategies.ts (its workflow type);
// docs/architecture.md walks through it.
import type { Application } from '../../api/application.ts';
import type { StrategyName } from '../../api/constants.ts';
import type { PlanStep } from '../plan.ts';
import { blueGreenMinReady, blueGreenSteps } from './blue-green.ts';
import { canarySteps } from './canary.ts';

export interface Strategy {
  /** The rollout's steps; the engine promotes after the last. */
  steps(app: Application): PlanStep[];
  /** Ready pods of the new version before any traffic moves to it (default: healthGates.minReadyReplicas). */
  minReadyReplicas?(app: Application): number;
  /** Whether postPromotion checks are steps (they can still undo: blue-green's switch-back) or run after promotion. */
  postPromotionInSteps?: boolean;
}

export const strategies: Record<StrategyName, Strategy> = {
  canary: { steps: canarySteps },
  blueGreen: { steps: blueGreenSteps, minReadyReplicas: blueGreenMinReady, postPromotionInSteps: true },
};
