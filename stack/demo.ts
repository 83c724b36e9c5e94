// `npm run demo`: the local stack, the operator on it, and the seed's sample app reaching Running.
import { spawn } from 'node:child_process';
import { openSync, closeSync } from 'node:fs';
import { readFile, writeFile } from 'node:fs/promises';
import { join, resolve } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { buildAll, exists } from './build.ts';
import { isAlive, isOurs, stopPid } from './processes.ts';
import { preloadArgs, withRuntimeEnv } from '../operator/runtime.ts';
import { addScrapeTarget, envLines, kubectl, up, type StackInfo } from './stack.ts';

const root = resolve(import.meta.dirname, '..');
const operatorPidFile = (info: StackInfo) => join(info.stateDir, 'operator.pid');
const operatorMetrics = '127.0.0.1:29464';
const nodeBin = process.execPath;

/** Starts the operator detached (so it keeps running after the demo command returns), replacing an earlier one. */
async function startOperator(info: StackInfo): Promise<{ pid: number; log: string }> {
  const old = Number(await readFile(operatorPidFile(info), 'utf8').catch(() => '0'));
  if (old) await stopPid(old, nodeBin);
  const log = join(info.stateDir, 'logs', 'operator.log');
  const fd = openSync(log, 'a');
  const child = spawn(nodeBin, [
    ...preloadArgs(root), join(root, 'bin', 'application-operator.ts'), 'run',
    `--kubeconfig=${info.kubeconfig}`, `--temporal-address=${info.temporalAddress}`, `--temporal-ui-url=${info.temporalUiUrl}`,
    `--metrics-addr=${operatorMetrics}`,
  ], { detached: true, stdio: ['ignore', fd, fd], cwd: root, env: withRuntimeEnv(process.env) });
  closeSync(fd);
  child.unref();
  if (!child.pid) throw new Error('could not start the operator');
  await writeFile(operatorPidFile(info), String(child.pid));
  for (let i = 0; i < 120; i++) {
    const ok = await fetch(`http://${operatorMetrics}/readyz`).then((r) => r.ok, () => false);
    if (ok) return { pid: child.pid, log };
    if (!isAlive(child.pid)) throw new Error(`the operator exited; see ${log}`);
    await sleep(500);
  }
  throw new Error(`the operator did not become ready; see ${log}`);
}

/** The demo's operator process, as `stack status` shows it: its pid (when one was started), whether it runs, its port. */
export async function demoOperatorStatus(stateDir: string): Promise<{ pid?: number; running: boolean; port: number }> {
  const pid = Number(await readFile(join(stateDir, 'operator.pid'), 'utf8').catch(() => '0'));
  return { ...(pid ? { pid } : {}), running: pid > 0 && isOurs(pid, nodeBin), port: Number(operatorMetrics.split(':')[1]) };
}

/** Stops the demo's operator, if one runs. */
export async function stopDemoOperator(stateDir: string): Promise<void> {
  const pid = Number(await readFile(join(stateDir, 'operator.pid'), 'utf8').catch(() => '0'));
  if (pid) await stopPid(pid, nodeBin);
}

/**
 * Runs the whole demo and prints where to look. On a fresh machine it builds only what the app needs to run (the
 * control plane, kwok and Temporal), runs it, and builds Prometheus (for the operator's metrics) afterwards.
 */
export async function demo(stateDir: string): Promise<void> {
  const t0 = Date.now();
  const since = () => `${Math.round((Date.now() - t0) / 1000)} s`;
  await buildAll();
  const info = await up({ stateDir });
  const op = await startOperator(info);
  console.log(`operator running (pid ${op.pid}, log ${op.log}, metrics http://${operatorMetrics}/metrics)`);
  // The stack's Prometheus keeps the operator's metrics, so the demo's rollout can be graphed and queried.
  await addScrapeTarget(info, { job: 'application-operator', targets: [operatorMetrics] });
  await kubectl(info, ['apply', '-f', join(root, 'samples', 'demo-app.yaml')]);
  console.log('applied samples/demo-app.yaml; waiting for phase Running...');
  let phase = '';
  for (let i = 0; i < 240 && phase !== 'Running'; i++) {
    phase = (await kubectl(info, ['get', 'application', 'demo-app', '-o', 'jsonpath={.status.phase}']).catch(() => '')).trim();
    if (phase !== 'Running') await sleep(500);
  }
  if (phase !== 'Running') throw new Error(`demo-app did not reach Running (phase: ${phase || 'none'}); see ${op.log}`);
  console.log(await kubectl(info, ['get', 'application', 'demo-app', '-o', 'wide']));
  console.log(await kubectl(info, ['get', 'deployment,service,hpa,virtualservice,destinationrule', '-l', 'app.kubernetes.io/name=demo-app']));
  const wf = (await kubectl(info, ['get', 'application', 'demo-app', '-o', 'jsonpath={.status.temporalUI}'])).trim();
  console.log(`demo-app is Running, ${since()} after the demo started.\nTemporal UI: ${info.temporalUiUrl}\nThis app's workflow: ${wf}\n\nTo use kubectl and the CLI against the stack:\n${envLines(info)}\n`);
  // Prometheus last: the operator's metrics are worth having, not worth waiting for before the first app runs.
  if (!(await exists(info.servers.prometheus.command))) {
    console.log('Now building Prometheus for the operator\'s metrics (Ctrl-C leaves the demo running without it; `npm run stack -- up` adds it later)...');
    await buildAll({ with: ['metrics'] });
    await up({ stateDir });
  }
  console.log(`Operator metrics in Prometheus: ${info.prometheusUrl} (job="application-operator")\n\nStop everything: npm run stack -- down`);
}
