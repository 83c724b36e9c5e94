// The CLI and the operator process as a user meets them: exit codes, what they print, and start-up when something
// is missing. Runs the real commands against the run's stack.
import { execFile } from 'node:child_process';
import assert from 'node:assert/strict';
import { writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { describe, it } from 'node:test';
import { freePort } from '../../lib/net.ts';
import { eventually } from '../../lib/poll.ts';
import { appManifest, applyAsUser, kube } from '../../testkit/apps.ts';
import { waitCanaryPhase } from '../../testkit/canary.ts';
import { testEnv } from '../../testkit/env.ts';
import { startOperator } from '../../testkit/operator.ts';
import { operatorSuite } from '../../testkit/suite.ts';

const cli = resolve(import.meta.dirname, '..', '..', 'bin', 'application-operator.ts');

/** Runs the CLI and checks its exit code and what it printed (standard output when it exits 0, else standard error); returns that. */
async function expect(args: string[], code: 0 | 1, printed: RegExp): Promise<string> {
  const r = await run(args);
  assert.equal(r.code, code, `${args.join(' ')}: ${r.out}${r.err}`);
  const text = code === 0 ? r.out : r.err;
  assert.match(text, printed);
  return text;
}

/** Runs the CLI; resolves with its exit code and output (never rejects on a non-zero exit). */
async function run(args: string[], timeoutMs = 60_000): Promise<{ code: number; out: string; err: string }> {
  const env = await testEnv();
  return new Promise((res) => {
    execFile(process.execPath, [cli, ...args, `--temporal-address=${env.temporalAddress}`, `--temporal-namespace=${env.temporalNamespace}`], { timeout: timeoutMs }, (error, stdout, stderr) => {
      res({ code: error ? (typeof error.code === 'number' ? error.code : 1) : 0, out: stdout, err: stderr });
    });
  });
}

describe('the CLI', () => {
  const s = operatorSuite('cli');

  /** An Application whose canary v2 waits at 10% for a promote. */
  async function pausedCanary(name: string): Promise<void> {
    await applyAsUser(appManifest(s.ns, name, {
      image: 'nginx:1.25', serviceMesh: { enabled: true, canary: { enabled: true, canaryVersion: 'v2', weight: 10, healthGates: { interval: '1s', initialDelay: '2s' } } },
    }));
    await waitCanaryPhase(s.ns, name, 'Paused');
  }

  it('abort is idempotent: the first reply shows Aborting, a second abort succeeds and says there is nothing to abort', async () => {
    await pausedCanary('twice');
    const first = await expect(['abort', 'twice', '-n', s.ns, '--reason', 'scripted retry'], 0, /^abort accepted\nrollout of v2 \(nginx:v2\) — Aborting\n/);
    // Who asked is the caller's Kubernetes identity (the stack's admin certificate, CN=admin), as a SelfSubjectReview answers it.
    assert.match(first, /abort requested by admin: scripted retry/);
    await expect(['abort', 'twice', '-n', s.ns], 0, /^nothing to abort: the rollout of v2 is already (being aborted|Aborted)/);
    await waitCanaryPhase(s.ns, 'twice', 'Aborted');
    await expect(['abort', 'twice', '-n', s.ns], 0, /nothing to abort: the rollout of v2 is already Aborted/);
    // Other actions on a finished rollout are still refused.
    await expect(['promote', 'twice', '-n', s.ns], 1, /promote rejected: the rollout of v2 is already Aborted/);
  });

  it('promote is idempotent too: a second promote of a rollout promoting or promoted succeeds and says so; a pause of it is refused', async () => {
    await pausedCanary('again');
    await expect(['promote', 'again', '-n', s.ns], 0, /^promote accepted\n/);
    await expect(['promote', 'again', '-n', s.ns], 0, /^nothing to promote: the rollout of v2 is already (being promoted|Promoted)/);
    await waitCanaryPhase(s.ns, 'again', 'Promoted');
    await expect(['promote', 'again', '-n', s.ns], 0, /^nothing to promote: the rollout of v2 is already Promoted/);
    await expect(['pause', 'again', '-n', s.ns], 1, /pause rejected: (the rollout of v2 is already Promoted|cannot pause a rollout that is Promoted)/);
  });

  it('status says what keeps failing now, under the state it makes out of date, and stops once it works again', async (t) => {
    // A validating webhook that is down (nothing listens at its address; failurePolicy Fail): every apply of a
    // Deployment here fails with a 500 until it is removed, a failure no status condition can explain but a retry
    // may end. (A policy that denies is a refusal the pass reports in status instead: reconciler.test.ts.)
    const policy = `webhook-down-${s.ns}`;
    await applyAsUser({
      apiVersion: 'admissionregistration.k8s.io/v1', kind: 'ValidatingWebhookConfiguration', metadata: { name: policy },
      webhooks: [{
        name: 'down.application-operator.test', clientConfig: { url: 'https://127.0.0.1:1/validate' },
        rules: [{ apiGroups: ['apps'], apiVersions: ['v1'], operations: ['CREATE', 'UPDATE'], resources: ['deployments'] }],
        namespaceSelector: { matchLabels: { 'kubernetes.io/metadata.name': s.ns } },
        failurePolicy: 'Fail', sideEffects: 'None', admissionReviewVersions: ['v1'], timeoutSeconds: 2,
      }],
    });
    const removePolicy = () => kube(['delete', 'validatingwebhookconfiguration', policy, '--ignore-not-found']);
    t.after(removePolicy);
    // The API server takes a moment to load a new webhook.
    await eventually('the webhook in force', () => kube(['-n', s.ns, 'create', 'deployment', 'probe', '--image=nginx', '--dry-run=server']).then(() => undefined, (err: unknown) => (String(err).includes('failed calling webhook') ? true : undefined)));
    await applyAsUser(appManifest(s.ns, 'frozen', { image: 'nginx:1.25' }));
    const failing = await eventually('status to say that the reconcile pass keeps failing', async () => {
      const r = await run(['status', 'frozen', '-n', s.ns]);
      if (!/failing now: the reconcile pass \(attempt \d+, last (just now|\d+ s ago)\): .*500 .*failed calling webhook "down\.application-operator\.test"/.test(r.out)) throw new Error(`status says: ${r.out}${r.err}`);
      return r.out;
    }, { timeoutMs: 60_000, intervalMs: 1000 });
    assert.match(failing, /^\S+\/frozen: unknown \(generation \?, 0 reconcile passes\) \n {2}failing now: [^\n]+\n {2}\(no reconcile pass has succeeded yet\)\n/);

    await removePolicy();
    const fixed = await eventually('status to describe the present again', async () => {
      const r = await run(['status', 'frozen', '-n', s.ns]);
      if (!(r.code === 0 && r.out.includes('/frozen: Running'))) throw new Error(`status says: ${r.out}${r.err}`);
      return r.out;
    }, { timeoutMs: 120_000, intervalMs: 1000 });
    assert.doesNotMatch(fixed, /failing now/);
  });

  it('status of an Application that has no workflow exits 1 and says what to check', async () => {
    const r = await run(['status', 'nosuchapp', '-n', s.ns]);
    assert.equal(r.code, 1);
    assert.match(r.err, new RegExp(`${s.ns}/nosuchapp: no workflow for this Application \\(is it there\\? kubectl -n ${s.ns} get application nosuchapp`));
  });

  it('status and controls with the operator down say that no worker answers, and where to look, instead of waiting with no word', async () => {
    await applyAsUser(appManifest(s.ns, 'orphaned', { image: 'nginx:1.25' }));
    await eventually('orphaned has a workflow', async () => ((await run(['status', 'orphaned', '-n', s.ns])).code === 0 ? true : undefined), { timeoutMs: 60_000, intervalMs: 1000 });
    await pausedCanary('stranded');
    await s.op.stop();
    try {
      const r = await run(['status', 'orphaned', '-n', s.ns], 90_000);
      assert.equal(r.code, 1);
      assert.match(r.err, new RegExp(`no worker (is polling|answered within \\d+ s on) task queue "${s.op.taskQueue}".*is the operator running\\?`));
      // Found by hand: a control waited for a worker with no word, for as long as the operator was down. Not sent
      // when no worker has polled for longer than one ever waits; else bounded, saying it may still take effect.
      const abort = await run(['abort', 'stranded', '-n', s.ns], 90_000);
      assert.equal(abort.code, 1, abort.out);
      assert.match(abort.err, /abort(: no worker answered within 30 s; the request may still take effect| not sent: no worker (is polling|has polled) task queue).*is the operator running\?/);
    } finally {
      await s.op.restart();
    }
  });
});

describe('operator start-up', () => {
  it('with Temporal unreachable it stays up, serves /healthz, and /readyz names the address it keeps trying', async () => {
    const closed = await freePort();
    const op = await startOperator({ namespaces: ['default'], waitReady: false, extraArgs: [`--temporal-address=127.0.0.1:${closed}`] });
    try {
      const ready = await eventually('readyz says why', async () => {
        const r = await fetch(`${op.metricsUrl}/readyz`);
        const text = await r.text();
        return r.status === 503 && text.includes(`cannot reach Temporal at 127.0.0.1:${closed}`) ? text : undefined;
      }, { timeoutMs: 30_000 });
      assert.match(ready, /attempt \d+/);
      assert.equal((await fetch(`${op.metricsUrl}/healthz`)).status, 200);
      await eventually('a log line per attempt', async () => ((await op.logs()).split('cannot reach Temporal').length > 2 ? true : undefined), { timeoutMs: 30_000 });
      await op.assertAlive();
    } finally {
      await op.stop('SIGKILL');
    }
  });

  it('with an empty kubeconfig it exits 1 naming the file and what to fix', async () => {
    const empty = join(tmpdir(), `empty-kubeconfig-${process.pid}`);
    await writeFile(empty, '');
    const r = await run(['run', `--kubeconfig=${empty}`, '--metrics-addr=127.0.0.1:0']);
    assert.equal(r.code, 1);
    assert.match(r.err, new RegExp(`could not load kubeconfig ${empty}: .*Point --kubeconfig \\(or KUBECONFIG\\) at a valid kubeconfig`));
  });
});
