// A Release's decisions as pure functions: what a wave's observations say, where each Application stands, and in
// which order a rollback goes.
import { ReleaseAppPhase, RolloutPhase, isTerminal, releaseAppKey } from '../../api/constants.ts';
import { runsImage } from '../../api/image.ts';
import type { AppObservation } from '../../activities/release.ts';
import type { ReleaseAppState } from '../contract.ts';
import type { WavePlan } from '../../reconcile/wave-plan.ts';

/** What the Release wants of one Application: its canary version and the image it rolls out. */
export interface Want {
  name: string;
  cluster?: string;
  canaryVersion: string;
  image: string;
}

export type WaveOutcome =
  | { kind: 'promoted' }
  | { kind: 'running' }
  /** app: the failed Application's key (cluster/name in a member cluster). */
  | { kind: 'failed'; app: string; reason: string; message: string };

/** Whether an Application's canary (this version) was promoted and its spec says so. */
export function promoted(o: AppObservation, want: Want): boolean {
  return o.exists && o.canary?.version === want.canaryVersion && o.canary.phase === RolloutPhase.Promoted && o.specImage === want.image;
}

/** Whether an Application's canary (this version) ended without a promotion. */
export function failed(o: AppObservation, want: Want): boolean {
  return o.exists && o.canary?.version === want.canaryVersion && isTerminal(o.canary.phase) && o.canary.phase !== RolloutPhase.Promoted;
}

/** Where an Application of a running wave stands. */
export function appPhase(o: AppObservation, want: Want): string {
  if (promoted(o, want)) return ReleaseAppPhase.Promoted;
  if (!o.exists || failed(o, want)) return ReleaseAppPhase.Failed;
  return ReleaseAppPhase.Progressing;
}

/** A wave is promoted when all its canaries are; it fails at the first one rolled back, aborted, or deleted. */
export function waveOutcome(wants: Want[], observations: AppObservation[]): WaveOutcome {
  const byKey = new Map(observations.map((o) => [releaseAppKey(o), o]));
  for (const want of wants) {
    const key = releaseAppKey(want);
    const o = byKey.get(key);
    if (!o?.exists) return { kind: 'failed', app: key, reason: 'ApplicationDeleted', message: `Application ${appWords(want)} was deleted during its wave` };
    if (failed(o, want)) {
      return { kind: 'failed', app: key, reason: o.canary?.reason ?? o.canary?.phase ?? 'CanaryFailed', message: `the canary ${want.canaryVersion} of ${appWords(want)} was ${canaryEnd(o)}` };
    }
  }
  return wants.every((w) => promoted(byKey.get(releaseAppKey(w))!, w)) ? { kind: 'promoted' } : { kind: 'running' };
}

/** An Application in messages: "cart", or "cart in cluster b". */
export function appWords(a: { name: string; cluster?: string | undefined }): string {
  return a.cluster ? `${a.name} in cluster ${a.cluster}` : a.name;
}

/**
 * How a canary ended, in words, without what its own message repeats: "rolled back: the health gate failed ...", "aborted
 * by ana: not today" (its message "rolled back: X; all traffic on stable, canary removed" says the same twice).
 */
export function canaryEnd(o: AppObservation): string {
  const verb = o.canary?.phase === RolloutPhase.Aborted ? 'aborted' : 'rolled back';
  const message = o.canary?.message ?? '';
  const said = /^(?:rolled back|aborted)((?: by [^:]*)?): (.*?)(?:; all traffic on stable, canary removed)?$/s.exec(message);
  if (said) return `${verb}${said[1]}: ${said[2]}`;
  return message ? `${verb}: ${message}` : verb;
}

/** The Applications the Release promoted, last first: the order a rollback goes in (last wave first, last app first). */
export function rollbackOrder(apps: ReleaseAppState[]): ReleaseAppState[] {
  return apps.map((a, i) => ({ a, i })).filter(({ a }) => a.phase === ReleaseAppPhase.Promoted).sort((x, y) => y.a.wave - x.a.wave || y.i - x.i).map(({ a }) => a);
}

/**
 * A reverted Application is back where it was: its spec says the previous image, its stable Deployment runs it (pinned
 * to a digest, or as admission stored it before the Release: `previousDeploymentImage`), and it is Running (or it is gone).
 */
export function reverted(o: AppObservation, previousImage: string, previousDeploymentImage?: string): boolean {
  const runsPrevious = runsImage(o.deploymentImage, previousImage) || (previousDeploymentImage !== undefined && o.deploymentImage === previousDeploymentImage);
  return !o.exists || (o.specImage === previousImage && runsPrevious && o.running);
}

/**
 * The image an Application's spec names when it is neither the Release's (`image`) nor the one it ran before
 * (`previousImage`): someone else changed it (a hotfix, a revert by hand). Undefined otherwise, and when it is gone.
 */
export function changedSince(o: AppObservation, image: string, previousImage: string): string | undefined {
  return o.exists && o.specImage !== undefined && o.specImage !== image && o.specImage !== previousImage ? o.specImage : undefined;
}

/** A canary the Release stopped has ended (or never started). */
export function stopped(o: AppObservation, canaryVersion: string): boolean {
  if (!o.exists) return true;
  const ours = o.canary?.version === canaryVersion;
  return ours ? isTerminal(o.canary?.phase) : !o.canary?.enabled;
}

/** A wave in messages: "wave 2", or "wave 2 (eu)" when it has a name of its own. */
export function waveLabel(i: number, wave: WavePlan): string {
  return wave.name === `wave ${i + 1}` ? wave.name : `wave ${i + 1} (${wave.name})`;
}
