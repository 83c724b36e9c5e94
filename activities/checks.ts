// A rollout's checks (spec.serviceMesh.canary.checks): an HTTP check with its retries, and a Job check's Job made,
// observed and removed. The workflow polls a confirm check and a Job, so every look is in its history. What a check
// sends and what an answer means are decided in reconcile/checks.ts; the Job is rendered by render/check-job.ts.
import { ApplicationFailure, Context, heartbeat } from '@temporalio/activity';
import { setTimeout as sleep } from 'node:timers/promises';
import { parseApplication, type Check } from '../api/application.ts';
import { API_VERSION, FailureType, KIND } from '../api/constants.ts';
import { KubeError, type KubeObject } from '../kube/client.ts';
import { foreignCheckJob, renderCheckJob, type FoundJob } from '../render/check-job.ts';
import { RETRY_DELAY_MS, describeUrl, hostRefusal, httpAnswer, httpCheckRequest, httpNoAnswer, jobCheckOutcome, type ObservedCheckPod, type ObservedJob } from '../reconcile/checks.ts';
import type { ActivityDeps } from './deps.ts';
import type { HttpCheckInput, HttpCheckResult, JobCheckObservation, JobCheckRef, StartJobCheckInput } from './types.ts';

/** How often a running HTTP check heartbeats. */
const HEARTBEAT_MS = 2000;

/** Reading more of an answer than a message quotes only costs memory: a check's verdict is its status. */
const MAX_BODY_BYTES = 4096;

const jobRef = (r: JobCheckRef) => ({ apiVersion: 'batch/v1', kind: 'Job', namespace: r.namespace, name: r.jobName });

function checkOf<K extends 'http' | 'job'>(input: { namespace: string; name: string; check: Check }, kind: K): Check & Required<Pick<Check, K>> {
  if (!input.check[kind]) {
    throw ApplicationFailure.nonRetryable(`check ${input.check.name} of ${input.namespace}/${input.name} is no ${kind} check`, FailureType.InvalidSpec);
  }
  return input.check as Check & Required<Pick<Check, K>>;
}

/** The start of a body, at most MAX_BODY_BYTES; the rest is not read. */
async function bodyStart(res: Response): Promise<string> {
  if (!res.body) return '';
  const reader = (res.body as ReadableStream<Uint8Array>).getReader();
  const chunks: Uint8Array[] = [];
  let size = 0;
  try {
    while (size < MAX_BODY_BYTES) {
      const chunk = (await reader.read()) as { done: boolean; value?: Uint8Array };
      if (chunk.done || !chunk.value) break;
      chunks.push(chunk.value);
      size += chunk.value.byteLength;
    }
  } finally {
    await reader.cancel().catch(() => undefined);
  }
  return new TextDecoder().decode(Buffer.concat(chunks).subarray(0, MAX_BODY_BYTES));
}

/** One request of an HTTP check, within its timeout (or the activity's cancellation), redirects not followed. */
async function attempt(url: string, request: RequestInit, timeoutMs: number): Promise<{ ok: boolean; status?: number; detail: string }> {
  try {
    const signal = AbortSignal.any([AbortSignal.timeout(timeoutMs), Context.current().cancellationSignal]);
    const res = await fetch(url, { ...request, redirect: 'manual', signal });
    const { ok, message } = httpAnswer(url, res.status, await bodyStart(res), res.headers.get('location'));
    return { ok, status: res.status, detail: message };
  } catch (err) {
    if (Context.current().cancellationSignal.aborted) throw err;
    return { ok: false, detail: httpNoAnswer(url, timeoutMs, err) };
  }
}

/**
 * An HTTP check: the request the spec describes (with POST, the rollout's context as JSON), each attempt within
 * timeoutSeconds, up to 1 + retries attempts a second apart until one answers 2xx. A confirm check asks once per
 * call: not yet 2xx is `waiting`, and the workflow asks again every intervalSeconds. A host --check-allowed-hosts
 * does not allow fails the check (reason CheckNotAllowed) before any request. Never throws for an answer or its
 * absence: the result says what happened.
 */
