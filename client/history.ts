// Every rollout of an Application, newest first, told from the workflow histories themselves (found through
// Temporal visibility): its plan, the routes it set, the analysis verdicts, who promoted, aborted, paused or resumed
// and why (and which of those requests changed nothing), each phase it went through, and how it ended. Nothing here
// comes from logs.
import type { Client } from '@temporalio/client';
import type { LoadedDataConverter, Payload } from '@temporalio/common';
import proto from '@temporalio/proto';
import { Reason, RolloutPhase, isTerminal } from '../api/constants.ts';
import type { CanaryStatusInput, MetricValue, RouteInput } from '../activities/types.ts';
import { judge } from '../workflows/rollout/analysis.ts';
import {
  controlActions, rolloutWorkflowId, type ControlAction, type ControlRequest, type RolloutInput, type RolloutResult,
} from '../workflows/contract.ts';
import { describeStep, type AnalysisMetric } from '../reconcile/plan.ts';

const EventType = proto.temporal.api.enums.v1.EventType;
export type HistoryEvent = proto.temporal.api.history.v1.IHistoryEvent;

export interface HistoryEntry {
  at: string;
  kind: 'phase' | 'route' | 'control' | 'analysis';
  text: string;
  /** A phase entry's phase. */
  phase?: string;
  /** A control request's action. */
  action?: ControlAction;
  /**
   * Why a control request changed nothing: the rollout refused it (its rules, applied to what the history shows it
   * knew then), or what it asked was overtaken (an abort that reached a rollout already promoting, which ended
   * Promoted: the one the Application's workflow sends when a promote switches the spec's canary off).
   */
  ignored?: string;
}

/** A metric the rollout's analysis asks, once per rollout: its query is the same at every run. */
export interface AnalysisQuery {
  metric: string;
  query: string;
  /** The range a value must fall in to pass (`>= 99`, `<= 500`, `1..2`). */
  range: string;
  dryRun?: boolean;
}

export interface RolloutHistory {
  workflowId: string;
  runId: string;
  /** RUNNING, COMPLETED, CANCELED, TERMINATED... */
  status: string;
  startedAt: string;
  closedAt?: string;
  version?: string;
  image?: string;
  /** The rollout's strategy (canary when its plan names none). */
  strategy?: string;
  steps: string[];
  /** The analysis's interval and queries, when the rollout has one; its verdicts are entries. */
  analysis?: { intervalSeconds: number; queries: AnalysisQuery[] };
  outcome?: { phase: string; message: string };
  entries: HistoryEntry[];
  /** How many workflow runs the rollout took (it continues as new to keep each history short). */
  runs?: number;
}

/** A run of the rollout's workflow as visibility lists it. */
export interface RolloutRun {
  runId: string;
  status: string;
  startTime: Date;
  closeTime?: Date | undefined;
}

/** Decodes payloads as the client's data converter does (codecs, then the payload converter). */
export type Decode = <T>(payloads: Payload[] | null | undefined) => Promise<T[]>;

/**
 * Every rollout of `namespace/name`, newest first (at most `limit`). A rollout that continued as new is one story
 * told over several runs: they are joined (each run's first event names the run it continues).
 */
export async function rolloutHistory(client: Client, namespace: string, name: string, limit = 20): Promise<RolloutHistory[]> {
  const workflowId = rolloutWorkflowId(namespace, name);
  const runs: RolloutRun[] = [];
  for await (const wf of client.workflow.list({ query: `WorkflowId = '${workflowId}'` })) {
    runs.push({ runId: wf.runId, status: wf.status.name, startTime: wf.startTime, closeTime: wf.closeTime });
  }
  const events = async (runId: string) => (await client.workflow.getHandle(workflowId, runId).fetchHistory()).events ?? [];
  return tellRollouts(workflowId, runs, events, decoderOf(client.options.loadedDataConverter), limit);
}

/** The client's data converter as a Decode. */
export function decoderOf(converter: LoadedDataConverter): Decode {
  return async <T>(payloads: Payload[] | null | undefined): Promise<T[]> => {
    let ps = payloads ?? [];
    for (const codec of [...converter.payloadCodecs].reverse()) ps = await codec.decode(ps);
    return ps.map((p) => converter.payloadConverter.fromPayload<T>(p));
  };
}

/**
 * The rollouts told by the runs of one workflow id, newest first (at most `limit`), each run's events fetched only
 * when needed: runs that continued as new are joined into the rollout they continue.
 */
