// The benchmark's command line: its options, their defaults and the usage text.
import { join, resolve } from 'node:path';
import { parseArgs } from 'node:util';

const root = resolve(import.meta.dirname, '..');

/**
 * convergence: N apps at once against a floor (the default); latency: one app at a time on an idle operator;
 * waiting: canaries held for a while, and the history events their workflows make per hour; restart: N converged
 * apps, then the operator restarted (SIGTERM), crashed (SIGKILL) and failed over; delete: N converged apps, then their
 * namespace deleted, against the floor's namespace deleted; rollouts: N converged apps, then a canary started on all
 * of them at once and, once all wait at an approval, all promoted at once.
 */
export type Scenario = 'convergence' | 'latency' | 'waiting' | 'restart' | 'delete' | 'rollouts';

const scenarios: readonly Scenario[] = ['convergence', 'latency', 'waiting', 'restart', 'delete', 'rollouts'];

/** --apps when the rollouts scenario is not given one: the "100 canaries at the same time". */
const ROLLOUTS_APPS = 100;

export interface Options {
  scenario: Scenario;
  apps: number;
  /** latency scenario: Applications created (then changed) one at a time. */
  latencySample: number;
  /** waiting scenario: how long the canaries wait while their history is counted. */
  waitingMinutes: number;
  workers: number[];
  idleSeconds: number;
  /** restart: the operator is back to idle once it made no API request for this long. */
  quietSeconds: number;
  timeoutSeconds: number;
  promoteSample: number;
  createConcurrency: number;
  applyConcurrency: number;
  historySample: number;
  podDelayMs: number;
  out: string;
  floor: boolean;
  /** The operator's namespaces are bound to the chart's finalizer policy (the API server adds the finalizer at create). */
  finalizerPolicy: boolean;
  keepStack: boolean;
  operatorArgs: string[];
  /** More environment for every operator process (e.g. another allocator: docs/benchmark.md). */
  operatorEnv: Record<string, string>;
}

/** What the command line asks for: a benchmark run, or the tables of an earlier result file again. */
export type Command = { run: Options } | { report: string };

export const usage = `usage: npm run bench -- --apps N [options]
       npm run bench -- --scenario latency [--latency-sample 50] [--promote-sample 5] [options]
       npm run bench -- --scenario waiting [--waiting-minutes 5]
       npm run bench -- --scenario restart --apps N [--idle-seconds 60] [--quiet-seconds 5]
       npm run bench -- --scenario delete --apps N
       npm run bench -- --scenario rollouts [--apps 100]
  --scenario S             convergence (default): N apps at once, floor, cost, idle, memory, promote;
                           latency: one operator process, idle but for one app at a time: create -> Running,
                           spec change -> applied, and promote, each timed per app (no floor);
                           waiting: canaries waiting at an approval with the default settings (one under a blind
                           analysis), and the Temporal history events their workflows make per hour;
                           restart: N apps converged by one process, then (a) SIGTERM and a new process, (b) SIGKILL
                           and a new process, (c) two --leader-elect replicas and the leader SIGKILLed: time to ready
                           and back to idle, the operator's requests meanwhile, Temporal events, peak RSS (no floor);
                           delete: N apps converged in one namespace, then the namespace deleted and timed until gone,
                           and the Application workflows left running; the floor's namespace deleted likewise;
                           rollouts: N mesh apps converged by one process, then a canary on all N at once (weight 20,
                           pause 5 s, weight 50, approval; gates every 2 s): time to the first weight, how late each
                           timed pause ended, then all N promoted at once: promote -> 100% stable, against a floor
                           (the same N promotes' writes made directly, all at once, no operator)
  --waiting-minutes M      waiting: how long they wait while counted (default 5)
  --apps N                 Applications per run (required for convergence, restart and delete; rollouts: default 100)
  --latency-sample L       latency: Applications created one at a time, then changed one at a time (default 50)
  --workers K[,K2...]      convergence: worker processes per run: 1 in --mode all plus K-1 in --mode worker (default 1); a list runs each in turn
  --idle-seconds S         convergence, restart, delete, rollouts: idle window after convergence (default 60)
  --quiet-seconds Q        restart: back to idle = no API request by the operator for Q seconds (default 5)
  --timeout-seconds S      convergence, restart, delete, rollouts: timeout per run, per restart, for the namespace to
                           go and for all rollouts to reach the approval, then Promoted (default 300 + N/2); latency:
                           wait per app and change (default 60)
  --promote-sample M       canaries promoted one at a time per run to time promote (default 5, rollouts 0; 0 skips)
  --create-concurrency C   convergence: Application creates in flight (default 20)
  --apply-concurrency C    convergence, floor: apps applied at once, like the operator's max concurrent activities (default 10)
  --history-sample H       convergence, rollouts: workflow histories read to count Temporal events, extrapolated to all (default 200)
  --pod-delay-ms MS        kwok delay per pod transition (default 100)
  --out DIR                where results go (default results/)
  --no-floor               skip the floor measurement (convergence, delete, rollouts; the others have none)
  --no-finalizer-policy    the operator's namespaces are not bound to the chart's finalizer policy: the operator
                           adds its finalizer itself (one write more per create), as on a cluster without the policy
  --operator-arg FLAG      extra flag for every operator process (repeatable), e.g. --operator-arg=--coalesce-ms=100
  --operator-env K=V       extra environment variable for every operator process (repeatable), e.g.
                           --operator-env MALLOC_CONF=narenas:2
  --keep-stack             leave the stack running (prints its state dir)
  --report FILE            print the tables of an earlier results/bench-*.json again (no stack is started)`;

