// Delivers one rollout notification to one receiver: its URL (or the one a Secret holds, read now, so a rotated
// webhook takes effect at the next send), checked against --check-allowed-hosts, then one POST. A failure throws,
// and Temporal retries the activity (workflows/notify.ts bounds for how long): delivery is at least once, and the
// message's id (field id, header Idempotency-Key) lets a receiver drop a redelivery. What the message says is
// decided in reconcile/notify.ts.
import { ApplicationFailure, Context } from '@temporalio/activity';
import { describeUrl, hostRefusal } from '../reconcile/checks.ts';
import { notificationRequest, type NotificationMessage, type PlanNotification } from '../reconcile/notify.ts';
import type { ActivityDeps } from './deps.ts';

/** A receiver that answers 3xx or 4xx (other than 408 and 429) refuses this message for good: it is not sent again. */
export const NotificationRejected = 'NotificationRejected';

/** How long one POST may take. */
const SEND_TIMEOUT_MS = 10_000;

export interface SendNotificationInput {
  /** The Application's namespace (a Secret's URL is read there). */
  namespace: string;
  message: NotificationMessage;
  receiver: PlanNotification;
}

export interface SendNotificationResult {
  outcome: 'sent' | 'refused';
  status?: number;
  detail: string;
}

type Outcome = 'sent' | 'failed' | 'rejected' | 'refused' | 'error';

/** The activity's attempt and cancellation, or none when called outside an activity (a test, a probe). */
function activityContext(): { attempt?: number; signal?: AbortSignal } {
  try {
    const c = Context.current();
    return { attempt: c.info.attempt, signal: c.cancellationSignal };
  } catch {
    return {};
  }
}

/** The receiver's URL: the spec's, or the Secret's key, read now; throws (retried) while the Secret or key is missing. */
async function urlOf(deps: Pick<ActivityDeps, 'kube'>, input: SendNotificationInput): Promise<string> {
  const { receiver, namespace } = input;
  if (receiver.url) return receiver.url;
  const ref = receiver.urlFrom?.secretKeyRef;
  if (!ref) throw ApplicationFailure.nonRetryable(`notification ${receiver.name} has neither url nor urlFrom`, NotificationRejected);
  const secret = await deps.kube.get<{ data?: Record<string, string> }>({ apiVersion: 'v1', kind: 'Secret', namespace, name: ref.name });
  const value = secret?.data?.[ref.key];
  if (value === undefined) throw new Error(`notification ${receiver.name}: ${secret ? `Secret ${namespace}/${ref.name} has no key ${ref.key}` : `Secret ${namespace}/${ref.name} not found`}`);
  return Buffer.from(value, 'base64').toString('utf8').trim();
}

export async function sendNotification(deps: Pick<ActivityDeps, 'kube' | 'checkAllowedHosts' | 'metrics' | 'log'>, input: SendNotificationInput): Promise<SendNotificationResult> {
  const { message, receiver } = input;
  const log = deps.log?.child({ namespace: input.namespace, name: message.application, notification: receiver.name, id: message.id, event: message.event });
  const count = (outcome: Outcome) => deps.metrics?.notifications.inc({ outcome });
  let url: string;
  try {
    url = await urlOf(deps, input);
  } catch (err) {
    count('error');
    log?.warn({ err: String(err) }, 'notification not sent: no URL');
    throw err;
  }
  const refusal = hostRefusal(deps.checkAllowedHosts ?? [], url, `notification ${receiver.name} of ${input.namespace}/${message.application} calls ${describeUrl(url)}`);
  if (refusal) {
    count('refused');
    log?.warn(refusal);
    return { outcome: 'refused', detail: refusal };
  }
  const { body, headers } = notificationRequest(receiver.format, message);
  const { attempt, signal: cancelled } = activityContext();
  let res: Response;
  try {
    const signal = AbortSignal.any([AbortSignal.timeout(SEND_TIMEOUT_MS), ...(cancelled ? [cancelled] : [])]);
    res = await fetch(url, { method: 'POST', headers, body, redirect: 'manual', signal });
    await res.body?.cancel();
  } catch (err) {
    count('failed');
    const detail = `notification ${receiver.name} to ${describeUrl(url)} got no answer: ${err instanceof Error ? err.message : String(err)}`;
    log?.warn({ attempt }, detail);
    throw new Error(detail, { cause: err });
  }
  const detail = `notification ${receiver.name} to ${describeUrl(url)}: HTTP ${res.status}`;
  if (res.status >= 200 && res.status < 300) {
    count('sent');
    log?.info(detail);
    return { outcome: 'sent', status: res.status, detail };
  }
  // A redirect is not followed (it could lead anywhere the allowlist does not allow): like a 4xx, final.
  if (res.status >= 300 && res.status < 500 && res.status !== 408 && res.status !== 429) {
    count('rejected');
    log?.warn(detail);
    throw ApplicationFailure.nonRetryable(detail, NotificationRejected);
  }
  count('failed');
  log?.warn({ attempt }, detail);
  throw new Error(detail);
}
