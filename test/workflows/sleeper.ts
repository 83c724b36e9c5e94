import { sleep } from '@temporalio/workflow';

/** Test-only workflow: sleeps for a while, then returns, to prove timers survive a server restart. */
export async function sleeperWorkflow(input: { sleepMs: number; token: string }): Promise<string> {
  await sleep(input.sleepMs);
  return `woke:${input.token}`;
}