export async function tellRollouts(workflowId: string, runs: RolloutRun[], eventsOf: (runId: string) => Promise<HistoryEvent[]>, decode: Decode, limit = 20): Promise<RolloutHistory[]> {
  const newestFirst = [...runs].sort((a, b) => b.startTime.getTime() - a.startTime.getTime());
  const out: RolloutHistory[] = [];
  // Newest first: a run that continues another is joined to it once that one is read.
  let continuing: { run: RolloutHistory; from: string } | undefined;
  for (const run of newestFirst) {
    if (!continuing && out.length >= limit) break;
    const told = await tellRun(await eventsOf(run.runId), decode);
    const story: RolloutHistory = {
      workflowId, runId: run.runId, status: run.status, startedAt: run.startTime.toISOString(),
      ...(run.closeTime ? { closedAt: run.closeTime.toISOString() } : {}),
      ...told.story,
    };
    if (continuing && continuing.from === run.runId) {
      const later = continuing.run;
      Object.assign(later, {
        runId: story.runId, startedAt: story.startedAt, version: story.version ?? later.version, image: story.image ?? later.image, ...(story.strategy ?? later.strategy ? { strategy: story.strategy ?? later.strategy } : {}),
        steps: story.steps.length ? story.steps : later.steps, entries: [...story.entries, ...later.entries], runs: (later.runs ?? 1) + 1,
      });
    } else {
      out.push(story);
    }
    const target = continuing && continuing.from === run.runId ? continuing.run : story;
    continuing = told.continues ? { run: target, from: told.continues } : undefined;
  }
  for (const h of out) markOvertaken(h);
  return out;
}

/** What the rollout knew when a control request reached it, as far as its history shows: what its rules look at. */
export interface ControlView {
  phase: string;
  pausedByUser: boolean;
  /** Held by an inconclusive analysis (a resume lifts that too). */
  blind: boolean;
  abortRequested: boolean;
  promoteRequested: boolean;
}

/**
 * Why the rollout refuses `action` in the state `v`, in the words of its own refusal (Rollout.validate in
 * workflows/rollout/rollout.ts); undefined when it takes it. A refused update never reaches the history; a refused
 * signal does, and the rollout only logs that it ignored it.
 */
export function refusal(action: ControlAction, v: ControlView): string | undefined {
  if (action === 'promote' || action === 'abort') {
    if (isTerminal(v.phase)) return `the rollout was already ${v.phase}`;
    if (v.phase === RolloutPhase.Aborting || v.abortRequested) return 'the rollout was already being aborted';
    if (action === 'promote' && (v.phase === RolloutPhase.Promoting || v.promoteRequested)) return 'the rollout was already being promoted';
    return undefined;
  }
  if (action === 'pause') {
    if (v.phase !== RolloutPhase.Progressing && v.phase !== RolloutPhase.Paused) return `a rollout that is ${v.phase} cannot be paused`;
    return v.pausedByUser ? 'the rollout was already paused' : undefined;
  }
  return v.pausedByUser || v.blind ? undefined : 'the rollout was not paused by request';
}

/** The state after the rollout took `action`. */
function took(action: ControlAction, v: ControlView): ControlView {
  if (action === 'promote') return { ...v, promoteRequested: true };
  if (action === 'abort') return { ...v, abortRequested: true, phase: RolloutPhase.Aborting };
  if (action === 'pause') return { ...v, pausedByUser: true };
  return { ...v, pausedByUser: false, blind: false };
}

/**
 * Marks what the end of the rollout overtook: an abort in a rollout that ended Promoted (the rollout took it while
 * promoting, past the point where an abort stops anything), a promote in one that ended otherwise without ever
 * promoting.
 */
export function markOvertaken(h: RolloutHistory): void {
  const end = h.outcome?.phase;
  if (!end) return;
  h.entries.forEach((e, i) => {
    if (e.kind !== 'control' || e.ignored) return;
    if (e.action === 'abort' && end === RolloutPhase.Promoted) e.ignored = 'the rollout was being promoted, and ended Promoted';
    if (e.action === 'promote' && end !== RolloutPhase.Promoted && !h.entries.slice(i + 1).some((l) => l.phase === RolloutPhase.Promoting)) {
      e.ignored = `the rollout ended ${end} before promoting`;
    }
  });
}

