// What a Release runs, fixed for one generation of its spec: waves of Applications with the canary each runs, and
// the steps and analysis written into their specs. Built from the Release by reconcile/release-plan.ts.
import type { AnalysisSpec, CanaryStep } from '../api/application.ts';

export interface ReleaseAppPlan {
  name: string;
  /** The member cluster it is in; absent: the operator's own. */
  cluster?: string;
  canaryVersion: string;
  image?: string;
}

export interface WavePlan {
  /** The wave's name in messages (default "wave N"). */
  name: string;
  apps: ReleaseAppPlan[];
  /** Written into each Application's canary; absent: the Application's own. */
  steps?: CanaryStep[];
  analysis?: AnalysisSpec;
}

export interface ReleasePlan {
  generation: number;
  waves: WavePlan[];
  /** Between waves: ms to wait; null to wait for a promote; absent to go on at once. */
  pauseBetweenWavesMs?: number | null;
}
