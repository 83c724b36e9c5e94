import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { Command } from 'commander';
import { operatorConfig, withOperatorOptions, type OperatorConfig } from '../../operator/config.ts';

// Every variable an option reads, plus the Lease namespace fallback: the caller's environment must not leak in.
const envVars = [...withOperatorOptions(new Command()).options.flatMap((o) => (o.envVar ? [o.envVar] : [])), 'POD_NAMESPACE'];

/** operatorConfig of `args` parsed as a user would type them, with exactly `env` set. */
function config(args: string[], env: Record<string, string> = {}): OperatorConfig {
  const saved = Object.fromEntries(envVars.map((k) => [k, process.env[k]]));
  for (const k of envVars) Reflect.deleteProperty(process.env, k);
  Object.assign(process.env, env);
  try {
    const cmd = withOperatorOptions(new Command()).exitOverride().configureOutput({ writeErr: () => {} });
    return operatorConfig(cmd.parse(args, { from: 'user' }).opts());
  } finally {
    for (const k of envVars) {
      const v = saved[k];
      if (v === undefined) Reflect.deleteProperty(process.env, k);
      else process.env[k] = v;
    }
  }
}

const defaults: OperatorConfig = {
  temporalAddress: 'localhost:7233',
  temporalNamespace: 'default',
  taskQueue: 'application-operator',
  namespaces: [],
  mode: 'all',
  metricsAddr: '127.0.0.1:9464',
  logLevel: 'info',
  maxConcurrentActivities: 10,
  maxConcurrentWorkflowTasks: 20,
  maxCachedWorkflows: 200,
  stuckWorkflowSeconds: 5,
  workflowStackTraces: false,
  progressRecheckSeconds: 30,
  releasePollSeconds: 30,
  resyncSeconds: 0,
  refusedRetrySeconds: 30,
  coalesceMs: 300,
  sweepSeconds: 30,
  registerSearchAttributes: true,
  leaderElect: false,
  leaseName: 'application-operator-leader',
  leaseNamespace: 'default',
  leaseDurationSeconds: 15,
  leaseRenewDeadlineSeconds: 10,
  leaseRetryPeriodSeconds: 2,
  shutdownTimeoutSeconds: 20,
  checkAllowedHosts: [],
  clustersNamespace: 'application-operator',
  clusterProbeSeconds: 30,
};

