// The OpenTelemetry API the operator's code uses (no SDK: with tracing off every call here is a no-op). The SDK is
// started by operator/tracing.ts when tracing is configured.
import { trace, type Tracer } from '@opentelemetry/api';

/** The instrumentation scope of the operator's own spans. */
export const TRACER_NAME = 'application-operator';

/** The operator's tracer (a no-op one while tracing is off). */
export function tracer(): Tracer {
  return trace.getTracer(TRACER_NAME);
}

/** The trace id of the active span, for log lines (undefined outside one, or with tracing off). */
export function activeTraceId(): string | undefined {
  const ctx = trace.getActiveSpan()?.spanContext();
  return ctx && trace.isSpanContextValid(ctx) ? ctx.traceId : undefined;
}
