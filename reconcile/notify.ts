// Pure decisions of rollout notifications (spec.notifications, --notify-url): which of a rollout's Events is a
// notification and of which kind, the stable id a receiver deduplicates by, and what each format sends. The
// workflow (workflows/notify.ts) decides when; activities/notify.ts does the I/O.
import { NOTIFICATION_EVENTS, type NotificationEvent } from '../api/constants.ts';
import type { Notification, NotificationFormat } from '../api/application.ts';
import { Reason } from '../api/constants.ts';

/** One receiver as a rollout's plan carries it: a URL is in the plan (and the history); a Secret's is read at send time. */
export interface PlanNotification {
  name: string;
  url?: string;
  urlFrom?: { secretKeyRef: { name: string; key: string } };
  format: NotificationFormat;
  /** The events it wants; all of them when absent. */
  events?: NotificationEvent[];
}

/** One notification: what happened to a rollout, the same for every receiver and every delivery of it. */
export interface NotificationMessage {
  /** Stable across retries, replays and continue-as-new: receivers deduplicate by it (also the Idempotency-Key header). */
  id: string;
  /** 1, 2, ... in the order the rollout sent its notifications: a receiver may order by it. */
  seq: number;
  application: string;
  namespace: string;
  version: string;
  image: string;
  event: NotificationEvent;
  /** The rollout's phase (status.canary.phase) and message when it happened. */
  phase: string;
  message: string;
  /** 0-based index of the step, and the canary's share of traffic in percent. */
  step: number;
  weight: number;
  /** When it happened (ISO 8601). */
  at: string;
}

/**
 * The notification kind of an Event the rollout records (`reason`), or undefined for Events nobody subscribes to.
 * `cause` is why the rollout stops (status.canary.reason), which tells what the start of a rollback is about: a
 * failed analysis or check is told at once, as analysisFailed or checkFailed; the end as rolledBack.
 */
export function notificationEvent(reason: string, cause?: string): NotificationEvent | undefined {
  switch (reason) {
    case Reason.CanaryStarted: return 'started';
    case Reason.CanaryStepCompleted: return 'step';
    case Reason.CanaryPaused:
    case Reason.CheckWaiting:
    case Reason.AnalysisInconclusive: return 'paused';
    case Reason.CheckFailed: return 'checkFailed';
    case Reason.CanaryPromoted: return 'promoted';
    case Reason.CanaryAborted: return 'aborted';
    case Reason.CanaryRolledBack: return 'rolledBack';
    case Reason.CanaryRollingBack:
      if (cause === Reason.AnalysisFailed) return 'analysisFailed';
      if (cause === Reason.CheckFailed) return 'checkFailed';
      return undefined;
    default: return undefined;
  }
}

/** The receivers that want `event`. */
export function receiversOf(receivers: readonly PlanNotification[] | undefined, event: NotificationEvent): PlanNotification[] {
  return (receivers ?? []).filter((r) => !r.events || r.events.includes(event));
}

/**
 * A message's id: the rollout's workflow id, the rollout (its version and the epoch-ms it started, so the next rollout
 * of the same Application never reuses an id), and the rollout's own count of notifications with the kind. Nothing of
 * a Temporal run is in it, so it survives continue-as-new, a replay and a retried delivery.
 */
export function notificationId(workflowId: string, version: string, epoch: number, seq: number, event: NotificationEvent): string {
  return `${workflowId}/${version}@${epoch}/${seq}-${event}`;
}

/** The spec's receivers, then the operator's default (--notify-url) unless the spec names one alike. */
export function planNotifications(spec: readonly Notification[] | undefined, operatorDefault?: PlanNotification): PlanNotification[] | undefined {
  const own: PlanNotification[] = (spec ?? []).map((n) => ({
    name: n.name, format: n.format,
    ...(n.url !== undefined ? { url: n.url } : {}), ...(n.urlFrom ? { urlFrom: n.urlFrom } : {}), ...(n.events ? { events: n.events } : {}),
  }));
  const all = operatorDefault && !own.some((n) => n.name === operatorDefault.name) ? [...own, operatorDefault] : own;
  return all.length ? all : undefined;
}

/** The words a chat message starts with, by kind. */
const headline: Record<NotificationEvent, string> = {
  started: 'started', step: 'step done', paused: 'paused', checkFailed: 'check failed', analysisFailed: 'analysis failed',
  promoted: 'promoted', aborted: 'aborted', rolledBack: 'rolled back',
};

/** One line for people: what happened to which rollout. */
export function notificationText(m: NotificationMessage): string {
  return `Rollout of ${m.namespace}/${m.application} ${m.version} (${m.image}) ${headline[m.event]}: ${m.message} [step ${m.step + 1}, ${m.weight}% on the canary]`;
}

/** What a receiver of `format` gets: a JSON body (with the id where the format has room for it) and the headers. */
export function notificationRequest(format: NotificationFormat, m: NotificationMessage): { body: string; headers: Record<string, string> } {
  const headers = { 'content-type': 'application/json', 'user-agent': 'application-operator', 'idempotency-key': m.id };
  if (format === 'slack') return { headers, body: JSON.stringify({ text: notificationText(m) }) };
  if (format === 'teams') {
    return {
      headers,
      body: JSON.stringify({
        '@type': 'MessageCard', '@context': 'https://schema.org/extensions',
        summary: `${m.application} ${m.version} ${headline[m.event]}`,
        themeColor: m.event === 'promoted' ? '2EB886' : m.event === 'started' || m.event === 'step' ? '439FE0' : 'D00000',
        title: `Rollout of ${m.namespace}/${m.application} ${m.version} ${headline[m.event]}`,
        text: notificationText(m),
      }),
    };
  }
  const { id, seq, application, namespace, version, image, event, phase, message, step, weight, at } = m;
  return { headers, body: JSON.stringify({ id, seq, application, namespace, version, image, event, phase, message, step, weight, at }) };
}

export { NOTIFICATION_EVENTS };
