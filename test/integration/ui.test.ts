// The Temporal UI as a user sees it, in Debian's headless Chromium driven over the DevTools protocol (puppeteer-core,
// no browser download): an Application's workflow and a canary rollout held in a pause, with payload encryption on.
// The run's stack is headless, so the test starts a Temporal dev server of its own with the UI on, pointed at the
// real `application-operator codec-server` the way `npm run stack -- up --codec-endpoint` does, and an operator
// with the payload key against it. Everything the UI shows of a workflow's data (input, summary, details, event
// summaries, current details) is encrypted in the history, so each assertion below is also a decode through the codec
// server; the last test stops the codec server and finds the same pages unreadable. Screenshots go to
// test-results/ui/ (printed; ignored by git).
import { Client, Connection } from '@temporalio/client';
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { access, mkdir, mkdtemp, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { after, before, describe, it } from 'node:test';
import puppeteer, { type Browser, type Page } from 'puppeteer-core';
import { freePort } from '../../lib/net.ts';
import { eventually } from '../../lib/poll.ts';
import { applicationWorkflowId, rolloutWorkflowId } from '../../workflows/contract.ts';
import { appManifest, applyAsUser, kubeApi, testNamespace, waitForPhase } from '../../testkit/apps.ts';
import { waitCanaryPhase } from '../../testkit/canary.ts';
import { startOperator, type OperatorProcess } from '../../testkit/operator.ts';
import { startCodecServerProcess, startTemporalWithUi, type RunningProcess, type TemporalWithUi } from '../../testkit/temporal-ui.ts';

const chromium = process.env['CHROMIUM_PATH'] ?? '/usr/bin/chromium';
const outDir = resolve(import.meta.dirname, '..', '..', 'test-results', 'ui');
const chromiumFlags = ['--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage', '--disable-background-networking'];

type Expected = string | RegExp;
const found = (text: string, e: Expected) => (typeof e === 'string' ? text.includes(e) : e.test(text));

describe('the Temporal UI in a real browser, with payloads encrypted and read through the codec server', () => {
  let temporal: TemporalWithUi;
  let codec: RunningProcess & { url: string };
  let op: OperatorProcess;
  let ns: { name: string; cleanup: () => Promise<void> };
  let browser: Browser;
  let plain: { client: Client; connection: Connection };
  /** Requests the browser sent to the codec server, as "METHOD path". */
  const codecRequests: string[] = [];

  /** Everything the page shows as text: the UI renders summaries, details and current details in frames of their own. */
  const pageText = async (page: Page) =>
    (await Promise.all(page.frames().map((f) => (f.evaluate('document.body?.innerText ?? ""') as Promise<string>).catch(() => '')))).join('\n');

  /**
   * Opens a tab of a workflow's page (history, user-metadata) in a fresh page and waits until every expected text
   * is shown and none of the absent ones; saves a screenshot either way, and on a timeout says what was missing.
   */
  const look = async (shot: string, workflowId: string, tab: string, expected: Expected[], absent: Expected[] = []): Promise<string> => {
    const { runId } = await plain.client.workflow.getHandle(workflowId).describe();
    const page = await browser.newPage();
    page.on('request', (r) => {
      if (r.url().startsWith(codec.url)) codecRequests.push(`${r.method()} ${new URL(r.url()).pathname}`);
    });
    try {
      await page.goto(`${temporal.uiUrl}/namespaces/default/workflows/${encodeURIComponent(workflowId)}/${runId}/${tab}`, { waitUntil: 'domcontentloaded' });
      let text = '';
      try {
        await eventually(`${shot}: the UI showing ${expected.join(' | ')}`, async () => {
          text = await pageText(page);
          const missing = [...expected.filter((e) => !found(text, e)), ...absent.filter((e) => found(text, e)).map((e) => `not ${String(e)}`)];
          if (missing.length) throw new Error(`missing ${missing.join(' | ')} in:\n${text.slice(0, 3000)}`);
          return text;
        }, { timeoutMs: 60_000, intervalMs: 1000 });
      } finally {
        await page.screenshot({ path: join(outDir, `${shot}.png`), fullPage: true });
      }
      return text;
    } finally {
      await page.close();
    }
  };

  before(async () => {
    try {
      await access(chromium);
    } catch {
      assert.fail(`no Chromium at ${chromium}: run scripts/ensure-chromium.sh (it installs Debian's chromium; .ci/run calls it), or set CHROMIUM_PATH`);
    }
    await mkdir(outDir, { recursive: true });
    console.log(`screenshots of the Temporal UI: ${outDir}`);
    const keyFile = join(await mkdtemp(join(tmpdir(), 'ui-test-')), 'keys');
    await writeFile(keyFile, `${randomBytes(32).toString('base64')}\n`, { mode: 0o600 });
    // The UI is told the codec server's address at start, and the codec server the UI's origin: the port comes first.
    const codecPort = await freePort();
    temporal = await startTemporalWithUi({ codecEndpoint: `http://127.0.0.1:${codecPort}` });
    codec = await startCodecServerProcess({ keyFile, corsOrigins: [temporal.uiUrl], port: codecPort });
    ns = await testNamespace('ui');
    op = await startOperator({
      namespaces: [ns.name], temporalAddress: temporal.address,
      extraArgs: [`--payload-encryption-key-file=${keyFile}`, `--temporal-ui-url=${temporal.uiUrl}`],
    });
    const connection = await Connection.connect({ address: temporal.address });
    // Without the data converter: what the Temporal server stores, as any client without the key sees it.
    plain = { connection, client: new Client({ connection, namespace: 'default' }) };
    await applyAsUser(appManifest(ns.name, 'shop', { image: 'nginx:1.25', replicas: 1 }));
    await applyAsUser(appManifest(ns.name, 'canary', {
      image: 'nginx:1.25', replicas: 1,
      serviceMesh: {
        enabled: true,
        canary: { enabled: true, canaryVersion: 'v2', healthGates: { interval: '2s', failureThreshold: 3, initialDelay: '1s' }, steps: [{ setWeight: 20 }, { pause: { duration: '10m' } }] },
      },
    }));
    await waitForPhase(ns.name, 'shop', 'Running');
    await waitCanaryPhase(ns.name, 'canary', 'Paused');
    browser = await puppeteer.launch({ executablePath: chromium, headless: true, pipe: true, args: chromiumFlags, defaultViewport: { width: 1400, height: 1000 } });
  });

  after(async () => {
    await browser?.close();
    await op?.stop();
    await plain?.connection.close();
    await codec?.stop();
    await temporal?.stop();
    if (ns) {
      // The workflows went with the in-memory dev server: release the finalizers they would have.
      const api = await kubeApi();
      for (const name of ['shop', 'canary']) {
        await api.mergePatch({ apiVersion: 'myapp.example.com/v1', kind: 'Application', namespace: ns.name, name }, { metadata: { finalizers: null } }).catch(() => null);
      }
      await ns.cleanup();
    }
  });

  it('stores only ciphertext: the workflow\'s input, summary and event summaries are encrypted in the history', async () => {
    const history = await plain.client.workflow.getHandle(applicationWorkflowId(ns.name, 'shop')).fetchHistory();
    const started = history.events?.[0];
    const encoding = (p: { metadata?: Record<string, Uint8Array> | null } | null | undefined) => Buffer.from(p?.metadata?.['encoding'] ?? []).toString();
    assert.equal(encoding(started?.workflowExecutionStartedEventAttributes?.input?.payloads?.[0]), 'binary/encrypted');
    assert.equal(encoding(started?.userMetadata?.summary), 'binary/encrypted');
    // A reconcile pass runs as a local activity: its marker carries the summary.
    const pass = history.events?.find((e) => e.markerRecordedEventAttributes?.markerName === 'core_local_activity');
    assert.equal(encoding(pass?.userMetadata?.summary), 'binary/encrypted');
    assert.ok(!Buffer.from(started?.workflowExecutionStartedEventAttributes?.input?.payloads?.[0]?.data ?? []).toString('latin1').includes('shop'), 'the input is not there in clear');
  });

  it('shows an Application\'s workflow: its summary, details, current details, the summaries of its events, and its input decoded', async () => {
    const id = applicationWorkflowId(ns.name, 'shop');
    await look('application-metadata', id, 'user-metadata', [
      `Application ${ns.name}/shop`,
      `Reconciles the children and status of Application ${ns.name}/shop`,
      // Current details, from the workflow's own query: phase, generation, replicas.
      new RegExp(`${ns.name}/shop: Running at generation 1: 1\\D1 replicas available`),
      /passes: \d+/,
      'Events with Metadata', /apply children \(/, /read status \(/,
    ]);
    await look('application-history', id, 'history', [
      'Input', `"namespace": "${ns.name}"`, '"name": "shop"',
      // Each pass is a local activity, listed with its summary.
      /Local Activity\s+Activity Type\s+reconcileApplication\s+Summary\s+apply children \(/,
    ]);
    assert.ok(codecRequests.includes('POST /decode'), `the browser asked the codec server to decode: ${codecRequests.join(', ') || 'no request'}`);
  });

  it('shows a rollout held in a pause: its summary, details, step, weight and when the pause ends, and the story of its events', async () => {
    const app = await waitCanaryPhase(ns.name, 'canary', 'Paused');
    const pauseEndsAt = String(app.status.canary.pauseEndsAt);
    await look('rollout-metadata', rolloutWorkflowId(ns.name, 'canary'), 'user-metadata', [
      `Canary v2 of ${ns.name}/canary`,
      'image nginx:v2; 2 steps; promote, abort, pause, resume as updates or signals',
      /Canary v2 \(nginx:v2\) — Paused/, /step 2\D2, canary weight 20%/, 'pause for 10m',
      // The same moment the Application's status.canary gives: the time left is until then.
      `pause ends at ${pauseEndsAt}`,
      'create canary v2 (nginx:v2) at 0%', 'set canary weight 20%', /gate check at 20%/, /status: Paused at step 2\/2, 20%/,
    ]);
  });

  it('without the codec server the same pages are unreadable: what they showed was decoded by it', async () => {
    await codec.stop();
    const id = applicationWorkflowId(ns.name, 'shop');
    await look('application-metadata-without-codec', id, 'user-metadata', ['Decoding failed'], [`Application ${ns.name}/shop`, /apply children \(/]);
    await look('application-history-without-codec', id, 'history', ['Input', 'encryption-key-id'], ['"name": "shop"']);
  });
});
