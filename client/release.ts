// The client side of Releases: one promote, abort, pause or resume for a whole Release, and its state.
import { WorkflowNotFoundError, WorkflowUpdateFailedError, type Client } from '@temporalio/client';
import type { ReleaseStatusInput } from '../activities/types.ts';
import { releaseQuery, releaseUpdates, releaseWorkflowId, type ControlAction, type ReleaseState } from '../workflows/contract.ts';
import { doneAlready, localUser, sendControl } from './control.ts';
import { decoderOf, type Decode, type HistoryEvent } from './history.ts';

/** Sends a control action to a Release's workflow as a validated update, asked by `by`; returns the Release's state after it. */
export async function controlRelease(client: Client, action: ControlAction, namespace: string, name: string, reason?: string, by = localUser()): Promise<{ accepted: boolean; note: string; state: ReleaseState }> {
  const handle = client.workflow.getHandle(releaseWorkflowId(namespace, name));
  try {
    const state = await sendControl(client, handle, action, () => handle.executeUpdate(releaseUpdates[action], { args: [{ by, ...(reason ? { reason } : {}) }] }));
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
      // A pause of a release paused already is done, as for an Application.
      if (action === 'pause' && doneAlready(action, why)) return { accepted: false, note: `nothing to pause: ${why}`, state: await handle.query(releaseQuery) };
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

/** The operator's own cluster in a fleet release's lines. */
const HUB = '(this cluster)';

/**
 * A few lines a person reads. A fleet release (Applications in member clusters) also says where each Application
 * is, how each cluster stands, and which cluster holds it.
 */
export function formatRelease(r: ReleaseState): string {
  const fleet = r.applications.some((a) => a.cluster);
  const clusters = [...new Set(r.applications.map((a) => a.cluster ?? HUB))];
  const perCluster = clusters.map((c) => {
    const apps = r.applications.filter((a) => (a.cluster ?? HUB) === c);
    const counts = [...new Set(apps.map((a) => a.phase))].map((p) => `${apps.filter((a) => a.phase === p).length} ${p}`);
    return `${c}${c === r.heldByCluster ? ' (unreachable)' : ''}: ${counts.join(', ')}`;
  });
  const width = Math.max(...clusters.map((c) => c.length), 7);
  return [
    `release ${r.namespace}/${r.name} — ${r.phase}${r.waves ? (r.wave ? `, wave ${r.wave}/${r.waves}` : `, ${r.waves} wave(s), none started`) : ''}${r.pausedByUser ? ' (paused by request)' : ''}`,
    `  ${r.message}`,
    ...(r.heldByCluster ? [`  held by cluster ${r.heldByCluster}: it goes on when that cluster answers`] : []),
    ...(r.failedApplication ? [`  failed: ${r.failedApplication}`] : []),
    ...(fleet ? [`  clusters: ${perCluster.join(' · ')}`] : []),
    ...r.applications.map((a) => `  wave ${a.wave}  ${fleet ? `${(a.cluster ?? HUB).padEnd(width)} ` : ''}${a.name.padEnd(20)} ${a.canaryVersion.padEnd(10)} ${a.phase.padEnd(11)} ${a.message ?? ''}`),
  ].join('\n');
}

/** One line of a Release's story: a status it wrote (and the Event it recorded with it). */
export interface ReleaseHistoryEntry {
  at: string;
  phase: string;
  message: string;
  /** The Event's reason, when the status was written with one (a transition). */
  reason?: string;
  warning?: boolean;
  heldByCluster?: string;
}

/**
 * A Release's story across every run of its workflow, oldest first: each status it wrote (what happened, in which
 * wave and cluster, who held it and why), read from the workflow histories. A fleet release's story names every
 * cluster it went through, held at, and put back.
 */
export async function releaseHistory(client: Client, namespace: string, name: string): Promise<ReleaseHistoryEntry[]> {
  const workflowId = releaseWorkflowId(namespace, name);
  const runs: { runId: string; start: number }[] = [];
  for await (const wf of client.workflow.list({ query: `WorkflowId = '${workflowId}'` })) runs.push({ runId: wf.runId, start: wf.startTime.getTime() });
  const decode = decoderOf(client.options.loadedDataConverter);
  const out: ReleaseHistoryEntry[] = [];
  for (const run of runs.sort((a, b) => a.start - b.start)) {
    out.push(...await statusWrites((await client.workflow.getHandle(workflowId, run.runId).fetchHistory()).events ?? [], decode));
  }
  return out;
}

/** The statuses a Release's run wrote, in order, from its history (each writeReleaseStatus activity it scheduled). */
export async function statusWrites(events: HistoryEvent[], decode: Decode): Promise<ReleaseHistoryEntry[]> {
  const out: ReleaseHistoryEntry[] = [];
  for (const e of events) {
    const a = e.activityTaskScheduledEventAttributes;
    if (a?.activityType?.name !== 'writeReleaseStatus') continue;
    const [input] = await decode<ReleaseStatusInput>(a.input?.payloads);
    if (!input) continue;
    const st = input.status as { phase?: string; message?: string; heldByCluster?: string | null };
    const seconds = Number(e.eventTime?.seconds ?? 0);
    out.push({
      at: new Date(seconds * 1000).toISOString(), phase: st.phase ?? '?', message: st.message ?? '',
      ...(input.event ? { reason: input.event.reason, ...(input.event.type === 'Warning' ? { warning: true } : {}) } : {}),
      ...(st.heldByCluster ? { heldByCluster: st.heldByCluster } : {}),
    });
  }
  return out;
}

/** A Release's story as lines a person reads. */
export function formatReleaseHistory(namespace: string, name: string, entries: ReleaseHistoryEntry[]): string {
  if (!entries.length) return `release ${namespace}/${name}: no history (is it there? kubectl -n ${namespace} get release ${name})`;
  return [
    `release ${namespace}/${name}: ${entries.length} status change(s)`,
    ...entries.map((e) => `  ${e.at.replace('T', ' ').replace(/\.\d+Z$/, 'Z')}  ${e.phase.padEnd(12)} ${e.message}${e.reason ? `  [${e.warning ? 'Warning ' : ''}${e.reason}]` : ''}`),
  ].join('\n');
}
