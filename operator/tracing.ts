// Distributed tracing with OpenTelemetry, off unless configured with the usual OTEL_* variables (or
// --otlp-endpoint): spans of the watcher's signals, the workflows (through Temporal's OpenTelemetry interceptors,
// which carry the trace context in headers from the client to the workflow and its activities) and each request to
// the API server (with `traceparent`, so the API server's own spans join the trace). Exported over OTLP/HTTP.
// docs/monitoring.md says how to read a trace.
// The SDKs are imported only when tracing is on: off (the default), the operator does not hold their code (about
// 20 MB of its resident memory; docs/benchmark.md, "Where the memory goes").
import type { OpenTelemetryPlugin, OpenTelemetryWorkflowClientInterceptor } from '@temporalio/interceptors-opentelemetry';

export interface TracingConfig {
  /** Where spans go (an OTLP/HTTP endpoint such as http://127.0.0.1:4318); the exporter reads OTEL_EXPORTER_OTLP_* too. */
  endpoint?: string;
  serviceName: string;
}

/**
 * Whether tracing is on, from the environment the OpenTelemetry SDKs read (and the operator's --otlp-endpoint, as
 * `endpoint`): on when an OTLP endpoint is given or OTEL_TRACES_EXPORTER says otlp; off when OTEL_SDK_DISABLED is
 * true or OTEL_TRACES_EXPORTER is none, whatever else is set.
 */
export function tracingConfig(env: NodeJS.ProcessEnv, endpoint?: string): TracingConfig | undefined {
  if ((env['OTEL_SDK_DISABLED'] ?? '').toLowerCase() === 'true') return undefined;
  const exporters = (env['OTEL_TRACES_EXPORTER'] ?? '').split(',').map((e) => e.trim().toLowerCase()).filter(Boolean);
  if (exporters.includes('none')) return undefined;
  const url = endpoint ?? env['OTEL_EXPORTER_OTLP_TRACES_ENDPOINT'] ?? env['OTEL_EXPORTER_OTLP_ENDPOINT'];
  if (!url && !exporters.includes('otlp')) return undefined;
  return { ...(endpoint ? { endpoint } : {}), serviceName: env['OTEL_SERVICE_NAME'] ?? 'application-operator' };
}

/** The running tracing: the plugin for the worker, the interceptor for clients, and a flush-and-stop. */
export interface Tracing {
  plugin: OpenTelemetryPlugin;
  clientInterceptor: OpenTelemetryWorkflowClientInterceptor;
  shutdown(): Promise<void>;
}

/** Starts the tracer provider (global, so the API server client's and the activities' spans use it). */
export async function startTracing(config: TracingConfig): Promise<Tracing> {
  const [{ OTLPTraceExporter }, { Resource }, { BatchSpanProcessor, NodeTracerProvider }, { OpenTelemetryPlugin, OpenTelemetryWorkflowClientInterceptor }] = await Promise.all([
    import('@opentelemetry/exporter-trace-otlp-http'), import('@opentelemetry/resources'), import('@opentelemetry/sdk-trace-node'), import('@temporalio/interceptors-opentelemetry'),
  ]);
  const resource = new Resource({ 'service.name': config.serviceName });
  // OTLP/HTTP takes the signal path under a base endpoint; an explicit --otlp-endpoint is such a base.
  const exporter = new OTLPTraceExporter(config.endpoint ? { url: `${config.endpoint.replace(/\/+$/, '')}/v1/traces` } : {});
  const processor = new BatchSpanProcessor(exporter, { scheduledDelayMillis: 1000 });
  const provider = new NodeTracerProvider({ resource, spanProcessors: [processor] });
  provider.register();
  return {
    plugin: new OpenTelemetryPlugin({ resource, spanProcessor: processor }),
    clientInterceptor: new OpenTelemetryWorkflowClientInterceptor(),
    shutdown: () => provider.shutdown(),
  };
}
