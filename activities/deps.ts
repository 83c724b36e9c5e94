import type { Kube } from '../kube/client.ts';
import type { MemberClusters } from '../kube/clusters.ts';
import type { RecentObjects } from '../kube/recent.ts';
import type { Logger } from '../operator/log.ts';
import type { Metrics } from '../operator/metrics.ts';
import type { HostPattern } from '../reconcile/checks.ts';
import type { PlanNotification } from '../reconcile/notify.ts';

/** What activities need from the process that runs them. */
export interface ActivityDeps {
  kube: Kube;
  /** Objects in hand (the watcher's, the answers of earlier passes) read instead of a GET while current. */
  recent?: RecentObjects;
  /** Base URL of the Temporal UI, for the link written into status (omitted when unknown). */
  temporalUiUrl?: string;
  temporalNamespace: string;
  metrics?: Metrics;
  log?: Logger;
  /** The Prometheus canary analysis asks, unless an Application names its own. */
  prometheusAddress?: string;
  /** The hosts HTTP checks and an Application's own Prometheus may be on (--check-allowed-hosts); empty or absent: any. */
  checkAllowedHosts?: HostPattern[];
  /** The operator's default receiver of rollout notifications (--notify-url), added to every rollout's plan. */
  notifyDefault?: PlanNotification;
  /** The member clusters fleet Releases reach (kube/clusters.ts). */
  clusters?: MemberClusters;
  /** Signals a workflow in another Temporal namespace of the same server (a member cluster's operator's); false when there is no such workflow. */
  signalWorkflow?: (temporalNamespace: string, workflowId: string, signal: string, arg: unknown) => Promise<boolean>;
}

/** A link to the workflow in the Temporal UI. */
export function workflowUiLink(deps: Pick<ActivityDeps, 'temporalUiUrl' | 'temporalNamespace'>, workflowId: string): string | undefined {
  if (!deps.temporalUiUrl) return undefined;
  return `${deps.temporalUiUrl.replace(/\/$/, '')}/namespaces/${encodeURIComponent(deps.temporalNamespace)}/workflows/${encodeURIComponent(workflowId)}`;
}
