// Rollout notifications. A rollout hands each notification to a workflow of its own (notificationWorkflow), started
// as an abandoned child whose id is the message's id: the rollout never waits for a receiver, a receiver that is down
// is retried for up to an hour by Temporal (at least once, across a worker's death), and a notification outlives the
// rollout's run (continue-as-new) and the rollout itself. Starting the same id twice is refused by Temporal
// (REJECT_DUPLICATE), so a start issued again after continue-as-new sends nothing twice.
import {
  ApplicationFailure, CancellationScope, ParentClosePolicy, WorkflowIdReusePolicy, log, proxyActivities, startChild,
} from '@temporalio/workflow';
import { WorkflowExecutionAlreadyStartedError } from '@temporalio/common';
import type { Activities } from '../activities/index.ts';
import type { NotificationMessage, PlanNotification } from '../reconcile/notify.ts';
import { oneLine, run } from './summary.ts';

/** What a notification workflow is given: the message and the receivers that want it. */
export interface NotificationInput {
  namespace: string;
  message: NotificationMessage;
  receivers: PlanNotification[];
}

/** The receivers each delivered or given up on, in one line each. */
export interface NotificationResult {
  delivered: string[];
  failed: string[];
}

// Retried with a growing delay up to a minute between attempts, for an hour; a 4xx answer is final.
const sends = proxyActivities<Activities>({
  startToCloseTimeout: '30s',
  scheduleToCloseTimeout: '1h',
  retry: { initialInterval: '1s', backoffCoefficient: 2, maximumInterval: '1m', nonRetryableErrorTypes: ['NotificationRejected'] },
});

/** Sends one message to each of its receivers, side by side; one receiver's trouble does not hold up another. */
export async function notificationWorkflow(input: NotificationInput): Promise<NotificationResult> {
  const { message } = input;
  const outcomes = await Promise.allSettled(input.receivers.map((receiver) => run(
    sends.sendNotification, `notify ${receiver.name} (${receiver.format}): ${message.event}: ${message.message}`, { namespace: input.namespace, message, receiver },
  )));
  const result: NotificationResult = { delivered: [], failed: [] };
  outcomes.forEach((o, i) => {
    const name = input.receivers[i]!.name;
    if (o.status === 'fulfilled') result.delivered.push(`${name}: ${o.value.detail}`);
    else {
      const cause = o.reason instanceof Error && o.reason.cause instanceof ApplicationFailure ? o.reason.cause.message : String(o.reason);
      result.failed.push(`${name}: ${cause}`);
      log.warn(`notification ${message.id} to ${name} given up`, { cause });
    }
  });
  return result;
}

/** The id of the workflow that delivers a message. */
export function notificationWorkflowId(message: NotificationMessage): string {
  return `notify/${message.id}`;
}

/**
 * Starts the workflow that delivers `input`, without waiting for any delivery; resolves once Temporal started it (or
 * had started it already: a start issued again). Shielded from cancellation: a rollout cancelled mid-way still
 * says so. Never rejects: a notification never fails the rollout.
 */
export function startNotification(input: NotificationInput): Promise<void> {
  return CancellationScope.nonCancellable(() => startChild(notificationWorkflow, {
    workflowId: notificationWorkflowId(input.message),
    args: [input],
    parentClosePolicy: ParentClosePolicy.ABANDON,
    workflowIdReusePolicy: WorkflowIdReusePolicy.REJECT_DUPLICATE,
    staticSummary: oneLine(`Notify ${input.receivers.map((r) => r.name).join(', ')}: ${input.message.application} ${input.message.version} ${input.message.event}`),
  })).then(() => undefined, (err: unknown) => {
    if (err instanceof WorkflowExecutionAlreadyStartedError) return;
    log.warn(`could not start the notification ${input.message.id}`, { err: String(err) });
  });
}
