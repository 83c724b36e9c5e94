// The operator's command line: `run` starts the watcher and/or a worker; promote, abort, pause, resume and status
// talk to an Application's workflows through Temporal. The launcher bin/application-operator (also `kubectl app`)
// picks the Node that runs it.
import { Command, Option } from 'commander';
import { clientConfig, int, operatorConfig, withClientOptions, withOperatorOptions } from '../operator/config.ts';
import { runOperatorProcess } from '../operator/main.ts';
import { connectClient } from '../operator/temporal.ts';
import { codecServerConfig, runCodecServer, withCodecServerOptions } from '../operator/codec-server.ts';
import { appStatus, control, defaultNamespace, formatFailing, formatResult, formatRollout, requester, type ControlAction } from '../client/control.ts';
import { formatHistory, rolloutHistory } from '../client/history.ts';
import { controlRelease, formatRelease, formatReleaseHistory, releaseHistory, releaseStatus } from '../client/release.ts';

const program = new Command('application-operator').description('Kubernetes operator for Applications, reconciled by Temporal workflows');

withOperatorOptions(program.command('run').description('run the operator (watcher + worker by default); SIGTERM or SIGINT stops it in any phase: exit 0 once stopped, 1 on failure, on a stop longer than --shutdown-timeout-seconds or on a second signal')).action(async (opts: Record<string, unknown>) => {
  process.exit(await runOperatorProcess(operatorConfig(opts)));
});

const actions: Record<ControlAction, string> = {
  promote: 'promote the running rollout (a canary, or a blue-green preview: the first promote switches): stable takes the new image, then all traffic returns to stable and the new version\'s Deployment is removed',
  abort: 'abort the running rollout: all traffic back to stable first (a blue-green switch goes back), then the new version\'s Deployment is removed',
  pause: 'hold the running rollout at its current step (health gates keep running)',
  resume: 'lift a pause you (or someone) asked for, or a hold for an inconclusive analysis; a pause step is an approval that only promote passes',
};

/** Runs `work` with a Temporal client, closing its connection after, whatever happens. */
async function withTemporal(cfg: ReturnType<typeof clientConfig>, work: (client: Awaited<ReturnType<typeof connectClient>>['client']) => Promise<void>): Promise<void> {
  const { client, connection } = await connectClient(cfg);
  try {
    await work(client);
  } finally {
    await connection.close();
  }
}

/** The namespace a client command acts in: -n, else the kubeconfig context's. */
const namespaceOf = (opts: Record<string, unknown>) => (opts['namespace'] as string | undefined) ?? defaultNamespace(opts['kubeconfig'] as string | undefined);

const withTarget = (cmd: Command) => cmd
  .argument('<app>', 'Application name')
  .addOption(new Option('-n, --namespace <ns>', 'namespace of the Application (default: the kubeconfig context\'s)'));

for (const [action, description] of Object.entries(actions) as [ControlAction, string][]) {
  withClientOptions(withTarget(program.command(action).description(description))
    .option('--reason <text>', 'why (recorded in status and history)'))
    .action(async (app: string, opts: Record<string, unknown>) => {
      const cfg = clientConfig(opts);
      await withTemporal(cfg, async (client) => {
        const outcome = await control(client, action, namespaceOf(opts), app, opts['reason'] as string | undefined, await requester(cfg.kubeconfig));
        console.log(outcome.note);
        if (outcome.state) console.log(formatRollout(outcome.state));
        else if (outcome.result) console.log(formatResult(outcome.result));
      });
    });
}

withClientOptions(withTarget(program.command('status').description("show the Application's workflow and its canary rollout"))
  .option('-o, --output <format>', 'text or json', 'text'))
  .action(async (app: string, opts: Record<string, unknown>) => {
    const ns = namespaceOf(opts);
    await withTemporal(clientConfig(opts), async (client) => {
      const s = await appStatus(client, ns, app);
      if (opts['output'] === 'json') {
        console.log(JSON.stringify(s, null, 2));
        return;
      }
      if (!s.app && !s.rolloutStatus) {
        console.error(`${ns}/${app}: no workflow for this Application (is it there? kubectl -n ${ns} get application ${app}; is the operator watching namespace ${ns}?)`);
        process.exitCode = 1;
        return;
      }
      if (!s.app) console.log(`${ns}/${app}: no running Application workflow (the Application was deleted?)`);
      else console.log(`${ns}/${app}: ${s.app.phase ?? 'unknown'} (generation ${s.app.generation ?? '?'}, ${s.app.passes} reconcile passes) ${s.app.message ?? ''}`);
      const failing = (w: 'application' | 'rollout') => s.failing.filter((f) => f.workflow === w).map((f) => formatFailing(f));
      // What fails now goes right under what it makes out of date.
      const appFailing = failing('application');
      if (appFailing.length) {
        const older = s.app && s.app.passes > 0 ? '(phase and message above are from the last reconcile pass that succeeded)' : '(no reconcile pass has succeeded yet)';
        console.log([...appFailing, `  ${older}`].join('\n'));
      }
      if (s.rollout) console.log(`${formatRollout(s.rollout)}\n  workflow: ${s.rolloutStatus}`);
      else if (s.rolloutResult) console.log(`last rollout: ${formatResult(s.rolloutResult)}`);
      else console.log('no rollout');
      for (const line of failing('rollout')) console.log(line);
    });
  });

