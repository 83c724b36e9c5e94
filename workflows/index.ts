// The workflows a worker registers. Every module under here is shared by all the workflows of a worker: it keeps no
// state of a workflow at module level (docs/architecture.md, "Workflow code: modules shared by every workflow").
export { applicationWorkflow } from './application.ts';
export { blueGreenRolloutWorkflow, canaryRolloutWorkflow } from './rollout/workflow.ts';
export { releaseWorkflow } from './release/workflow.ts';
export { notificationWorkflow } from './notify.ts';