describe('operatorConfig', () => {
  test('defaults', () => assert.deepEqual(config([]), defaults));

  const cases: { name: string; args: string[]; env?: Record<string, string>; changes: Partial<OperatorConfig> }[] = [
    { name: 'namespaces split on commas and trimmed', args: ['--namespaces', ' team-a, team-b ,,team-c '], changes: { namespaces: ['team-a', 'team-b', 'team-c'] } },
    { name: 'the SDK\'s per-call deadline back, by flag or environment', args: ['--stuck-workflow-seconds=0'], changes: { stuckWorkflowSeconds: 0 } },
    { name: 'a longer stuck-workflow deadline from the environment', args: [], env: { STUCK_WORKFLOW_SECONDS: '30' }, changes: { stuckWorkflowSeconds: 30 } },
    { name: 'workflow stack traces kept, by flag', args: ['--workflow-stack-traces'], changes: { workflowStackTraces: true } },
    { name: 'workflow stack traces kept, by environment', args: [], env: { WORKFLOW_STACK_TRACES: 'true' }, changes: { workflowStackTraces: true } },
    { name: 'workflow stack traces off, said outright', args: ['--workflow-stack-traces=false'], changes: { workflowStackTraces: false } },
    { name: 'namespaces from the environment', args: [], env: { WATCH_NAMESPACES: 'prod,staging' }, changes: { namespaces: ['prod', 'staging'] } },
    { name: 'a flag wins over the environment', args: ['--temporal-address', 'flag:7233'], env: { TEMPORAL_ADDRESS: 'env:7233' }, changes: { temporalAddress: 'flag:7233' } },
    { name: 'an empty value means the default', args: ['--task-queue', ''], changes: {} },
    { name: 'numbers parsed', args: ['--max-concurrent-activities', '4', '--resync-seconds', '600'], changes: { maxConcurrentActivities: 4, resyncSeconds: 600 } },
    { name: 'mode', args: ['--mode', 'worker'], changes: { mode: 'worker' } },
    { name: 'search attributes off', args: ['--no-register-search-attributes'], changes: { registerSearchAttributes: false } },
    {
      name: 'mTLS with cert and key',
      args: ['--temporal-tls-cert', '/tls/tls.crt', '--temporal-tls-key', '/tls/tls.key', '--temporal-tls-ca', '/tls/ca.crt'],
      changes: { temporalTlsCert: '/tls/tls.crt', temporalTlsKey: '/tls/tls.key', temporalTlsCa: '/tls/ca.crt' },
    },
    { name: 'optional strings only when set', args: ['--kubeconfig', '/k', '--temporal-ui-url', 'http://ui:8080'], changes: { kubeconfig: '/k', temporalUiUrl: 'http://ui:8080' } },
    { name: 'Lease namespace from POD_NAMESPACE', args: [], env: { POD_NAMESPACE: 'operators' }, changes: { leaseNamespace: 'operators', clustersNamespace: 'operators' } },
    { name: 'Lease namespace flag wins over POD_NAMESPACE', args: ['--lease-namespace', 'ops'], env: { POD_NAMESPACE: 'operators' }, changes: { leaseNamespace: 'ops', clustersNamespace: 'operators' } },
    { name: 'member clusters are read from --clusters-namespace, probed as often as asked', args: ['--clusters-namespace', 'fleet', '--cluster-probe-seconds', '0'], env: { POD_NAMESPACE: 'operators' }, changes: { leaseNamespace: 'operators', clustersNamespace: 'fleet', clusterProbeSeconds: 0 } },
    { name: 'leader election on', args: ['--leader-elect'], changes: { leaderElect: true } },
    { name: 'shutdown timeout', args: ['--shutdown-timeout-seconds', '25'], changes: { shutdownTimeoutSeconds: 25 } },
    { name: 'leader election from the environment', args: [], env: { LEADER_ELECT: 'yes' }, changes: { leaderElect: true } },
    {
      name: 'check hosts parsed: names, globs, ports',
      args: ['--check-allowed-hosts', 'smoke.tests.svc:8080, *.example.com'],
      changes: { checkAllowedHosts: [{ host: 'smoke.tests.svc', wildcard: false, port: 8080 }, { host: 'example.com', wildcard: true }] },
    },
    { name: 'check hosts: a CIDR range', args: ['--check-allowed-hosts', '127.0.0.0/8'], changes: { checkAllowedHosts: [{ host: '127.0.0.0', wildcard: false, prefix: 8 }] } },
    { name: 'check hosts from the environment', args: [], env: { CHECK_ALLOWED_HOSTS: '127.0.0.1' }, changes: { checkAllowedHosts: [{ host: '127.0.0.1', wildcard: false }] } },
  ];
  for (const c of cases) test(c.name, () => assert.deepEqual(config(c.args, c.env), { ...defaults, ...c.changes }));

  const rejected: { name: string; args: string[]; error: RegExp }[] = [
    { name: 'TLS cert without key', args: ['--temporal-tls-cert', '/tls/tls.crt'], error: /--temporal-tls-cert and --temporal-tls-key go together/ },
    { name: 'TLS key without cert', args: ['--temporal-tls-key', '/tls/tls.key'], error: /--temporal-tls-cert and --temporal-tls-key go together/ },
    { name: 'a mode that does not exist', args: ['--mode', 'both'], error: /Allowed choices are all, watcher, worker/ },
    { name: 'a count that is not a number', args: ['--max-concurrent-activities', 'ten'], error: /not a non-negative integer: ten/ },
    // parseInt took these as 1, 0 and 30: a deadline of a second, the SDK's per-call deadline, a count cut short.
    { name: 'a number in exponent form', args: ['--resync-seconds', '1e3'], error: /not a non-negative integer: 1e3/ },
    { name: 'a fraction', args: ['--stuck-workflow-seconds', '0.5'], error: /not a non-negative integer: 0.5/ },
    { name: 'a number with a unit', args: ['--progress-recheck-seconds', '30s'], error: /not a non-negative integer: 30s/ },
    { name: 'a URL among the check hosts', args: ['--check-allowed-hosts', 'ok.svc,http://smoke.svc'], error: /--check-allowed-hosts: "http:\/\/smoke.svc" is not a host name/ },
    {
      name: 'a renew deadline longer than the Lease',
      args: ['--leader-elect', '--lease-duration-seconds', '10', '--lease-renew-deadline-seconds', '15'],
      error: /leader election needs/,
    },
  ];
  for (const c of rejected) test(`rejects ${c.name}`, () => assert.throws(() => config(c.args), c.error));

  test('Lease timings are not checked without leader election', () => {
    assert.equal(config(['--lease-duration-seconds', '1']).leaseDurationSeconds, 1);
  });
});