const release = program.command('release').description('control a Release: all its waves as one (promote, abort, pause, resume) and its status');
const releaseActions: Record<ControlAction, string> = {
  promote: 'promote the running wave\'s canaries, or start the next wave when the release waits for a promote; lifts a pause',
  abort: 'abort the release: stop the running wave\'s canaries and put back the previous image of every Application it promoted, last first',
  pause: 'hold the release: pause the running canaries and do not start the next wave',
  resume: 'lift a pause asked for with release pause (a wait for a promote between waves, or a canary\'s pause step, needs promote)',
};
const withRelease = (cmd: Command) => cmd
  .argument('<release>', 'Release name')
  .addOption(new Option('-n, --namespace <ns>', 'namespace of the Release (default: the kubeconfig context\'s)'));
for (const [action, description] of Object.entries(releaseActions) as [ControlAction, string][]) {
  withClientOptions(withRelease(release.command(action).description(description))
    .option('--reason <text>', 'why (recorded in status and history)'))
    .action(async (name: string, opts: Record<string, unknown>) => {
      const cfg = clientConfig(opts);
      await withTemporal(cfg, async (client) => {
        const outcome = await controlRelease(client, action, namespaceOf(opts), name, opts['reason'] as string | undefined, await requester(cfg.kubeconfig));
        console.log(`${outcome.note}\n${formatRelease(outcome.state)}`);
      });
    });
}
withClientOptions(withRelease(release.command('history').description('the Release\'s story, oldest first: every status it wrote (waves started and promoted, clusters held at and answering again, what was put back and why), read from its workflow histories'))
  .option('-o, --output <format>', 'text or json', 'text'))
  .action(async (name: string, opts: Record<string, unknown>) => {
    const ns = namespaceOf(opts);
    await withTemporal(clientConfig(opts), async (client) => {
      const entries = await releaseHistory(client, ns, name);
      console.log(opts['output'] === 'json' ? JSON.stringify(entries, null, 2) : formatReleaseHistory(ns, name, entries));
    });
  });
withClientOptions(withRelease(release.command('status').description('show the Release: its phase, wave, and each Application'))
  .option('-o, --output <format>', 'text or json', 'text'))
  .action(async (name: string, opts: Record<string, unknown>) => {
    const ns = namespaceOf(opts);
    await withTemporal(clientConfig(opts), async (client) => {
      const state = await releaseStatus(client, ns, name);
      if (!state) {
        console.error(`${ns}/${name}: no workflow for this Release (is it there? kubectl -n ${ns} get release ${name})`);
        process.exitCode = 1;
        return;
      }
      console.log(opts['output'] === 'json' ? JSON.stringify(state, null, 2) : formatRelease(state));
    });
  });

withClientOptions(withTarget(program.command('history').description('every rollout of the Application (canary or blue-green), newest first: steps, routes, analysis verdicts, who promoted, aborted, paused or resumed and why, and when; read from the workflow histories'))
  .option('-o, --output <format>', 'text or json', 'text')
  .option('--limit <n>', 'at most this many rollouts', int, 20))
  .action(async (app: string, opts: Record<string, unknown>) => {
    const ns = namespaceOf(opts);
    await withTemporal(clientConfig(opts), async (client) => {
      const histories = await rolloutHistory(client, ns, app, opts['limit'] as number);
      console.log(opts['output'] === 'json' ? JSON.stringify(histories, null, 2) : formatHistory(ns, app, histories));
    });
  });

withCodecServerOptions(program.command('codec-server').description('serve Temporal\'s remote codec protocol with the payload keys, so the Temporal UI and CLI can read encrypted payloads'))
  .action(async (opts: Record<string, unknown>) => {
    const running = await runCodecServer(codecServerConfig(opts));
    const shutdown = () => void running.close().then(() => process.exit(0));
    process.once('SIGTERM', shutdown);
    process.once('SIGINT', shutdown);
  });

program.parseAsync().catch((err: unknown) => {
  console.error(`error: ${err instanceof Error ? err.message : String(err)}`);
  process.exit(1);
});