/** Parses the command line; prints the usage and exits for --help, throws (with the usage) on a bad value. */
export function parseOptions(argv: string[]): Command {
  const { values } = parseArgs({
    args: argv,
    options: {
      scenario: { type: 'string', default: 'convergence' },
      apps: { type: 'string' },
      'latency-sample': { type: 'string', default: '50' },
      'waiting-minutes': { type: 'string', default: '5' },
      workers: { type: 'string' },
      'idle-seconds': { type: 'string', default: '60' },
      'quiet-seconds': { type: 'string', default: '5' },
      'timeout-seconds': { type: 'string' },
      'promote-sample': { type: 'string' },
      'create-concurrency': { type: 'string', default: '20' },
      'apply-concurrency': { type: 'string', default: '10' },
      'history-sample': { type: 'string', default: '200' },
      'pod-delay-ms': { type: 'string', default: '100' },
      out: { type: 'string', default: join(root, 'results') },
      'no-floor': { type: 'boolean', default: false },
      'no-finalizer-policy': { type: 'boolean', default: false },
      'operator-arg': { type: 'string', multiple: true, default: [] },
      'operator-env': { type: 'string', multiple: true, default: [] },
      'keep-stack': { type: 'boolean', default: false },
      report: { type: 'string' },
      help: { type: 'boolean', short: 'h', default: false },
    },
    strict: true,
    allowPositionals: false,
  });
  if (values.help) {
    console.log(usage);
    process.exit(0);
  }
  if (values.report) return { report: resolve(values.report) };
  const int = (name: string, v: string | undefined, min: number): number => {
    const n = Number(v);
    if (v === undefined || !Number.isInteger(n) || n < min) throw new Error(`--${name} must be an integer >= ${min} (got ${v ?? 'nothing'})\n${usage}`);
    return n;
  };
  const scenario = scenarios.find((x) => x === values.scenario);
  // The wording keeps the first five names as they were (test/unit/bench-latency.test.ts and
  // bench-restart-delete.test.ts match them), so the sixth comes after.
  if (!scenario) throw new Error(`--scenario must be convergence, latency or waiting (steady state), restart or delete (after convergence); got ${values.scenario} (the sixth, rollouts, is N canaries at once after convergence)\n${usage}`);
  const latencySample = int('latency-sample', values['latency-sample'], 1);
  // The latency scenario runs one operator process on its own sample: --apps and --workers are not its knobs.
  if (scenario === 'latency' && (values.apps !== undefined || (values.workers !== undefined && values.workers !== '1'))) {
    throw new Error(`--scenario latency runs one operator process on --latency-sample apps; --apps and --workers are for the convergence scenario\n${usage}`);
  }
  const apps = scenario === 'latency' ? latencySample : scenario === 'waiting' ? 2 : int('apps', values.apps ?? (scenario === 'rollouts' ? String(ROLLOUTS_APPS) : undefined), 1);
  // restart, delete and rollouts converge with one process: what they measure is what that one process does next.
  if ((scenario === 'restart' || scenario === 'delete' || scenario === 'rollouts') && values.workers !== undefined && values.workers !== '1') {
    throw new Error(`--scenario ${scenario} converges with one operator process; --workers is for the convergence scenario\n${usage}`);
  }
  const workers = scenario !== 'convergence' ? [1] : (values.workers ?? '1').split(',').map((w) => int('workers', w.trim(), 1));
  return {
    run: {
      scenario, apps, latencySample, workers, waitingMinutes: int('waiting-minutes', values['waiting-minutes'], 1),
      idleSeconds: int('idle-seconds', values['idle-seconds'], 0),
      quietSeconds: int('quiet-seconds', values['quiet-seconds'], 1),
      timeoutSeconds: values['timeout-seconds'] ? int('timeout-seconds', values['timeout-seconds'], 1) : scenario === 'latency' ? 60 : 300 + Math.ceil(apps / 2),
      // The rollouts scenario promotes its N canaries together: a sample promoted one at a time would only add apps.
      promoteSample: int('promote-sample', values['promote-sample'] ?? (scenario === 'rollouts' ? '0' : '5'), 0),
      createConcurrency: int('create-concurrency', values['create-concurrency'], 1),
      applyConcurrency: int('apply-concurrency', values['apply-concurrency'], 1),
      historySample: int('history-sample', values['history-sample'], 1),
      podDelayMs: int('pod-delay-ms', values['pod-delay-ms'], 0),
      out: resolve(values.out),
      floor: (scenario === 'convergence' || scenario === 'delete' || scenario === 'rollouts') && !values['no-floor'],
      finalizerPolicy: !values['no-finalizer-policy'],
      keepStack: values['keep-stack'],
      operatorArgs: values['operator-arg'],
      operatorEnv: envOf(values['operator-env']),
    },
  };
}

/** `K=V` pairs as an environment; throws on one without a name or `=`. */
function envOf(pairs: string[]): Record<string, string> {
  return Object.fromEntries(pairs.map((p) => {
    const at = p.indexOf('=');
    if (at <= 0) throw new Error(`--operator-env takes NAME=VALUE, got ${JSON.stringify(p)}\n${usage}`);
    return [p.slice(0, at), p.slice(at + 1)];
  }));
}
