import { allHandlersFinished, condition, continueAsNew, patched, proxyActivities, setHandler } from '@temporalio/workflow';
import { run } from '../summary.ts';
import { ReleasePhase } from '../../api/constants.ts';
import type { Activities } from '../../activities/index.ts';
import { changedSignal, releaseQuery, releaseUpdates, type ReleaseWorkflowInput } from '../contract.ts';
import { wireControls } from '../kit/controls.ts';
import { historyFull } from '../kit/rollover.ts';
import { ReleaseEntity } from './release.ts';

/** A Release's workflow ends once its generation is over (before: it waited for the next change). */
const releaseEndsPatch = 'release-ends-when-done';

const { readRelease, finalizeRelease } = proxyActivities<Activities>({
  startToCloseTimeout: '30s',
  retry: { initialInterval: '200ms', backoffCoefficient: 2, maximumInterval: '10s' },
});

/**
 * One workflow per Release: reads it, runs each generation of it once (the waves, and on a failure, an abort or a
 * deletion the rollback of the earlier waves, last first), and ends with its outcome once that generation is over;
 * the watcher starts a new run when the Release changes or is being deleted (a change during a run is read before
 * it ends). On deletion it finishes the compensation first and then releases the Release's finalizer.
 * docs/architecture.md tells the path.
 */
export async function releaseWorkflow(input: ReleaseWorkflowInput): Promise<string> {
  const release = new ReleaseEntity(input);
  // Asked at the run's first activation, where a replay meets it in place (see ReleaseEntity.napSinceLook).
  const endsWhenDone = patched(releaseEndsPatch);
  setHandler(changedSignal, (s) => release.changed(s.reason));
  setHandler(releaseQuery, () => release.snapshot());
  wireControls(release, releaseUpdates);

  // A run that continued as new in the middle of a generation takes it up where the last run left it.
  let taken = release.carriedPlan;
  for (;;) {
    const seen = release.releaseChanges;
    if (taken) {
      await release.run(taken);
      taken = undefined;
      if (release.deleting) continue;
    } else {
      const read = await run(readRelease, `read the Release ${input.namespace}/${input.name}`, { namespace: input.namespace, name: input.name });
      if (read.outcome === 'gone') return 'gone';
      if (read.outcome === 'deleting') {
        await run(finalizeRelease, 'release the finalizer', { namespace: input.namespace, name: input.name, uid: read.uid });
        return 'deleted';
      }
      if (read.outcome === 'invalid') {
        await release.publish(ReleasePhase.Failed, `the spec is invalid: ${read.message}`, { reason: 'InvalidSpec', type: 'Warning' });
      } else if (read.finishedPhase) {
        // This generation already ran (before a restart or a new run of this workflow): nothing to redo.
        release.state.phase = read.finishedPhase;
      } else {
        await release.run(read.plan);
        // A deletion noticed during the run: the compensation is done, now the finalizer.
        if (release.deleting) continue;
      }
    }
    if (release.deleting) continue;
    if (historyFull(input.options?.maxHistoryEvents)) {
      await condition(allHandlersFinished);
      const { carried: _c, ...fresh } = input;
      return continueAsNew<typeof releaseWorkflow>(fresh);
    }
    // Over: a finished Release holds no workflow open. The watcher starts a new run when it changes; a change signalled
    // while this one ran (or in this very task) is read first. Runs from before this waited for the next signal.
    if (!endsWhenDone) await release.waitForChange();
    else if (release.releaseChanges === seen) return release.state.phase;
  }
}
