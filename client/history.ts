// Every rollout of an Application, newest first, told from the workflow histories themselves (found through
// Temporal visibility): its plan, the routes it set, the analysis verdicts, who promoted, aborted, paused or resumed
// and why, each phase it went through, and how it ended. Nothing here comes from logs.
import type { Client } from '@temporalio/client';
import type { LoadedDataConverter, Payload } from '@temporalio/common';
import proto from '@temporalio/proto';
import type { CanaryStatusInput, MetricValue, RouteInput } from '../activities/types.ts';
import { judge } from '../workflows/rollout/analysis.ts';
import { controlActions, rolloutWorkflowId, type ControlRequest, type RolloutInput, type RolloutResult } from '../workflows/contract.ts';
import { describeStep } from '../workflows/rollout/plan.ts';

const EventType = proto.temporal.api.enums.v1.EventType;
type HistoryEvent = proto.temporal.api.history.v1.IHistoryEvent;

export interface HistoryEntry {
  at: string;
  kind: 'phase' | 'route' | 'control' | 'analysis';
  text: string;
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
  steps: string[];
  outcome?: { phase: string; message: string };
  entries: HistoryEntry[];
  /** How many workflow runs the rollout took (it continues as new to keep each history short). */
  runs?: number;
}

/**
 * Every rollout of `namespace/name`, newest first (at most `limit`). A rollout that continued as new is one story
 * told over several runs: they are joined (each run's first event names the run it continues).
 */
export async function rolloutHistory(client: Client, namespace: string, name: string, limit = 20): Promise<RolloutHistory[]> {
  const workflowId = rolloutWorkflowId(namespace, name);
  const runs: { runId: string; status: string; startTime: Date; closeTime?: Date | undefined }[] = [];
  for await (const wf of client.workflow.list({ query: `WorkflowId = '${workflowId}'` })) {
    runs.push({ runId: wf.runId, status: wf.status.name, startTime: wf.startTime, closeTime: wf.closeTime });
  }
  runs.sort((a, b) => b.startTime.getTime() - a.startTime.getTime());
  const converter = client.options.loadedDataConverter;
  const out: RolloutHistory[] = [];
  // Newest first: a run that continues another is joined to it once that one is read.
  let continuing: { run: RolloutHistory; from: string } | undefined;
  for (const run of runs) {
    if (!continuing && out.length >= limit) break;
    const history = await client.workflow.getHandle(workflowId, run.runId).fetchHistory();
    const told = await tell(history.events ?? [], converter);
    const story: RolloutHistory = {
      workflowId, runId: run.runId, status: run.status, startedAt: run.startTime.toISOString(),
      ...(run.closeTime ? { closedAt: run.closeTime.toISOString() } : {}),
      ...told.story,
    };
    if (continuing && continuing.from === run.runId) {
      const later = continuing.run;
      Object.assign(later, {
        runId: story.runId, startedAt: story.startedAt, version: story.version ?? later.version, image: story.image ?? later.image,
        steps: story.steps.length ? story.steps : later.steps, entries: [...story.entries, ...later.entries], runs: (later.runs ?? 1) + 1,
      });
    } else {
      out.push(story);
    }
    const target = continuing && continuing.from === run.runId ? continuing.run : story;
    continuing = told.continues ? { run: target, from: told.continues } : undefined;
  }
  return out;
}

