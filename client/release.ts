// The client side of Releases: one promote, abort, pause or resume for a whole Release, and its state.
import { WorkflowNotFoundError, WorkflowUpdateFailedError, type Client } from '@temporalio/client';
import { releaseQuery, releaseUpdates, releaseWorkflowId, type ControlAction, type ReleaseState } from '../workflows/contract.ts';
import { localUser } from './control.ts';

/** Sends a control action to a Release's workflow as a validated update, asked by `by`; returns the Release's state after it. */
export async function controlRelease(client: Client, action: ControlAction, namespace: string, name: string, reason?: string, by = localUser()): Promise<{ accepted: boolean; note: string; state: ReleaseState }> {
  const handle = client.workflow.getHandle(releaseWorkflowId(namespace, name));
  try {
    const state = await handle.executeUpdate(releaseUpdates[action], { args: [{ by, ...(reason ? { reason } : {}) }] });
    return { accepted: true, note: `${action} accepted`, state };
  } catch (err) {
    if (err instanceof WorkflowNotFoundError) {
      // A Release that finished holds no workflow open: its last run still answers what it ended as.
      const over = await finishedState(handle);
      if (!over) throw new Error(`no workflow for Release ${namespace}/${name} (is it there? kubectl -n ${namespace} get release ${name})`, { cause: err });
      if (action === 'abort') return { accepted: false, note: `nothing to abort: the release is ${over.phase}`, state: over };
      throw new Error(`${action} rejected: the release is ${over.phase}`, { cause: err });
    }
    if (err instanceof WorkflowUpdateFailedError) {
      const why = err.cause?.message ?? err.message;
      // As for an Application: an abort of a release already over or being aborted has nothing left to do.
      // "the release is Promoted: nothing to abort" reads as the answer from a finished run: "nothing to abort: the release is Promoted".
      if (action === 'abort' && /nothing to abort|already being aborted/.test(why)) return { accepted: false, note: `nothing to abort: ${why.replace(/: nothing to abort$/, '')}`, state: await handle.query(releaseQuery) };
      throw new Error(`${action} rejected: ${why}`, { cause: err });
    }
    throw err;
  }
}

/** The state a Release's last run ended with, when its workflow exists and is over (undefined otherwise). */
async function finishedState(handle: ReturnType<Client['workflow']['getHandle']>): Promise<ReleaseState | undefined> {
  try {
    if ((await handle.describe()).status.name === 'RUNNING') return undefined;
    return await handle.query(releaseQuery);
  } catch {
    return undefined;
  }
}

/** A Release's state from its workflow, or null when it has none. */
export async function releaseStatus(client: Client, namespace: string, name: string): Promise<ReleaseState | null> {
  return client.workflow.getHandle(releaseWorkflowId(namespace, name)).query(releaseQuery).catch((err: unknown) => {
    if (err instanceof WorkflowNotFoundError) return null;
    throw err;
  });
}

/** A few lines a person reads. */
export function formatRelease(r: ReleaseState): string {
  return [
    `release ${r.namespace}/${r.name} — ${r.phase}${r.waves ? (r.wave ? `, wave ${r.wave}/${r.waves}` : `, ${r.waves} wave(s), none started`) : ''}${r.pausedByUser ? ' (paused by request)' : ''}`,
    `  ${r.message}`,
    ...(r.failedApplication ? [`  failed: ${r.failedApplication}`] : []),
    ...r.applications.map((a) => `  wave ${a.wave}  ${a.name.padEnd(20)} ${a.canaryVersion.padEnd(10)} ${a.phase.padEnd(11)} ${a.message ?? ''}`),
  ].join('\n');
}
