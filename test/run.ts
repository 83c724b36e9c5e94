// The test command: one stack per run shared by every test file (started here on free ports, or reused when
// STACK_STATE_DIR names a running one), workflow code bundled once, then node's test runner over all files.
import { spawn } from 'node:child_process';
import { mkdtemp, readFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { startRunStack, type RunStack } from '../testkit/stack.ts';

const root = resolve(import.meta.dirname, '..');
const args = process.argv.slice(2);
// Disruptive tests restart shared servers, so they run after the rest, one file at a time; chosen files too.
const disruptive = (p: string) => p.includes('test/disruptive/');
const chosen = args.length ? args : ['test/unit/**/*.test.ts', 'test/workflows/**/*.test.ts', 'test/integration/**/*.test.ts', 'test/disruptive/**/*.test.ts'];
const phases: { patterns: string[]; concurrency: string }[] = [
  { patterns: chosen.filter((p) => !disruptive(p)), concurrency: process.env['TEST_CONCURRENCY'] ?? '3' },
  { patterns: chosen.filter(disruptive), concurrency: '1' },
].filter((ph) => ph.patterns.length > 0);

async function main(): Promise<number> {
  const needsStack = phases.some((ph) => ph.patterns.some((p) => !p.startsWith('test/unit')));
  let stack: RunStack | undefined;
  const env: Record<string, string> = { ...process.env } as Record<string, string>;
  try {
    // The browser tests need Debian's Chromium: installed here when missing, so that this command alone sets a fresh
    // machine up (the script says why when it cannot; the browser tests then fail and say so too).
    if (phases.some((ph) => ph.patterns.some((p) => p.includes('test/integration')))) await ensureChromium();
    if (needsStack) {
      stack = await startRunStack({
        prefix: 'app-operator-test', workflowsPath: join(root, 'test', 'fixtures', 'bundle.ts'),
        reuse: process.env['STACK_STATE_DIR'], keep: Boolean(process.env['KEEP_STACK']),
        // The traffic tests send real requests through the proxy to the pods (test/integration/dataplane.test.ts).
        dataPlane: true,
      });
      Object.assign(env, stack.env);
    }
    let exit = 0;
    const totals = { pass: 0, fail: 0, skipped: 0 };
    const tapDir = await mkdtemp(join(tmpdir(), 'app-operator-tap-'));
    for (const [i, phase] of phases.entries()) {
      const tapFile = join(tapDir, `phase-${i}.tap`);
      const code = await runTests(phase.patterns, phase.concurrency, env, tapFile);
      if (code !== 0) exit = code;
      const tap = await readFile(tapFile, 'utf8').catch(() => '');
      for (const key of ['pass', 'fail', 'skipped'] as const) totals[key] += Number(new RegExp(`^# ${key} (\\d+)$`, 'm').exec(tap)?.[1] ?? 0);
    }
    // One closing line for the whole run (the runner prints one summary per phase).
    console.log(`\n${totals.pass} passed, ${totals.fail} failed${totals.skipped ? `, ${totals.skipped} skipped` : ''}`);
    if (totals.pass === 0 && exit === 0) exit = 1;
    return exit;
  } finally {
    await stack?.stop();
  }
}

function ensureChromium(): Promise<void> {
  return new Promise((done) => {
    const child = spawn('bash', [join(root, 'scripts', 'ensure-chromium.sh')], { stdio: 'inherit' });
    child.on('exit', () => done());
    child.on('error', () => done());
  });
}

function runTests(patterns: string[], concurrency: string, env: Record<string, string>, tapFile: string): Promise<number> {
  return new Promise<number>((res) => {
    const child = spawn(process.execPath, [
      '--test', `--test-concurrency=${concurrency}`, '--test-timeout=600000',
      '--test-reporter=spec', '--test-reporter-destination=stdout', '--test-reporter=tap', `--test-reporter-destination=${tapFile}`,
      ...patterns,
    ], { cwd: root, env, stdio: 'inherit' });
    const forward = (sig: NodeJS.Signals) => child.kill(sig);
    process.on('SIGINT', forward);
    process.on('SIGTERM', forward);
    child.on('close', (code) => {
      process.off('SIGINT', forward);
      process.off('SIGTERM', forward);
      res(code ?? 1);
    });
  });
}

main().then((code) => process.exit(code), (err: unknown) => {
  console.error(`test run failed: ${err instanceof Error ? err.message : String(err)}`);
  process.exit(1);
});