/** One run's part of a rollout's story, from its history events; `continues` names the run it continues, if any. */
export async function tellRun(events: HistoryEvent[], decode: Decode): Promise<{ story: Pick<RolloutHistory, 'version' | 'image' | 'steps' | 'analysis' | 'outcome' | 'entries'>; continues?: string }> {
  const entries: HistoryEntry[] = [];
  const add = (e: HistoryEvent, entry: Omit<HistoryEntry, 'at'>) => entries.push({ at: timeOf(e), ...entry });
  const scheduled = new Map<string, { type: string; input: unknown }>();
  let input: RolloutInput | undefined;
  let outcome: RolloutHistory['outcome'];
  let lastPhase = '';
  let lastRoute = '';
  let continues: string | undefined;
  let view: ControlView = { phase: RolloutPhase.Progressing, pausedByUser: false, blind: false, abortRequested: false, promoteRequested: false };
  const control = (e: HistoryEvent, action: ControlAction, request: ControlRequest | undefined, how: 'signal' | 'update') => {
    // An update reached the workflow only if its validator took it; a signal is checked against the rules here.
    const refused = how === 'signal' ? refusal(action, view) : undefined;
    if (!refused) view = took(action, view);
    add(e, { kind: 'control', action, text: describeControl(action, request, how), ...(refused ? { ignored: refused } : {}) });
  };
  const analysisLines = async (e: HistoryEvent, payloads: Payload[] | null | undefined) => {
    if (!input?.plan.analysis) return;
    const [answers] = await decode<MetricValue[]>(payloads);
    const weight = Number(/routed (\d+)%/.exec(lastRoute)?.[1] ?? 0);
    for (const m of input.plan.analysis.metrics) {
      add(e, { kind: 'analysis', text: verdictLine(m, answers?.find((a) => a.name === m.name) ?? { name: m.name, value: null, error: 'no answer' }, timeOf(e), weight) });
    }
  };

  for (const e of events) {
    const id = String(e.eventId ?? '');
    switch (e.eventType) {
      case EventType.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED:
        [input] = await decode<RolloutInput>(e.workflowExecutionStartedEventAttributes?.input?.payloads);
        continues = e.workflowExecutionStartedEventAttributes?.continuedExecutionRunId || undefined;
        // A run taken up from where a previous one stood: the routes said so already.
        if (input?.carried) {
          const { route, state, abortRequest, promoteRequest } = input.carried;
          lastRoute = describeRouted(route);
          lastPhase = `${state.phase}: ${state.message}`;
          view = {
            phase: state.phase, pausedByUser: state.pausedByUser, blind: Boolean(state.analysis?.blind),
            abortRequested: abortRequest !== undefined, promoteRequested: promoteRequest !== undefined,
          };
        }
        break;
      case EventType.EVENT_TYPE_MARKER_RECORDED: {
        // A local activity: the analysis's queries run as such; their answers are in the marker.
        const details = e.markerRecordedEventAttributes?.details;
        const [data] = await decode<{ activity_type?: string; activityType?: string } | undefined>(details?.['data']?.payloads);
        if ((data?.activity_type ?? data?.activityType) === 'queryMetrics') await analysisLines(e, details?.['result']?.payloads);
        break;
      }
      case EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED: {
        const signal = e.workflowExecutionSignaledEventAttributes;
        const action = controlActions.find((a) => a === signal?.signalName);
        if (!action) break;
        const [request] = await decode<ControlRequest | undefined>(signal?.input?.payloads);
        control(e, action, request, 'signal');
        break;
      }
      case EventType.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED: {
        const request = e.workflowExecutionUpdateAcceptedEventAttributes?.acceptedRequest?.input;
        const action = controlActions.find((a) => a === request?.name);
        if (!action) break;
        const [args] = await decode<ControlRequest | undefined>(request?.args?.payloads);
        control(e, action, args, 'update');
        break;
      }
      case EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED: {
        const a = e.activityTaskScheduledEventAttributes;
        const [arg] = await decode<unknown>(a?.input?.payloads);
        const type = a?.activityType?.name ?? '';
        scheduled.set(id, { type, input: arg });
        // The rollout's state changes before it writes status: what it knows from then on.
        if (type === 'writeCanaryStatus') view = viewAfterStatus(view, arg as CanaryStatusInput);
        break;
      }
      case EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED: {
        const done = e.activityTaskCompletedEventAttributes;
        const call = scheduled.get(String(done?.scheduledEventId ?? ''));
        if (!call) break;
        if (call.type === 'writeCanaryStatus') {
          const { phase, message } = (call.input as CanaryStatusInput).status;
          const line = `${phase}: ${message}`;
          if (line !== lastPhase) add(e, { kind: 'phase', phase, text: line });
          lastPhase = line;
        } else if (call.type === 'setCanaryRoute') {
          const input = call.input as RouteInput;
          const line = describeRouted(input.route);
          if (line !== lastRoute) add(e, { kind: 'route', text: `${line}${input.traceId ? ` (trace ${input.traceId})` : ''}` });
          lastRoute = line;
        } else if (call.type === 'queryMetrics') {
          await analysisLines(e, done?.result?.payloads);
        }
        break;
      }
      case EventType.EVENT_TYPE_WORKFLOW_EXECUTION_COMPLETED: {
        const [result] = await decode<RolloutResult>(e.workflowExecutionCompletedEventAttributes?.result?.payloads);
        if (result) outcome = { phase: result.phase, message: result.message };
        break;
      }
      case EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CANCELED:
        outcome = { phase: 'Cancelled', message: lastPhase || 'cancelled (its Application was deleted or its workflow ended)' };
        break;
      case EventType.EVENT_TYPE_WORKFLOW_EXECUTION_TERMINATED:
        outcome = { phase: 'Terminated', message: e.workflowExecutionTerminatedEventAttributes?.reason ?? 'terminated' };
        break;
      default:
        break;
    }
  }
  const plan = input?.plan;
  return {
    story: {
      ...(plan ? { version: plan.version, image: plan.image, strategy: plan.strategy ?? 'canary' } : {}),
      steps: plan ? plan.steps.map((s, i) => describeStep(s, i, plan.steps.length)) : [],
      ...(plan?.analysis ? {
        analysis: {
          intervalSeconds: plan.analysis.intervalMs / 1000,
          queries: plan.analysis.metrics.map((m) => ({ metric: m.name, query: m.query, range: rangeText(m.range), ...(m.dryRun ? { dryRun: true } : {}) })),
        },
      } : {}),
      ...(outcome ? { outcome } : {}),
      entries,
    },
    ...(continues ? { continues } : {}),
  };
}

