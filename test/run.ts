// The test command: one stack per run shared by every test file (started here on free ports, or reused when
// STACK_STATE_DIR names a running one), workflow code bundled once, then node's test runner over all files.
import { bundleWorkflowCode } from '@temporalio/worker';
import { spawn } from 'node:child_process';
import { mkdtemp, readFile, rename, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { buildAll } from '../stack/build.ts';
import { down, readStack, status, up, type StackInfo } from '../stack/stack.ts';

const root = resolve(import.meta.dirname, '..');
const args = process.argv.slice(2);
// Disruptive tests restart shared servers, so they run after the rest, one file at a time.
const phases: { patterns: string[]; concurrency: string }[] = args.length
  ? [{ patterns: args, concurrency: process.env['TEST_CONCURRENCY'] ?? '3' }]
  : [
    { patterns: ['test/unit/**/*.test.ts', 'test/integration/**/*.test.ts'], concurrency: process.env['TEST_CONCURRENCY'] ?? '3' },
    { patterns: ['test/disruptive/**/*.test.ts'], concurrency: '1' },
  ];

async function stackForRun(): Promise<{ info: StackInfo; owned: boolean }> {
  const reuse = process.env['STACK_STATE_DIR'];
  if (reuse) {
    const rows = await status(reuse);
    const info = await readStack(reuse);
    if (!rows || !info || rows.some((r) => !r.running)) {
      throw new Error(`STACK_STATE_DIR=${reuse} names no running stack (see: npm run stack -- status); unset it to let the tests start their own`);
    }
    console.log(`reusing the stack in ${reuse}`);
    return { info, owned: false };
  }
  await buildAll({ print: (l) => console.log(l) });
  const stateDir = await mkdtemp(join(tmpdir(), 'app-operator-test-'));
  console.log(`starting a stack for this run in ${stateDir}`);
  const info = await up({ stateDir, ports: 'free', headless: true, nodes: 2, podDelayMs: 200, print: (l) => console.log(l) });
  return { info, owned: true };
}

async function main(): Promise<number> {
  const needsStack = phases.some((ph) => ph.patterns.some((p) => !p.startsWith('test/unit')));
  let stack: { info: StackInfo; owned: boolean } | undefined;
  const env: Record<string, string> = { ...process.env } as Record<string, string>;
  try {
    if (needsStack) {
      stack = await stackForRun();
      const bundle = await bundleWorkflowCode({ workflowsPath: join(root, 'test', 'harness', 'workflows.ts'), logger: quietLogger });
      const bundlePath = join(stack.info.stateDir, 'workflow-bundle.js');
      // Written aside and renamed, so a process reading the bundle never sees half a file.
      await writeFile(`${bundlePath}.tmp`, bundle.code);
      await rename(`${bundlePath}.tmp`, bundlePath);
      Object.assign(env, {
        STACK_STATE_DIR: stack.info.stateDir,
        KUBECONFIG: stack.info.kubeconfig,
        TEMPORAL_ADDRESS: stack.info.temporalAddress,
        TEMPORAL_NAMESPACE: stack.info.temporalNamespace,
        PROMETHEUS_ADDRESS: stack.info.prometheusUrl,
        WORKFLOW_BUNDLE_PATH: bundlePath,
      });
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
    if (stack?.owned && !process.env['KEEP_STACK']) await down(stack.info.stateDir, { purge: true });
    else if (stack?.owned) console.log(`stack kept in ${stack.info.stateDir} (KEEP_STACK is set)`);
  }
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

const quietLogger = {
  log: () => {}, trace: () => {}, debug: () => {}, info: () => {},
  warn: (m: string) => console.warn(m), error: (m: string) => console.error(m),
};

main().then((code) => process.exit(code), (err: unknown) => {
  console.error(`test run failed: ${err instanceof Error ? err.message : String(err)}`);
  process.exit(1);
});
