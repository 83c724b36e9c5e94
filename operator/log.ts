import { pino, type Logger as PinoLogger } from 'pino';
import { activeTraceId } from '../lib/trace.ts';

export type Logger = PinoLogger;

/**
 * Structured JSON logs on stdout; every line of an app's reconcile carries namespace, name, workflowId, generation,
 * and with tracing on the `traceId` of the pass or step it belongs to (operator/tracing.ts).
 */
export function createLogger(level: string, base: Record<string, unknown> = {}): Logger {
  return pino({
    level, base: { app: 'application-operator', ...base }, timestamp: pino.stdTimeFunctions.isoTime,
    mixin: () => {
      const traceId = activeTraceId();
      return traceId ? { traceId } : {};
    },
  });
}
