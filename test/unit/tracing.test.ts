import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { tracingConfig } from '../../operator/tracing.ts';
import { formatTree, traceTree, type JaegerSpan, type JaegerTrace } from '../../stack/trace-tree.ts';
import { apiserverTracingConfig, jaegerConfig, defaultTracingPorts } from '../../stack/tracing.ts';

describe('tracingConfig: off unless the OTEL_* variables or --otlp-endpoint ask for it', () => {
  test('nothing set: off', () => assert.equal(tracingConfig({}), undefined));
  test('an OTLP endpoint (general or for traces) or OTEL_TRACES_EXPORTER=otlp: on, with the service name', () => {
    assert.deepEqual(tracingConfig({ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://127.0.0.1:4318' }), { serviceName: 'application-operator' });
    assert.deepEqual(tracingConfig({ OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: 'http://x:4318/v1/traces', OTEL_SERVICE_NAME: 'op-eu' }), { serviceName: 'op-eu' });
    assert.deepEqual(tracingConfig({ OTEL_TRACES_EXPORTER: 'otlp' }), { serviceName: 'application-operator' });
    assert.deepEqual(tracingConfig({}, 'http://jaeger:4318'), { endpoint: 'http://jaeger:4318', serviceName: 'application-operator' });
  });
  test('OTEL_SDK_DISABLED=true or OTEL_TRACES_EXPORTER=none: off whatever else is set', () => {
    assert.equal(tracingConfig({ OTEL_SDK_DISABLED: 'TRUE', OTEL_EXPORTER_OTLP_ENDPOINT: 'http://x' }), undefined);
    assert.equal(tracingConfig({ OTEL_TRACES_EXPORTER: 'none' }, 'http://x'), undefined);
    assert.equal(tracingConfig({ OTEL_TRACES_EXPORTER: 'console' }), undefined, 'an exporter we do not ship is no reason to start');
  });
});

const span = (id: string, name: string, start: number, duration: number, parent?: { traceID: string; spanID: string; refType?: 'CHILD_OF' | 'FOLLOWS_FROM' }, traceID = 't1', processID = 'p1'): JaegerSpan => ({
  traceID, spanID: id, operationName: name, startTime: start * 1000, duration: duration * 1000, processID,
  ...(parent ? { references: [{ refType: parent.refType ?? 'CHILD_OF', traceID: parent.traceID, spanID: parent.spanID }] } : {}),
});

describe('traceTree', () => {
  const root: JaegerTrace = {
    traceID: 't1', processes: { p1: { serviceName: 'application-operator' } },
    spans: [
      span('c', 'PATCH /apis/apps/v1/namespaces/a/deployments/web', 30, 5, { traceID: 't1', spanID: 'b' }),
      span('a', 'signal spec: Application a/web', 0, 2),
      span('b', 'reconcile pass a/web', 10, 40, { traceID: 't1', spanID: 'a' }),
      span('d', 'GET /api/v1/namespaces/a/services/web', 20, 3, { traceID: 't1', spanID: 'b' }),
      span('e', 'lost parent', 60, 1, { traceID: 't1', spanID: 'gone' }),
    ],
  };
  // The API server's own trace (a new root for a caller it does not trust), linking to the PATCH.
  const apiserver: JaegerTrace = {
    traceID: 't2', processes: { q: { serviceName: 'apiserver' }, r: { serviceName: 'etcd' } },
    spans: [span('x', 'PATCH', 31, 3, { traceID: 't1', spanID: 'c', refType: 'FOLLOWS_FROM' }, 't2', 'q'), span('y', 'etcdserverpb.KV/Txn', 32, 1, { traceID: 't2', spanID: 'x' }, 't2', 'r')],
  };

  test('depth first from the earliest span, children in start order; a span whose parent is missing hangs under the root', () => {
    assert.deepEqual(traceTree(root).map((l) => [l.depth, l.name, l.offsetMs]), [
      [0, 'signal spec: Application a/web', 0],
      [1, 'reconcile pass a/web', 10],
      [2, 'GET /api/v1/namespaces/a/services/web', 20],
      [2, 'PATCH /apis/apps/v1/namespaces/a/deployments/web', 30],
      [1, 'lost parent', 60],
    ]);
  });

  test('a linked trace of the API server is grafted under the span it links to, with its services', () => {
    const lines = traceTree(root, [apiserver]);
    const patch = lines.findIndex((l) => l.name.startsWith('PATCH /apis'));
    assert.deepEqual(lines.slice(patch + 1, patch + 3).map((l) => [l.depth, l.name, l.service]), [[3, 'PATCH', 'apiserver'], [4, 'etcdserverpb.KV/Txn', 'etcd']]);
  });

  test('formatTree: offset, duration, the name indented by depth and the service', () => {
    const text = formatTree(traceTree(root).slice(0, 2));
    assert.equal(text, ['   +0.0 ms    2.0 ms  signal spec: Application a/web  [application-operator]', '  +10.0 ms   40.0 ms    reconcile pass a/web  [application-operator]'].join('\n'));
  });

  test('an empty trace is an empty tree', () => assert.deepEqual(traceTree({ traceID: 'z', spans: [], processes: {} }), []));
});

describe('the stack\'s trace backend configuration', () => {
  test('Jaeger listens on 127.0.0.1 only and keeps traces in memory', () => {
    const yaml = JSON.stringify(jaegerConfig(defaultTracingPorts));
    for (const endpoint of yaml.match(/"endpoint":"[^"]+"/g) ?? []) assert.match(endpoint, /"endpoint":"127\.0\.0\.1:\d+"/);
    assert.match(yaml, /"memory":\{"max_traces":100000\}/);
  });
  test('the API server exports to Jaeger\'s OTLP/gRPC port and samples only what comes sampled', () => {
    assert.deepEqual(apiserverTracingConfig(defaultTracingPorts), {
      apiVersion: 'apiserver.config.k8s.io/v1', kind: 'TracingConfiguration', endpoint: '127.0.0.1:24317', samplingRatePerMillion: 0,
    });
  });
});
