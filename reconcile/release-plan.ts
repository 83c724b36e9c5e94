import { parseDuration } from '../api/schema.ts';
import type { Release } from '../api/release.ts';
import type { ReleasePlan } from './wave-plan.ts';

/** The plan of a Release's current generation: each wave with its steps (its own, else the Release's) and analysis. */
export function releasePlan(release: Release): ReleasePlan {
  const { spec } = release;
  const pause = spec.pauseBetweenWaves;
  return {
    generation: release.metadata.generation ?? 0,
    waves: spec.waves.map((w, i) => {
      const steps = w.steps ?? spec.steps;
      return {
        name: w.name ?? `wave ${i + 1}`,
        apps: w.applications.map((a) => ({ name: a.name, ...(a.cluster ? { cluster: a.cluster } : {}), canaryVersion: a.canaryVersion, ...(a.image ? { image: a.image } : {}) })),
        ...(steps ? { steps } : {}),
        ...(spec.analysis ? { analysis: spec.analysis } : {}),
      };
    }),
    ...(pause ? { pauseBetweenWavesMs: pause.duration ? parseDuration(pause.duration) : null } : {}),
  };
}
