// The workflows a worker registers.
export { applicationWorkflow } from './application.ts';
export { blueGreenRolloutWorkflow, canaryRolloutWorkflow } from './rollout/workflow.ts';
export { releaseWorkflow } from './release/workflow.ts';
export { notificationWorkflow } from './notify.ts';
