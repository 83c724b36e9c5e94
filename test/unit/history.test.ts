// The `history` command's story, told from histories built event by event in the shapes a real Temporal server
// records (as `temporal workflow show --output json` shows them for a rollout run by the operator): the start with
// the plan, activities scheduled and completed, local activities as markers (the analysis's queries), control
// signals and accepted updates, and a run that continues as new.
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { defaultFailureConverter, defaultPayloadConverter, type Payload } from '@temporalio/common';
import proto from '@temporalio/proto';
import type { CanaryStatusInput, MetricValue } from '../../activities/types.ts';
import {
  decoderOf, formatHistory, refusal, rangeText, tellRollouts, verdictLine, type ControlView, type HistoryEvent, type RolloutRun,
} from '../../client/history.ts';
import type { ControlAction, ControlRequest, RolloutCarry, RolloutInput, RolloutResult } from '../../workflows/contract.ts';
import type { AnalysisMetric, RolloutPlan } from '../../reconcile/plan.ts';

const EventType = proto.temporal.api.enums.v1.EventType;
const decode = decoderOf({ payloadConverter: defaultPayloadConverter, failureConverter: defaultFailureConverter, payloadCodecs: [] });
const payloads = (...values: unknown[]): { payloads: Payload[] } => ({ payloads: values.map((v) => defaultPayloadConverter.toPayload(v)) });

const successRate: AnalysisMetric = {
  name: 'success-rate', query: 'sum(rate(istio_requests_total{response_code!~"5.*"}[30s])) / sum(rate(istio_requests_total[30s])) * 100',
  template: 'request-success-rate', range: { min: 99 }, failureLimit: 2, inconclusiveLimit: 3, dryRun: false,
};
const cpu: AnalysisMetric = { name: 'cpu', query: 'sum(rate(container_cpu_usage_seconds_total[30s]))', range: { max: 2 }, failureLimit: 2, inconclusiveLimit: 3, dryRun: true };
const plan: RolloutPlan = {
  key: 'v2|app:v2', version: 'v2', image: 'app:v2', stableImage: 'app:v1',
  steps: [{ kind: 'weight', weight: 20 }, { kind: 'pause', ms: null }],
  gates: { minReadyReplicas: 1, maxRestarts: 3, intervalMs: 10_000, failureThreshold: 3, initialDelayMs: 0 },
  analysis: { intervalMs: 30_000, metrics: [successRate, cpu] },
  progressDeadlineMs: 1_800_000,
};

/** One run's history, event by event, with the time of each a second after the last. */
class RunBuilder {
  readonly events: HistoryEvent[] = [];
  private seconds = Date.parse('2026-12-01T10:00:00Z') / 1000;

  private push(eventType: number, attributes: Record<string, unknown>, userSummary?: string): number {
    const eventId = this.events.length + 1;
    this.events.push({
      eventId, eventType, eventTime: { seconds: this.seconds++, nanos: 0 },
      ...(userSummary ? { userMetadata: { summary: defaultPayloadConverter.toPayload(userSummary) } } : {}),
      ...attributes,
    } as unknown as HistoryEvent);
    return eventId;
  }

  started(input: RolloutInput, continuedFrom?: string): this {
    this.push(EventType.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED, {
      workflowExecutionStartedEventAttributes: { workflowType: { name: 'canaryRolloutWorkflow' }, input: payloads(input), ...(continuedFrom ? { continuedExecutionRunId: continuedFrom } : {}) },
    });
    return this;
  }

  /** An activity scheduled, then completed with `result`. */
  activity(type: string, input: unknown, result: unknown = null): this {
    const scheduledEventId = this.push(EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED, {
      activityTaskScheduledEventAttributes: { activityId: String(this.events.length + 1), activityType: { name: type }, input: payloads(input) },
    }, type);
    this.push(EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED, { activityTaskStartedEventAttributes: { scheduledEventId, attempt: 1 } });
    this.push(EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED, { activityTaskCompletedEventAttributes: { scheduledEventId, result: payloads(result) } });
    return this;
  }

