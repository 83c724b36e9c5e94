// The Job of a Job check (spec.serviceMesh.canary.checks[].job): the spec's pod template in a Job, named, labelled and owned by
// the operator, with the rollout's context in every container's environment. Not a child in render/children.ts: a
// rollout creates it when the check runs and removes it when done (activities/checks.ts); its owner reference takes
// it away with the Application.
import type { V1OwnerReference } from '@kubernetes/client-node';
import { createHash } from 'node:crypto';
import type { Application, JobCheck } from '../api/application.ts';
import { CHECK_KEY_ANNOTATION, CHECK_LABEL, LABEL_MANAGED_BY, MANAGED_BY } from '../api/constants.ts';
import { checkEnv, type CheckContext } from '../reconcile/checks.ts';
import { childLabels, namespaceOf, ownerReference } from './meta.ts';

const MAX_NAME = 63;
const HASH_CHARS = 8;
/** What a long app name leaves the check's name at least, so that the Job still says which check it runs. */
const MIN_CHECK_CHARS = 20;

/**
 * The Job's name: `<app>-<check>-<hash>`, at most 63 characters (its pods' job-name label must fit), the app's and
 * then the check's name cut when needed. The hash is of the app's and the check's whole names, the rollout's version
 * and where the check runs (phase and step), so a retried or replayed activity finds the Job it made, another version
 * makes another Job, and two Applications whose names join alike (app `a` with check `b-smoke`, app `a-b` with check
 * `smoke`), or two long check names cut alike, never share one.
 */
export function checkJobName(app: string, check: string, context: Pick<CheckContext, 'version' | 'phase' | 'step'>): string {
  const hash = createHash('sha256').update(JSON.stringify([app, check, context.version, context.phase, context.step ?? null])).digest('hex').slice(0, HASH_CHARS);
  const room = MAX_NAME - HASH_CHARS - 2;
  const checkPart = check.slice(0, Math.max(room - app.length, Math.min(check.length, MIN_CHECK_CHARS))).replace(/-+$/, '');
  const appPart = app.slice(0, room - checkPart.length).replace(/-+$/, '');
  return `${appPart}-${checkPart}-${hash}`;
}

type Json = Record<string, unknown>;

/** A Job check's Job, as created. */
export interface CheckJob {
  apiVersion: 'batch/v1';
  kind: 'Job';
  metadata: { name: string; namespace: string; labels: Record<string, string>; annotations: Record<string, string>; ownerReferences: V1OwnerReference[] };
  spec: Json;
}
interface Container extends Json {
  env?: { name: string }[];
  terminationMessagePolicy?: string;
}

/**
 * The Job a check runs: the spec's pod template, with what a check needs where the template says nothing:
 * restartPolicy Never, terminationMessagePolicy FallbackToLogsOnError (a failed container's last log lines become
 * its message, readable without access to logs); backoffLimit 0 (a check is retried only where the spec says so),
 * and activeDeadlineSeconds its timeout (the Job controller then ends it, DeadlineExceeded).
 */
export function renderCheckJob(app: Application, check: { name: string; job: JobCheck }, context: CheckContext): CheckJob {
  const pod = structuredClone(check.job.template) as Json & { containers: Container[] };
  const env = checkEnv(check.name, context);
  const ours = new Set(env.map((e) => e.name));
  const labels = { ...childLabels(app), [CHECK_LABEL]: check.name };
  // Not the app's name label: the app's Service selects by it, and a check's pod must get none of its requests.
  const podLabels = { [LABEL_MANAGED_BY]: MANAGED_BY, [CHECK_LABEL]: check.name };
  return {
    apiVersion: 'batch/v1',
    kind: 'Job',
    metadata: {
      name: checkJobName(app.metadata.name, check.name, context),
      namespace: namespaceOf(app),
      labels,
      annotations: { [CHECK_KEY_ANNOTATION]: `${context.version}/${context.phase}${context.step === undefined ? '' : `/${context.step}`}` },
      ownerReferences: [ownerReference(app)],
    },
    spec: {
      backoffLimit: 0,
      activeDeadlineSeconds: check.job.timeoutSeconds,
      template: {
        metadata: { labels: podLabels },
        spec: {
          ...pod,
          restartPolicy: pod['restartPolicy'] ?? 'Never',
          containers: pod.containers.map((c) => ({
            ...c,
            terminationMessagePolicy: c.terminationMessagePolicy ?? 'FallbackToLogsOnError',
            env: [...(c.env ?? []).filter((e) => !ours.has(e.name)), ...env],
          })),
        },
      },
    },
  };
}

/** What of a Job found under a check Job's name decides whether it is that check's. */
export interface FoundJob {
  metadata: { labels?: Record<string, string>; annotations?: Record<string, string>; ownerReferences?: { kind?: string; name?: string; uid?: string }[]; deletionTimestamp?: string };
}

/**
 * Why a Job found under the name of the Job a check would make is not that Job (undefined: it is, made by an earlier
 * try of the same activity): another owner (a Job a person made, or one of an earlier Application of the same name,
 * which the garbage collector is taking away), another check, or another run of it.
 */
export function foreignCheckJob(made: CheckJob, found: FoundJob): string | undefined {
  const owner = made.metadata.ownerReferences[0];
  const owners = found.metadata.ownerReferences ?? [];
  if (!owners.some((o) => o.uid === owner?.uid)) {
    const by = owners.map((o) => `${o.kind ?? '?'} ${o.name ?? '?'} (uid ${o.uid ?? '?'})`).join(', ');
    return `it is owned by ${by || 'nothing'}, not by this Application (uid ${owner?.uid ?? '?'})${found.metadata.deletionTimestamp ? ', and is being deleted' : ''}`;
  }
  const check = found.metadata.labels?.[CHECK_LABEL];
  const key = found.metadata.annotations?.[CHECK_KEY_ANNOTATION];
  if (check !== made.metadata.labels[CHECK_LABEL] || key !== made.metadata.annotations[CHECK_KEY_ANNOTATION]) {
    return `it runs check ${check ?? '(none)'} at ${key ?? '(no key)'}, not ${made.metadata.labels[CHECK_LABEL]} at ${made.metadata.annotations[CHECK_KEY_ANNOTATION]}`;
  }
  return undefined;
}
