import { pino, type Logger as PinoLogger } from 'pino';

export type Logger = PinoLogger;

/** Structured JSON logs on stdout; every line of an app's reconcile carries namespace, name, workflowId, generation. */
export function createLogger(level: string, base: Record<string, unknown> = {}): Logger {
  return pino({ level, base: { app: 'application-operator', ...base }, timestamp: pino.stdTimeFunctions.isoTime });
}
