import { createHash, randomBytes } from 'node:crypto';
import { hostname } from 'node:os';
import { API_VERSION, KIND } from '../api/constants.ts';
import type { Kube } from '../kube/client.ts';

export interface EventInput {
  namespace: string;
  name: string;
  uid?: string;
  type: 'Normal' | 'Warning';
  reason: string;
  message: string;
  action?: string;
  /** The kind of the object the Event is about (default Application; Release for a Release's). */
  kind?: string;
  /**
   * The cause the Event reports: Events with the same key on the same object are recorded once (for as long as the
   * API server keeps Events, an hour by default), however often they are asked for.
   */
  key?: string;
}

/** Records a Kubernetes Event (events.k8s.io/v1) on an Application or a Release, shown by `kubectl describe`. Best effort: never fails a reconcile. */
export async function recordEvent(kube: Kube, e: EventInput): Promise<void> {
  const now = new Date().toISOString().replace(/(\.\d{3})Z$/, '$1000Z');
  try {
    await kube.create({
      apiVersion: 'events.k8s.io/v1', kind: 'Event',
      // Named like kubectl's events (<object>.<unique suffix>); generateName rejects a trailing dot. A keyed Event's
      // name comes from its key, so a second create of it is refused as already there (and ignored below).
      metadata: { name: `${e.name}.${e.key ? keySuffix(e) : `${Date.now().toString(16)}${randomBytes(4).toString('hex')}`}`, namespace: e.namespace },
      eventTime: now,
      reportingController: 'myapp.example.com/application-operator',
      reportingInstance: hostname(),
      action: e.action ?? e.reason,
      reason: e.reason,
      note: e.message.slice(0, 1024),
      type: e.type,
      regarding: { apiVersion: API_VERSION, kind: e.kind ?? KIND, name: e.name, namespace: e.namespace, ...(e.uid ? { uid: e.uid } : {}) },
    });
  } catch {
    // Events are a courtesy to kubectl describe; losing one must not fail or retry the work it describes.
  }
}

/** A name suffix for a keyed Event: the same for the same object (by uid, so a re-created one starts afresh) and cause. */
function keySuffix(e: EventInput): string {
  return createHash('sha256').update(`${e.kind ?? KIND}/${e.uid ?? e.name}/${e.key}`).digest('hex').slice(0, 20);
}