export async function runHttpCheck(deps: Pick<ActivityDeps, 'checkAllowedHosts'>, input: HttpCheckInput): Promise<HttpCheckResult> {
  const check = checkOf(input, 'http');
  const { url, confirm, retries, timeoutSeconds } = check.http;
  const refusal = hostRefusal(deps.checkAllowedHosts ?? [], url, `check ${check.name} of ${input.namespace}/${input.name} calls ${describeUrl(url)}`);
  if (refusal) return { verdict: 'fail', detail: refusal, attempts: 0, reason: FailureType.CheckNotAllowed };
  const request = httpCheckRequest(check.name, check.http, input.context);
  const maxAttempts = confirm ? 1 : 1 + retries;
  let last = `attempt 1 of ${maxAttempts}`;
  // Temporal delivers a cancellation only to an activity that heartbeats: also while an attempt waits for its answer.
  const beating = setInterval(() => heartbeat(last), HEARTBEAT_MS);
  try {
    for (let attempts = 1; ; attempts++) {
      const result = await attempt(url, request, timeoutSeconds * 1000);
      const status = result.status === undefined ? {} : { status: result.status };
      if (result.ok) return { verdict: 'pass', ...status, detail: result.detail, attempts };
      if (attempts >= maxAttempts) return { verdict: confirm ? 'waiting' : 'fail', ...status, detail: result.detail, attempts };
      last = `attempt ${attempts} of ${maxAttempts}: ${result.detail}`;
      heartbeat(last);
      await sleep(RETRY_DELAY_MS, undefined, { signal: Context.current().cancellationSignal });
    }
  } finally {
    clearInterval(beating);
  }
}

/**
 * Creates a Job check's Job (render/check-job.ts), owned by the Application; idempotent: the same version, phase and
 * step name the same Job, and one that exists is taken as made (delete it with deleteJobCheck once its end is read). A JobSpec the API server refuses fails for good (InvalidSpec),
 * with its message; an Application that is gone, too (ApplicationGone).
 */
export async function startJobCheck(deps: Pick<ActivityDeps, 'kube'>, input: StartJobCheckInput): Promise<{ jobName: string }> {
  const check = checkOf(input, 'job');
  const raw = await deps.kube.get({ apiVersion: API_VERSION, kind: KIND, namespace: input.namespace, name: input.name });
  if (!raw) throw ApplicationFailure.nonRetryable(`Application ${input.namespace}/${input.name} no longer exists`, FailureType.ApplicationGone);
  const parsed = parseApplication(raw);
  if (!parsed.ok) throw ApplicationFailure.nonRetryable(`Application ${input.namespace}/${input.name} is invalid: ${parsed.message}`, FailureType.InvalidSpec);
  const job = renderCheckJob(parsed.app, check, input.context);
  try {
    await deps.kube.create(job as unknown as KubeObject);
  } catch (err) {
    if (err instanceof KubeError && err.status === 409 && err.reason === 'AlreadyExists') {
      // Made by an earlier try of this activity, most likely; a Job of the same name that is not this check's is never
      // taken for it (its verdict would be another check's). Retried: the one of an Application deleted before this
      // one goes with it, and one a person made is said in status until someone removes it.
      const found = await deps.kube.get<FoundJob>(jobRef({ namespace: input.namespace, jobName: job.metadata.name }));
      const foreign = found ? foreignCheckJob(job, found) : undefined;
      if (foreign) throw new Error(`Job ${input.namespace}/${job.metadata.name} exists and is not the Job of check ${check.name}: ${foreign}`, { cause: err });
      if (found) return { jobName: job.metadata.name };
      throw new Error(`Job ${input.namespace}/${job.metadata.name} of check ${check.name} was there and is gone: making it again`, { cause: err });
    }
    // Over a quota is not the check's fault: the Jobs of earlier checks may be going (retried, and said in status).
    if (err instanceof KubeError && err.permanent && !err.overQuota) {
      throw ApplicationFailure.nonRetryable(`the API server refused the Job of check ${check.name}: ${err.message}`, FailureType.InvalidSpec);
    }
    throw new Error(`creating Job ${input.namespace}/${job.metadata.name} of check ${check.name}: ${err instanceof Error ? err.message : String(err)}`, { cause: err });
  }
  return { jobName: job.metadata.name };
}

/** Where a Job check stands: its Job's conditions and, for a failure or a stuck pod, what its pods say. */
export async function observeJobCheck(deps: Pick<ActivityDeps, 'kube'>, input: JobCheckRef): Promise<JobCheckObservation> {
  const [job, pods] = await Promise.all([
    deps.kube.get<ObservedJob>(jobRef(input)),
    deps.kube.list<ObservedCheckPod>({ apiVersion: 'v1', kind: 'Pod', namespace: input.namespace }, `batch.kubernetes.io/job-name=${input.jobName}`),
  ]);
  return jobCheckOutcome(input.jobName, job, pods.items);
}

/** Removes a Job check's Job and its pods; one that is gone already counts as removed. */
export async function deleteJobCheck(deps: Pick<ActivityDeps, 'kube'>, input: JobCheckRef): Promise<{ deleted: boolean }> {
  return { deleted: await deps.kube.delete(jobRef(input), { propagationPolicy: 'Background' }) };
}
