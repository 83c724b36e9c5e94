// The chaos run's invariants, in two steps: gatherSnapshot() does every read once (the Applications, every child of
// the kinds in the table of child kinds, the workflows running on the operator's task queue, the operator's
// liveness), then checkInvariants() decides from that snapshot alone, with no I/O, so each invariant is unit-tested
// on fixtures (test/unit/chaos-invariants.test.ts). Routes are judged apart, as they change (testkit/routes.ts).
import { API_VERSION, KIND, LABEL_MANAGED_BY, MANAGED_BY, canaryName, childName, isTerminal } from '../api/constants.ts';
import type { Kube } from '../kube/client.ts';
import { childKinds, kinds, type ChildKind } from '../render/children.ts';
import { readRouteWeights } from '../render/istio.ts';
import { routesToCanary } from '../routing/route.ts';
import { temporalClient, type Json } from '../testkit/apps.ts';
import type { OperatorProcess } from '../testkit/operator.ts';
import { PROGRESS_DEADLINE_S, type Model } from './operations.ts';
import { withTimeout } from './util.ts';

/** Everything the invariants look at, read at one moment. */
export interface Snapshot {
  /** Every Application in the namespace. */
  apps: Json[];
  /** Every object of each kind of child in the namespace, by kind (Deployment, Service, ...). */
  children: Partial<Record<string, Json[]>>;
  /** Ids of the workflows running on the operator's task queue. */
  runningWorkflows: string[];
  /** Whether the operator process still runs, and whether its /readyz said OK (null: not asked). */
  operator: { running: boolean; ready: boolean | null };
}

/** When each Application's rollout was last seen to change, by name: how long a rollout has been stuck. */
export type RolloutMemory = ReadonlyMap<string, { key: string; since: number }>;

/** A paused rollout may overrun its pause end by this much (the workflow's timer, then a status write). */
const PAUSE_SLACK_MS = 30_000;
/** A rollout may stay unchanged this much longer than its progress deadline before it counts as stuck. */
const STUCK_SLACK_S = 30;

/** Reads what the invariants need; /readyz only on the final check (`final`), where the operator must be ready. */
export async function gatherSnapshot(opts: { kube: Kube; namespace: string; operator: OperatorProcess; final: boolean }): Promise<Snapshot> {
  const { kube, namespace, operator } = opts;
  const listApps = async () => (await kube.list<Json>({ apiVersion: API_VERSION, kind: KIND, namespace })).items;
  const versions = (items: Json[]) => items.map((a) => `${a.metadata.name}@${a.metadata.resourceVersion}`).sort().join(',');
  // The children are read after the Applications; an Application written in between (a promotion switching its
  // image, say) would be judged against children that already follow its newer spec. Read until the Applications
  // are the same before and after the children, so the snapshot is one moment.
  let apps = await listApps();
  let children: Snapshot['children'];
  for (let attempt = 0; ; attempt++) {
    children = Object.fromEntries(await Promise.all(childKinds.map(async (k) =>
      [k.kind, (await kube.list<Json>({ apiVersion: k.apiVersion, kind: k.kind, namespace })).items] as const)));
    const after = await listApps();
    if (versions(after) === versions(apps) || attempt >= 20) break;
    apps = after;
  }
  const client = await withTimeout(temporalClient(), 10_000, 'temporal connect');
  const runningWorkflows: string[] = [];
  for await (const wf of client.workflow.list({ query: `TaskQueue = '${operator.taskQueue}' AND ExecutionStatus = 'Running'` })) runningWorkflows.push(wf.workflowId);
  const running = operator.pid() !== undefined;
  return { apps, children, runningWorkflows, operator: { running, ready: opts.final && running ? await operator.isReady() : null } };
}

/**
 * Every invariant about the snapshot, given what the run's own ops say should exist. Returns the violations, and
 * the rollout memory to pass to the next check (a rollout is stuck when it stays the same across checks).
 */
export function checkInvariants(snap: Snapshot, model: Pick<Model, 'pool' | 'exists'>, now: number, memory: RolloutMemory): { violations: string[]; memory: RolloutMemory } {
  const out: string[] = [];
  const next = new Map(memory);
  const byName = new Map(snap.apps.map((a) => [a.metadata.name as string, a]));
  const find = (k: ChildKind, name: string): Json | null => snap.children[k.kind]?.find((c) => c.metadata.name === name) ?? null;
  for (const name of model.pool) {
    const app = byName.get(name);
    if (model.exists.get(name) !== true) {
      if (app) out.push(`${name}: deleted but the Application still exists (deletionTimestamp=${app.metadata.deletionTimestamp ?? '-'}, finalizers=${JSON.stringify(app.metadata.finalizers ?? [])})`);
      continue;
    }
    if (!app) {
      out.push(`${name}: Application missing`);
      continue;
    }
    const problems = applicationProblems(app, find, now, next);
    if (problems.length) out.push(`${name}: ${problems.join('; ')}`);
  }
  out.push(...orphans(snap), ...strayWorkflows(snap, byName, model));
  if (!snap.operator.running) out.push('the operator process exited by itself');
  else if (snap.operator.ready === false) out.push('operator /readyz is not OK');
  return { violations: out, memory: next };
}

/** A rollout is in flight from its start until a terminal phase. */
function rolloutInFlight(phase: string | undefined): boolean {
  return phase !== undefined && !isTerminal(phase);
}