/** What the rollout knew once it wrote this status: its phase, a person's pause, an analysis hold. */
function viewAfterStatus(v: ControlView, input: CanaryStatusInput): ControlView {
  const reason = input.event?.reason;
  const blind = reason === Reason.AnalysisInconclusive ? true : reason === Reason.AnalysisRecovered ? false : v.blind;
  return { ...v, phase: input.status.phase, pausedByUser: input.status.pausedBy !== undefined, blind };
}

/** One metric's verdict in a line: `success-rate: 99.5 vs >= 99: pass`; an inconclusive one says why. */
export function verdictLine(metric: AnalysisMetric, answer: MetricValue, at: string, weight: number): string {
  const v = judge(metric, answer, at, weight);
  const value = answer.value !== null ? String(Math.round(answer.value * 1000) / 1000) : answer.nonFinite ?? 'no value';
  return `${metric.name}${metric.dryRun ? ' (dry run)' : ''}: ${value} vs ${rangeText(metric.range)}: ${v.result}${v.result === 'inconclusive' ? ` (${v.message})` : ''}`;
}

/** A range in a few characters: `>= 99`, `<= 500`, `1..2`. */
export function rangeText(r: { min?: number; max?: number }): string {
  if (r.min !== undefined && r.max !== undefined) return `${r.min}..${r.max}`;
  return r.min !== undefined ? `>= ${r.min}` : `<= ${r.max ?? '?'}`;
}

/** A route the rollout set, in words. */
function describeRouted(route: RouteInput['route']): string {
  return `routed ${route.weight}% to the canary${route.headers?.length ? ', with a header route' : ''}${route.mirror ? `, mirroring ${route.mirror}%` : ''}`;
}

function describeControl(action: ControlAction, r: ControlRequest | undefined, how: 'signal' | 'update'): string {
  return `${action} by ${r?.by ?? 'someone'} (${how})${r?.reason ? `: ${r.reason}` : ''}`;
}

function timeOf(e: HistoryEvent): string {
  const t = e.eventTime;
  return new Date(Number(t?.seconds ?? 0) * 1000 + Math.floor((t?.nanos ?? 0) / 1e6)).toISOString();
}

/** The histories in a few lines a person reads: each metric's query once, then its verdicts as they came. */
export function formatHistory(namespace: string, name: string, histories: RolloutHistory[]): string {
  if (histories.length === 0) return `${namespace}/${name}: no rollout has run`;
  return histories.map((h) => [
    `${h.strategy === 'blueGreen' ? 'blue-green rollout' : 'canary'} ${h.version ?? '?'} (${h.image ?? '?'}) — ${h.outcome?.phase ?? h.status}${h.outcome ? `: ${h.outcome.message}` : ''}`,
    `  started ${h.startedAt}${h.closedAt ? `, ended ${h.closedAt}` : ', still running'}; workflow ${h.workflowId} run ${h.runId}${h.runs && h.runs > 1 ? ` (and ${h.runs - 1} later run(s): it continued as new)` : ''}`,
    ...(h.steps.length ? ['  steps:', ...h.steps.map((s) => `    ${s}`)] : []),
    ...(h.analysis ? [
      `  analysis every ${h.analysis.intervalSeconds} s, while requests reach the canary; each metric's query:`,
      ...h.analysis.queries.map((q) => `    ${q.metric} (${q.range}${q.dryRun ? ', dry run: never decides' : ''}): ${q.query}`),
    ] : []),
    ...h.entries.map((e) => `  ${e.at}  ${e.kind.padEnd(8)} ${e.text}${e.ignored ? ` (ignored: ${e.ignored})` : ''}`),
  ].join('\n')).join('\n\n');
}
