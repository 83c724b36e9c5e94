// Traces from workflow code: one trace per reconcile pass (joined to the watcher's signal that woke it) and one per
// rollout step. With tracing on, Temporal's OpenTelemetry interceptors run in the workflow sandbox and these spans
// are exported through their sink, and the activities scheduled inside a span are its children (their context goes
// in the activity's headers); with tracing off every call here is a no-op. Span ids come from the sandbox's seeded
// randomness, so a replay makes the same ones.
import { ROOT_CONTEXT, SpanStatusCode, context, trace, type SpanContext } from '@opentelemetry/api';
import { ContinueAsNew } from '@temporalio/workflow';

/** The span context of what is running now (in a signal handler: the signal's, which carries the sender's trace). */
export function activeSpanContext(): SpanContext | undefined {
  const ctx = trace.getSpanContext(context.active());
  return ctx && trace.isSpanContextValid(ctx) ? ctx : undefined;
}

/**
 * Runs `fn` inside a span named `name` (with `attributes`: app.namespace and app.name, which `stack trace <app>` finds
 * it by): a child of `parent` (a signal's context) or the root of a new trace. `fn` gets the trace id while tracing is
 * on (for summaries, details and logs), undefined otherwise.
 */
export async function traced<T>(
  name: string, parent: SpanContext | undefined, attributes: Record<string, string>, fn: (traceId: string | undefined) => Promise<T>,
): Promise<T> {
  const ctx = parent ? trace.setSpanContext(ROOT_CONTEXT, parent) : ROOT_CONTEXT;
  return trace.getTracer('application-operator-workflows').startActiveSpan(name, { root: !parent, attributes }, ctx, async (span) => {
    try {
      return await fn(span.isRecording() ? span.spanContext().traceId : undefined);
    } catch (err) {
      // Continuing as new ends the span, not in error: the next run goes on with the work.
      if (!(err instanceof ContinueAsNew)) span.setStatus({ code: SpanStatusCode.ERROR, message: err instanceof Error ? err.message : String(err) });
      throw err;
    } finally {
      span.end();
    }
  });
}
