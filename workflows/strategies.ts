// The rollout workflow of each strategy: the Application's workflow starts the one the plan's strategy names. A new
// strategy adds its function (workflows/rollout/workflow.ts, or its own engine) and one line here; its type name
// goes in contract.ts's rolloutWorkflowTypes, which the watcher's sweep and the clients read.
import type { StrategyName } from '../api/constants.ts';
import { blueGreenRolloutWorkflow, canaryRolloutWorkflow } from './rollout/workflow.ts';

export const rolloutWorkflows: Record<StrategyName, typeof canaryRolloutWorkflow> = {
  canary: canaryRolloutWorkflow,
  blueGreen: blueGreenRolloutWorkflow,
};