/** What is wrong with one Application that should exist: its status, its children, its rollout. */
function applicationProblems(app: Json, find: (k: ChildKind, name: string) => Json | null, now: number, memory: Map<string, { key: string; since: number }>): string[] {
  const problems: string[] = [];
  const name = app.metadata.name as string;
  const child = childName({ metadata: { name } });
  const s = app.status ?? {};
  const canary = s.canary ?? {};
  const inRollout = rolloutInFlight(canary.phase);
  if (s.observedGeneration !== app.metadata.generation) problems.push(`observedGeneration ${s.observedGeneration} != generation ${app.metadata.generation}`);
  if (s.phase !== 'Running' && !(inRollout && canary.message)) {
    problems.push(`phase ${s.phase} (conditions ${JSON.stringify((s.conditions ?? []).map((c: Json) => `${c.type}=${c.status}:${c.reason}:${String(c.message).slice(0, 120)}`))})`);
  }
  const dep = find(kinds.deployment, child);
  const image = dep?.spec?.template?.spec?.containers?.[0]?.image;
  if (!dep) problems.push('Deployment missing');
  else if (image !== app.spec.image) problems.push(`Deployment image ${image} != spec.image ${app.spec.image}`);
  if (!find(kinds.service, child)) problems.push('Service missing');
  if (app.spec.serviceMesh?.enabled) {
    const vs = find(kinds.virtualService, child);
    if (!vs) problems.push('VirtualService missing');
    if (!find(kinds.destinationRule, child)) problems.push('DestinationRule missing');
    if (vs && !inRollout) {
      const w = readRouteWeights(vs);
      if (w?.stable !== 100 || routesToCanary(w)) problems.push(`no rollout in flight but VirtualService weights ${JSON.stringify(w)}`);
    }
  }
  const wanted = app.spec.serviceMesh?.canary;
  if (wanted?.enabled && wanted.canaryVersion !== canary.version) problems.push(`canary ${wanted.canaryVersion} enabled in spec but status.canary is ${canary.version ?? '-'} ${canary.phase ?? '-'}: rollout not started`);
  const canaryDeployment = canaryName({ metadata: { name } });
  if (!inRollout && find(kinds.deployment, canaryDeployment)) problems.push(`no rollout in flight (canary phase ${canary.phase ?? '-'}) but ${canaryDeployment} exists`);
  if (inRollout) problems.push(...rolloutProblems(name, canary, now, memory));
  else memory.delete(name);
  if (app.metadata.deletionTimestamp) problems.push('being deleted although nobody deleted it');
  return problems;
}

/** A rollout in flight says what it does, does not overrun its pause, and does not stay unchanged past its deadline. */
function rolloutProblems(name: string, canary: Json, now: number, memory: Map<string, { key: string; since: number }>): string[] {
  const problems: string[] = [];
  if (!canary.message) problems.push(`rollout ${canary.phase} without a status message`);
  const key = JSON.stringify([canary.version, canary.phase, canary.step, canary.weight, canary.message]);
  const prev = memory.get(name);
  if (!prev || prev.key !== key) memory.set(name, { key, since: now });
  const stuckFor = now - (prev && prev.key === key ? prev.since : now);
  const pauseEnds = canary.pauseEndsAt ? Date.parse(canary.pauseEndsAt) : NaN;
  if (canary.phase === 'Paused' && Number.isFinite(pauseEnds) && now - pauseEnds > PAUSE_SLACK_MS) {
    problems.push(`rollout paused past its pause end ${canary.pauseEndsAt} by ${Math.round((now - pauseEnds) / 1000)} s`);
  } else if (canary.phase !== 'Paused' && stuckFor > (PROGRESS_DEADLINE_S + STUCK_SLACK_S) * 1000) {
    problems.push(`rollout ${canary.phase} unchanged for ${Math.round(stuckFor / 1000)} s (deadline ${PROGRESS_DEADLINE_S} s): ${canary.message}`);
  }
  return problems;
}

/** Managed children whose owner Application is gone (or is another incarnation of the name). */
function orphans(snap: Snapshot): string[] {
  const out: string[] = [];
  const uids = new Map(snap.apps.map((a) => [a.metadata.name as string, a.metadata.uid as string]));
  for (const k of childKinds) {
    for (const child of snap.children[k.kind] ?? []) {
      if (child.metadata.labels?.[LABEL_MANAGED_BY] !== MANAGED_BY || child.metadata.deletionTimestamp) continue;
      const owner = (child.metadata.ownerReferences ?? []).find((r: Json) => r.kind === KIND);
      if (!owner) out.push(`orphan ${k.kind} ${child.metadata.name}: no owner reference`);
      else if (uids.get(owner.name) !== owner.uid) out.push(`orphan ${k.kind} ${child.metadata.name}: owner ${owner.name} (uid ${owner.uid}) is gone`);
    }
  }
  return out;
}

/** Application or rollout workflows still running for an Application that was deleted. */
function strayWorkflows(snap: Snapshot, byName: ReadonlyMap<string, Json>, model: Pick<Model, 'exists'>): string[] {
  const out: string[] = [];
  for (const id of snap.runningWorkflows) {
    const m = /^application\/([^/]+)\/([^/]+)(\/canary)?$/.exec(id);
    if (!m) continue;
    const name = m[2]!;
    if (!byName.has(name) && model.exists.get(name) !== true) out.push(`workflow ${id} still running for a deleted Application`);
  }
  return out;
}
