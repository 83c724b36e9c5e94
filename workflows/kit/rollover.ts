// When a long-lived workflow (an Application's, a rollout, a Release) should continue as new: the server suggests
// it, or its history has grown past the entity's own limit. Each entity decides what it carries; this decides when.
import { workflowInfo } from '@temporalio/workflow';

/** The default limit of history events before a run continues as new (far below Temporal's 10,240 warning). */
export const defaultMaxHistoryEvents = 2000;

/** Whether this run's history is due to continue as new. */
export function historyFull(maxHistoryEvents = defaultMaxHistoryEvents): boolean {
  const info = workflowInfo();
  return info.continueAsNewSuggested || info.historyLength >= maxHistoryEvents;
}