  status(phase: RolloutCarry['state']['phase'], message: string, extra: Partial<CanaryStatusInput['status']> = {}, event?: CanaryStatusInput['event']): this {
    const input: CanaryStatusInput = {
      namespace: 'default', name: 'shop', status: { phase, step: 0, totalSteps: 2, weight: 0, message, version: 'v2', image: 'app:v2', startedAt: '2026-12-01T10:00:00Z', ...extra },
      ...(event ? { event } : {}),
    };
    return this.activity('writeCanaryStatus', input);
  }

  route(weight: number): this {
    return this.activity('setCanaryRoute', { namespace: 'default', name: 'shop', version: 'v2', route: { weight } });
  }

  /** A local activity, as the SDK records it: a marker whose data names the activity type, and its result. */
  localActivity(type: string, result: unknown): this {
    this.push(EventType.EVENT_TYPE_MARKER_RECORDED, {
      markerRecordedEventAttributes: {
        markerName: 'core_local_activity',
        details: { data: payloads({ seq: 3, attempt: 1, activity_id: '3', activity_type: type, backoff: null }), result: payloads(result) },
      },
    }, type);
    return this;
  }

  analysis(answers: MetricValue[]): this {
    return this.localActivity('queryMetrics', answers);
  }

  signal(name: ControlAction | 'recheck', request: ControlRequest | { object: string }): this {
    this.push(EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED, { workflowExecutionSignaledEventAttributes: { signalName: name, input: payloads(request), identity: 'history-service' } });
    return this;
  }

  update(name: ControlAction, request: ControlRequest): this {
    this.push(EventType.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED, {
      workflowExecutionUpdateAcceptedEventAttributes: { acceptedRequest: { meta: { updateId: 'u', identity: 'cli' }, input: { header: {}, name, args: payloads(request) } } },
    });
    return this;
  }

  completed(result: RolloutResult): this {
    this.push(EventType.EVENT_TYPE_WORKFLOW_EXECUTION_COMPLETED, { workflowExecutionCompletedEventAttributes: { result: payloads(result) } });
    return this;
  }

  continuedAsNew(): this {
    this.push(EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW, { workflowExecutionContinuedAsNewEventAttributes: { newExecutionRunId: 'next' } });
    return this;
  }
}

const input: RolloutInput = { namespace: 'default', name: 'shop', plan };
const passing: MetricValue[] = [{ name: 'success-rate', value: 99.51234 }, { name: 'cpu', value: null, noSeries: true }];
const failing: MetricValue[] = [{ name: 'success-rate', value: 42 }, { name: 'cpu', value: 0.5 }];

async function tell(runs: { runId: string; events: HistoryEvent[] }[]) {
  const listed: RolloutRun[] = runs.map((r, i) => ({ runId: r.runId, status: i === runs.length - 1 ? 'COMPLETED' : 'CONTINUED_AS_NEW', startTime: new Date(Date.UTC(2026, 11, 1, 10, i)) }));
  const byId = new Map(runs.map((r) => [r.runId, r.events]));
  return tellRollouts('application/default/shop/canary', listed, (id) => Promise.resolve(byId.get(id) ?? []), decode);
}

/** The first run of a promoted rollout: analysis at 20%, a pause asked and lifted, a promote. */
function promotedRun(): RunBuilder {
  return new RunBuilder().started(input)
    .status('Progressing', 'creating canary v2 (app:v2)')
    .localActivity('observeCanary', { health: { exists: true, readyReplicas: 1, desiredReplicas: 1, restarts: 0 }, asIntended: true, target: true })
    .route(20)
    .status('Paused', 'step 2/2: pause until promoted')
    .analysis(passing)
    .analysis(failing)
    .analysis(passing)
    .update('pause', { by: 'alice', reason: 'lunch' })
    .status('Paused', 'step 2/2: pause until promoted', { pausedBy: 'alice' })
    .update('resume', { by: 'alice' })
    .status('Paused', 'step 2/2: pause until promoted')
    .signal('resume', { by: 'bob' })
    .signal('recheck', { object: 'VirtualService/shop' })
    .update('promote', { by: 'alice', reason: 'looks good' })
    .status('Promoting', 'promoting by alice: stable Deployment takes app:v2');
}

