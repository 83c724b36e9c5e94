// The Release API as one typed model, mirroring crds/release.yaml like api/application.ts mirrors the Application's
// CRD: the same defaults, limits and cross-field rules, with the same messages.
import { z } from 'zod';
import { analysisSchema, canaryImageSchema, canaryStepSchema, canaryVersionSchema } from './application.ts';
import { API_VERSION, MAX_NAME_LENGTH } from './constants.ts';
import { DNS1035_LABEL, DNS1123_LABEL, duration, issuesMessage, list, str } from './schema.ts';

export { RELEASE_KIND, ReleaseAppPhase, ReleasePhase, terminalReleasePhases } from './constants.ts';
import { RELEASE_KIND, releaseAppKey } from './constants.ts';
export { releaseAppKey } from './constants.ts';

const appName = str(MAX_NAME_LENGTH).refine((s) => DNS1035_LABEL.test(s), 'applications[].name must be the name of an Application (a DNS-1035 label)');

const clusterName = str(63).refine((s) => DNS1123_LABEL.test(s), "cluster must be the name of a registered member cluster (lowercase letters, digits and '-')");

const releaseAppSchema = z.object({
  name: appName,
  /** A member cluster's name; absent: the operator's own cluster. */
  cluster: clusterName.optional(),
  canaryVersion: canaryVersionSchema,
  image: canaryImageSchema.optional(),
});


const waveSchema = z.object({
  name: str(63).refine((s) => DNS1123_LABEL.test(s), 'wave name must be lowercase letters, digits and \'-\'').optional(),
  applications: list(releaseAppSchema, 20)
    .refine((a) => a.length >= 1, 'should have at least 1 items')
    .refine((apps) => new Set(apps.map(releaseAppKey)).size === apps.length, 'Duplicate value: an Application may appear once per cluster in a wave'),
  steps: list(canaryStepSchema, 50).optional(),
});

/** The spec of a Release, with the CRD's defaults and rules. */
export const releaseSpecSchema = z
  .object({
    waves: list(waveSchema, 10).refine((w) => w.length >= 1, 'should have at least 1 items'),
    steps: list(canaryStepSchema, 50).optional(),
    analysis: analysisSchema.optional(),
    pauseBetweenWaves: z
      .object({ duration: duration('pauseBetweenWaves.duration must be a duration such as 30s, 5m or 1h (units ms, s, m, h)', null).optional() })
      .optional(),
  })
  .superRefine((spec, ctx) => {
    const seen = new Map<string, number>();
    spec.waves.forEach((wave, w) => wave.applications.forEach((a) => {
      const key = releaseAppKey(a);
      const first = seen.get(key);
      if (first !== undefined && first !== w) {
        ctx.addIssue({ code: 'custom', path: ['waves'], message: `an Application may be in one wave only (per cluster): ${key} is in waves ${first + 1} and ${w + 1}` });
      }
      seen.set(key, w);
    }));
  });

const releaseSchema = z.object({
  apiVersion: z.literal(API_VERSION),
  kind: z.literal(RELEASE_KIND),
  metadata: z.object({
    name: z.string(),
    namespace: z.string().optional(),
    uid: z.string().optional(),
    generation: z.int().optional(),
    resourceVersion: z.string().optional(),
    deletionTimestamp: z.string().optional(),
    finalizers: z.array(z.string()).optional(),
  }),
  spec: releaseSpecSchema,
});

export type Release = z.output<typeof releaseSchema>;
export type ReleaseSpec = z.output<typeof releaseSpecSchema>;

/** Parses and defaults a Release; on failure, a message listing every problem by field path. */
export function parseRelease(obj: unknown): { ok: true; release: Release } | { ok: false; message: string } {
  const result = releaseSchema.safeParse(obj);
  return result.success ? { ok: true, release: result.data } : { ok: false, message: issuesMessage(result.error) };
}
