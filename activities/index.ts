import type {
  CanaryStatusInput, CloseCanaryStatusInput, FinalizeInput, HttpCheckInput, JobCheckRef, MetricsInput, ObserveInput, PlanInput, ReconcileInput, RemoveCanaryInput, RouteInput, StableRolledOutInput,
  StartJobCheckInput, ReleaseClaimsInput, StopCanaryInput, RevertApplicationInput, ObserveApplicationsInput, FinalizeReleaseInput, SignalCanaryInput,
} from './types.ts';
import {
  closeCanaryStatus, finishCanarySpec, observeCanary, prepareCanary, promoteStable, removeCanary, restoreStableImage, setCanaryRoute, stableRolledOut, writeCanaryStatus,
} from './canary.ts';
import { deleteJobCheck, observeJobCheck, runHttpCheck, startJobCheck } from './checks.ts';
import type { ActivityDeps } from './deps.ts';
import { queryMetrics } from './metrics.ts';
import { sendNotification, type SendNotificationInput } from './notify.ts';
import {
  claimApplications, finalizeRelease, observeApplications, readRelease, releaseClaims, revertApplication, signalCanary, startCanary, stopCanary, writeReleaseStatus,
  type ClaimInput, type ReleaseStatusInput, type StartCanaryInput,
} from './release.ts';
import { finalizeApplication, reconcileApplication } from './reconcile.ts';

/** The activities a worker registers, bound to the process's clients. */
export function createActivities(deps: ActivityDeps) {
  return {
    reconcileApplication: (input: ReconcileInput) => reconcileApplication(deps, input),
    finalizeApplication: (input: FinalizeInput) => finalizeApplication(deps, input),
    prepareCanary: (input: PlanInput) => prepareCanary(deps, input),
    observeCanary: (input: ObserveInput) => observeCanary(deps, input),
    queryMetrics: (input: MetricsInput) => queryMetrics(deps, input),
    runHttpCheck: (input: HttpCheckInput) => runHttpCheck(deps, input),
    startJobCheck: (input: StartJobCheckInput) => startJobCheck(deps, input),
    observeJobCheck: (input: JobCheckRef) => observeJobCheck(deps, input),
    deleteJobCheck: (input: JobCheckRef) => deleteJobCheck(deps, input),
    sendNotification: (input: SendNotificationInput) => sendNotification(deps, input),
    setCanaryRoute: (input: RouteInput) => setCanaryRoute(deps, input),
    removeCanary: (input: RemoveCanaryInput) => removeCanary(deps, input),
    promoteStable: (input: PlanInput) => promoteStable(deps, input),
    stableRolledOut: (input: StableRolledOutInput) => stableRolledOut(deps, input),
    restoreStableImage: (input: PlanInput) => restoreStableImage(deps, input),
    finishCanarySpec: (input: PlanInput) => finishCanarySpec(deps, input),
    writeCanaryStatus: (input: CanaryStatusInput) => writeCanaryStatus(deps, input),
    closeCanaryStatus: (input: CloseCanaryStatusInput) => closeCanaryStatus(deps, input),
    readRelease: (input: { namespace: string; name: string }) => readRelease(deps, input),
    claimApplications: (input: ClaimInput) => claimApplications(deps, input),
    releaseClaims: (input: ReleaseClaimsInput) => releaseClaims(deps, input),
    startCanary: (input: StartCanaryInput) => startCanary(deps, input),
    signalCanary: (input: SignalCanaryInput) => signalCanary(deps, input),
    stopCanary: (input: StopCanaryInput) => stopCanary(deps, input),
    revertApplication: (input: RevertApplicationInput) => revertApplication(deps, input),
    observeApplications: (input: ObserveApplicationsInput) => observeApplications(deps, input),
    writeReleaseStatus: (input: ReleaseStatusInput) => writeReleaseStatus(deps, input),
    finalizeRelease: (input: FinalizeReleaseInput) => finalizeRelease(deps, input),
  };
}

export type Activities = ReturnType<typeof createActivities>;
