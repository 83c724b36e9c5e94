// The workflows a worker registers.
export { applicationWorkflow } from './application.ts';