/** Reads one rollout's story out of its history events. */
async function tell(events: HistoryEvent[], converter: LoadedDataConverter): Promise<{ story: Pick<RolloutHistory, 'version' | 'image' | 'steps' | 'outcome' | 'entries'>; continues?: string }> {
  const decode = async <T>(payloads: Payload[] | null | undefined): Promise<T[]> => {
    let ps = payloads ?? [];
    for (const codec of [...converter.payloadCodecs].reverse()) ps = await codec.decode(ps);
    return ps.map((p) => converter.payloadConverter.fromPayload<T>(p));
  };
  const entries: HistoryEntry[] = [];
  const add = (e: HistoryEvent, kind: HistoryEntry['kind'], text: string) => entries.push({ at: timeOf(e), kind, text });
  const scheduled = new Map<string, { type: string; input: unknown }>();
  let input: RolloutInput | undefined;
  let outcome: RolloutHistory['outcome'];
  let lastPhase = '';
  let lastRoute = '';
  let continues: string | undefined;
  const analysisLines = async (e: HistoryEvent, payloads: Payload[] | null | undefined) => {
    if (!input?.plan.analysis) return;
    const [answers] = await decode<MetricValue[]>(payloads);
    const weight = Number(/routed (\d+)%/.exec(lastRoute)?.[1] ?? 0);
    for (const m of input.plan.analysis.metrics) {
      const v = judge(m, answers?.find((a) => a.name === m.name) ?? { name: m.name, value: null, error: 'no answer' }, timeOf(e), weight);
      add(e, 'analysis', `${v.metric}${v.dryRun ? ' (dry run)' : ''}: ${v.result}: ${v.message} [${v.query}]`);
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
          const r = input.carried.route;
          lastRoute = `routed ${r.weight}% to the canary${r.headers?.length ? ', with a header route' : ''}${r.mirror ? `, mirroring ${r.mirror}%` : ''}`;
          lastPhase = `${input.carried.state.phase}: ${input.carried.state.message}`;
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
        if (!controlActions.includes(signal?.signalName as never)) break;
        const [request] = await decode<ControlRequest | undefined>(signal?.input?.payloads);
        add(e, 'control', describeControl(signal?.signalName ?? '?', request, 'signal'));
        break;
      }
      case EventType.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED: {
        const request = e.workflowExecutionUpdateAcceptedEventAttributes?.acceptedRequest?.input;
        const [args] = await decode<ControlRequest | undefined>(request?.args?.payloads);
        add(e, 'control', describeControl(request?.name ?? '?', args, 'update'));
        break;
      }
      case EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED: {
        const a = e.activityTaskScheduledEventAttributes;
        const [arg] = await decode<unknown>(a?.input?.payloads);
        scheduled.set(id, { type: a?.activityType?.name ?? '', input: arg });
        break;
      }
      case EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED: {
        const done = e.activityTaskCompletedEventAttributes;
        const call = scheduled.get(String(done?.scheduledEventId ?? ''));
        if (!call) break;
        if (call.type === 'writeCanaryStatus') {
          const { phase, message } = (call.input as CanaryStatusInput).status;
          const line = `${phase}: ${message}`;
          if (line !== lastPhase) add(e, 'phase', line);
          lastPhase = line;
        } else if (call.type === 'setCanaryRoute') {
          const { route } = call.input as RouteInput;
          const line = `routed ${route.weight}% to the canary${route.headers?.length ? ', with a header route' : ''}${route.mirror ? `, mirroring ${route.mirror}%` : ''}`;
          if (line !== lastRoute) add(e, 'route', line);
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
      case EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW:
        break;
      default:
        break;
    }
  }
  const plan = input?.plan;
  return {
    story: {
      ...(plan ? { version: plan.version, image: plan.image } : {}),
      steps: plan ? plan.steps.map((s, i) => describeStep(s, i, plan.steps.length)) : [],
      ...(outcome ? { outcome } : {}),
      entries,
    },
    ...(continues ? { continues } : {}),
  };
}

function describeControl(action: string, r: ControlRequest | undefined, how: 'signal' | 'update'): string {
  return `${action} by ${r?.by ?? 'someone'} (${how})${r?.reason ? `: ${r.reason}` : ''}`;
}

function timeOf(e: HistoryEvent): string {
  const t = e.eventTime;
  return new Date(Number(t?.seconds ?? 0) * 1000 + Math.floor((t?.nanos ?? 0) / 1e6)).toISOString();
}

/** The histories in a few lines a person reads. */
export function formatHistory(namespace: string, name: string, histories: RolloutHistory[]): string {
  if (histories.length === 0) return `${namespace}/${name}: no canary rollout has run`;
  return histories.map((h) => [
    `canary ${h.version ?? '?'} (${h.image ?? '?'}) — ${h.outcome?.phase ?? h.status}${h.outcome ? `: ${h.outcome.message}` : ''}`,
    `  started ${h.startedAt}${h.closedAt ? `, ended ${h.closedAt}` : ', still running'}; workflow ${h.workflowId} run ${h.runId}${h.runs && h.runs > 1 ? ` (and ${h.runs - 1} later run(s): it continued as new)` : ''}`,
    ...(h.steps.length ? ['  steps:', ...h.steps.map((s) => `    ${s}`)] : []),
    ...h.entries.map((e) => `  ${e.at}  ${e.kind.padEnd(8)} ${e.text}`),
  ].join('\n')).join('\n\n');
}
