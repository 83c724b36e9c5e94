// The client side of the operator: control and status of an Application's workflows, for the CLI, the kubectl
// plugin, the benchmark and the chaos run.
import { KubeConfig } from '@kubernetes/client-node';
import { WorkflowNotFoundError, WorkflowUpdateFailedError, type Client } from '@temporalio/client';
import { userInfo, hostname } from 'node:os';
import {
  applicationWorkflowId, controlUpdates, rolloutQuery, rolloutWorkflowId, stateQuery, type ApplicationState, type ControlAction, type RolloutState,
} from '../workflows/contract.ts';

export type { ControlAction } from '../workflows/contract.ts';

/** The namespace of the current kubeconfig context, like kubectl's default. */
export function defaultNamespace(): string {
  try {
    const kc = new KubeConfig();
    kc.loadFromDefault();
    return kc.getContextObject(kc.getCurrentContext())?.namespace ?? 'default';
  } catch {
    return 'default';
  }
}

/** Who is asking, recorded in status.canary.abortedBy and the history. */
export function requester(): string {
  return `${userInfo().username}@${hostname()}`;
}

/** Sends a control action to the app's running rollout as a validated Temporal update; returns the rollout's state. */
export async function control(client: Client, action: ControlAction, namespace: string, name: string, reason?: string): Promise<RolloutState> {
  const handle = client.workflow.getHandle(rolloutWorkflowId(namespace, name));
  try {
    return await handle.executeUpdate(controlUpdates[action], { args: [{ by: requester(), ...(reason ? { reason } : {}) }] });
  } catch (err) {
    if (err instanceof WorkflowNotFoundError) throw new Error(`no canary rollout is running for ${namespace}/${name}`, { cause: err });
    if (err instanceof WorkflowUpdateFailedError) throw new Error(`${action} rejected: ${err.cause?.message ?? err.message}`, { cause: err });
    throw err;
  }
}

/** The Application workflow's state and, when one exists, its latest rollout's state. */
export async function appStatus(client: Client, namespace: string, name: string): Promise<{ app: ApplicationState | null; rollout: RolloutState | null; rolloutStatus?: string }> {
  const app = await client.workflow.getHandle(applicationWorkflowId(namespace, name)).query(stateQuery).catch((err: unknown) => {
    if (err instanceof WorkflowNotFoundError) return null;
    throw err;
  });
  const rh = client.workflow.getHandle(rolloutWorkflowId(namespace, name));
  try {
    const d = await rh.describe();
    const rollout = await rh.query(rolloutQuery);
    return { app, rollout, rolloutStatus: d.status.name };
  } catch (err) {
    if (err instanceof WorkflowNotFoundError) return { app, rollout: null };
    throw err;
  }
}

/** A few lines a person reads. */
export function formatRollout(r: RolloutState): string {
  const lines = [
    `canary ${r.key.replace('|', ' (')}) — ${r.phase}`,
    `  step ${Math.min(r.step + 1, r.totalSteps)}/${r.totalSteps}, weight ${r.weight}%`,
    `  ${r.message}`,
  ];
  if (r.pauseRemainingMs !== undefined) lines.push(`  pause ends in ${Math.ceil(r.pauseRemainingMs / 1000)} s (${r.pauseEndsAt})`);
  if (r.pausedByUser) lines.push('  paused by request: resume or promote to continue');
  const gate = r.gates.at(-1);
  if (gate) lines.push(`  last health gate: ${gate.ok ? 'pass' : 'FAIL'} — ${gate.reason} (${r.consecutiveFailures} consecutive failures)`);
  lines.push(`  deadline ${r.deadlineAt}`);
  if (r.abortedBy) lines.push(`  aborted by ${r.abortedBy}`);
  return lines.join('\n');
}