describe('history: analysis', () => {
  test('each query once per rollout, then one `value vs range: result` line per metric and run', async () => {
    const run = promotedRun().route(0).status('Promoted', 'stable runs app:v2').completed({ key: plan.key, phase: 'Promoted', message: 'stable runs app:v2' });
    const [h] = await tell([{ runId: 'a', events: run.events }]);
    assert.deepEqual(h!.analysis, {
      intervalSeconds: 30,
      queries: [{ metric: 'success-rate', query: successRate.query, range: '>= 99' }, { metric: 'cpu', query: cpu.query, range: '<= 2', dryRun: true }],
    });
    assert.deepEqual(h!.entries.filter((e) => e.kind === 'analysis').map((e) => e.text), [
      'success-rate: 99.512 vs >= 99: pass',
      'cpu (dry run): no value vs <= 2: inconclusive (no data: the query matched no series)',
      'success-rate: 42 vs >= 99: fail',
      'cpu (dry run): 0.5 vs <= 2: pass',
      'success-rate: 99.512 vs >= 99: pass',
      'cpu (dry run): no value vs <= 2: inconclusive (no data: the query matched no series)',
    ]);
    const text = formatHistory('default', 'shop', [h!]);
    for (const q of [successRate.query, cpu.query]) assert.equal(text.split(q).length - 1, 1, `the query is printed once: ${q}`);
    assert.match(text, /analysis every 30 s, .*\n {4}success-rate \(>= 99\): sum\(rate/);
    assert.match(text, /\n {4}cpu \(<= 2, dry run: never decides\): sum\(rate\(container/);
  });

  test('verdict lines for answers that are no number', () => {
    const at = '2026-12-01T10:00:00Z';
    assert.equal(verdictLine(successRate, { name: 'success-rate', value: null, nonFinite: 'NaN' }, at, 20), `success-rate: NaN vs >= 99: inconclusive (${'the query returned NaN, not a number (a 0/0, such as a ratio over an interval without requests, or a quantile of an empty histogram): neither a pass nor a fail'})`);
    assert.equal(verdictLine({ ...successRate, range: { max: 500 } }, { name: 'success-rate', value: null, nonFinite: '+Inf' }, at, 20), 'success-rate: +Inf vs <= 500: fail');
    assert.equal(verdictLine(successRate, { name: 'success-rate', value: null, error: 'Prometheus unreachable: connect ECONNREFUSED' }, at, 20), 'success-rate: no value vs >= 99: inconclusive (Prometheus unreachable: connect ECONNREFUSED)');
    assert.equal(rangeText({ min: 1, max: 2 }), '1..2');
  });
});

describe('history: control requests that changed nothing', () => {
  test('the abort the Application sends after a promote (the spec\'s canary switched off) is marked ignored', async () => {
    const run = promotedRun().route(0).status('Promoted', 'stable runs app:v2')
      .signal('abort', { by: 'spec', reason: 'the canary was disabled in the spec' })
      .completed({ key: plan.key, phase: 'Promoted', message: 'stable runs app:v2' });
    const [h] = await tell([{ runId: 'a', events: run.events }]);
    const controls = h!.entries.filter((e) => e.kind === 'control').map((e) => [e.text, e.ignored]);
    assert.deepEqual(controls, [
      ['pause by alice (update): lunch', undefined],
      ['resume by alice (update)', undefined],
      ['resume by bob (signal)', 'the rollout was not paused by request'],
      ['promote by alice (update): looks good', undefined],
      ['abort by spec (signal): the canary was disabled in the spec', 'the rollout was already Promoted'],
    ]);
    assert.match(formatHistory('default', 'shop', [h!]), /control {2}abort by spec \(signal\): the canary was disabled in the spec \(ignored: the rollout was already Promoted\)$/m);
  });

  test('one that came while promoting, which the rollout took but its promotion overtook, is marked ignored too', async () => {
    const run = promotedRun().signal('abort', { by: 'spec', reason: 'the canary was disabled in the spec' })
      .route(0).status('Promoted', 'stable runs app:v2').completed({ key: plan.key, phase: 'Promoted', message: 'stable runs app:v2' });
    const [h] = await tell([{ runId: 'a', events: run.events }]);
    assert.equal(h!.entries.find((e) => e.action === 'abort')?.ignored, 'the rollout was being promoted, and ended Promoted');
  });

  test('an abort that stops the rollout is not ignored; a second one is, and so is a promote the abort overtook', async () => {
    const run = new RunBuilder().started(input)
      .status('Progressing', 'creating canary v2 (app:v2)').route(20)
      .signal('promote', { by: 'alice' })
      .signal('abort', { by: 'bob', reason: 'errors' })
      .signal('abort', { by: 'carol' })
      .status('Aborting', 'aborting: errors', { abortedBy: 'bob' }).route(0)
      .status('Aborted', 'aborted by bob: errors', { abortedBy: 'bob' })
      .signal('pause', { by: 'dave' })
      .completed({ key: plan.key, phase: 'Aborted', message: 'aborted by bob: errors' });
    const [h] = await tell([{ runId: 'a', events: run.events }]);
    assert.deepEqual(h!.entries.filter((e) => e.kind === 'control').map((e) => [e.action, e.ignored]), [
      ['promote', 'the rollout ended Aborted before promoting'],
      ['abort', undefined],
      ['abort', 'the rollout was already being aborted'],
      ['pause', 'a rollout that is Aborted cannot be paused'],
    ]);
  });

  test('across continue-as-new: a run starts from the state it carried (a person\'s pause), and the runs are one rollout', async () => {
    const firstEvents = new RunBuilder().started(input).status('Progressing', 'creating canary v2 (app:v2)').route(20)
      .update('pause', { by: 'alice' }).status('Paused', 'paused by request of alice', { pausedBy: 'alice' }).analysis(passing).continuedAsNew().events;
    const carried = {
      state: { phase: 'Paused', message: 'paused by request of alice', pausedByUser: true, pausedBy: 'alice' }, route: { weight: 20 }, position: { at: 'steps', step: 1, done: false },
    } as unknown as RolloutCarry;
    const second = new RunBuilder().started({ ...input, carried }, 'a')
      .signal('pause', { by: 'bob' })
      .signal('resume', { by: 'bob' })
      .analysis(failing)
      .signal('promote', { by: 'bob' })
      .status('Promoting', 'promoting by bob').route(0).status('Promoted', 'stable runs app:v2')
      .signal('abort', { by: 'spec', reason: 'the canary was disabled in the spec' })
      .completed({ key: plan.key, phase: 'Promoted', message: 'stable runs app:v2' });
    const stories = await tell([{ runId: 'a', events: firstEvents }, { runId: 'b', events: second.events }]);
    assert.equal(stories.length, 1, 'one rollout');
    const [h] = stories;
    assert.equal(h!.runs, 2);
    assert.deepEqual(h!.entries.filter((e) => e.kind === 'control').map((e) => [e.text, e.ignored]), [
      ['pause by alice (update)', undefined],
      ['pause by bob (signal)', 'the rollout was already paused'],
      ['resume by bob (signal)', undefined],
      ['promote by bob (signal)', undefined],
      ['abort by spec (signal): the canary was disabled in the spec', 'the rollout was already Promoted'],
    ]);
    assert.equal(h!.entries.filter((e) => e.kind === 'analysis').length, 4, 'both runs\' verdicts');
    assert.equal(formatHistory('default', 'shop', [h!]).split(successRate.query).length - 1, 1, 'the query once for the whole rollout');
  });
});

describe('refusal: the rollout\'s rules for control requests', () => {
  const view = (v: Partial<ControlView>): ControlView => ({ phase: 'Progressing', pausedByUser: false, blind: false, abortRequested: false, promoteRequested: false, ...v });
  const cases: [ControlAction, Partial<ControlView>, string | undefined][] = [
    ['promote', {}, undefined],
    ['promote', { phase: 'Promoting' }, 'the rollout was already being promoted'],
    ['promote', { promoteRequested: true }, 'the rollout was already being promoted'],
    ['abort', { phase: 'Promoting' }, undefined],
    ['abort', { phase: 'RolledBack' }, 'the rollout was already RolledBack'],
    ['abort', { abortRequested: true }, 'the rollout was already being aborted'],
    ['pause', { phase: 'Paused' }, undefined],
    ['pause', { phase: 'Promoting' }, 'a rollout that is Promoting cannot be paused'],
    ['resume', { phase: 'Paused' }, 'the rollout was not paused by request'],
    ['resume', { phase: 'Paused', blind: true }, undefined],
    ['resume', { pausedByUser: true }, undefined],
  ];
  for (const [action, v, want] of cases) test(`${action} when ${JSON.stringify(v)}: ${want ?? 'taken'}`, () => assert.equal(refusal(action, view(v)), want));
});
