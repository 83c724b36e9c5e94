// The user side of the chaos run: a model of what should exist, the operations a user makes on a small pool of
// Applications (create, image, canary, promote, abort, delete, recreate, a hand edit of a child, deleting a child),
// and the choice of the next one from the seeded PRNG. Every choice consumes the PRNG in a fixed order, so a seed
// reproduces the whole sequence.
import { API_VERSION, KIND } from '../api/constants.ts';
import { control } from '../client/control.ts';
import type { Kube } from '../kube/client.ts';
import { eventually } from '../lib/poll.ts';
import { kinds } from '../render/children.ts';
import { unreadyImage } from '../stack/stack.ts';
import { temporalClient, type Json } from '../testkit/apps.ts';
import type { Rng } from './prng.ts';
import { errText, withTimeout } from './util.ts';

export const opKinds = ['create', 'image', 'canary', 'promote', 'abort', 'delete', 'recreate', 'hand-edit', 'delete-child'] as const;
export type OpKind = (typeof opKinds)[number];

/** The progress deadline every canary gets; a rollout unchanged for longer (plus slack) is stuck. */
export const PROGRESS_DEADLINE_S = 90;

const FIELD_MANAGER = 'chaos-user';
const GATES = { interval: '1s', failureThreshold: 3, initialDelay: '5s' };

/** What the run believes: which names should exist (only its own ops change that), and counters for fresh versions. */
export interface Model {
  pool: readonly string[];
  exists: Map<string, boolean>;
  versionCounter: number;
  imageCounter: number;
}

/** A pool of `size` names, none of which exists yet. */
export function newModel(size: number): Model {
  const pool = Array.from({ length: size }, (_, i) => `chaos-${i}`);
  return { pool, exists: new Map(pool.map((n) => [n, false])), versionCounter: 0, imageCounter: 0 };
}

/** Where ops act: the namespace, the clients, the PRNG and the model they update. */
export interface OpContext {
  kube: Kube;
  namespace: string;
  rng: Rng;
  model: Model;
}

export interface OpResult {
  text: string;
  /** The operator (correctly) refused it, e.g. promote without a rollout. */
  refused: boolean;
}

/** Picks the next op from the model (deterministic given the seed). */
export function nextOp(model: Model, rng: Rng): { kind: OpKind; name: string } {
  const name = rng.pick(model.pool);
  if (model.exists.get(name) !== true) {
    // Mostly create what is missing; sometimes poke at an absent app (deletes and control calls must be harmless).
    return { kind: rng.chance(0.85) ? 'create' : rng.pick(['delete', 'promote', 'abort'] as const), name };
  }
  const kind = rng.weighted<OpKind>({
    create: 4, image: 14, canary: 22, promote: 12, abort: 8, delete: 8, recreate: 7, 'hand-edit': 10, 'delete-child': 10,
  });
  return { kind, name };
}

const appRef = (namespace: string, name: string) => ({ apiVersion: API_VERSION, kind: KIND, namespace, name });

/** Runs one op; returns its description (throws only on harness trouble or a refusal by the API server). */
export async function runOp(ctx: OpContext, kind: OpKind, name: string): Promise<OpResult> {
  const { kube, namespace: ns, rng, model } = ctx;
  const present = model.exists.get(name) === true;
  const done = (text: string): OpResult => ({ text, refused: false });
  switch (kind) {
    case 'create':
      return done(`create ${name}: ${await createApp(ctx, name)}`);
    case 'image': {
      const image = `nginx:1.${++model.imageCounter}`;
      await kube.mergePatch(appRef(ns, name), { spec: { image } });
      return done(`image ${name} -> ${image}`);
    }
    case 'canary': {
      const { canary, text } = canarySpec(model, rng);
      await kube.mergePatch(appRef(ns, name), { spec: { serviceMesh: { enabled: true, canary } } });
      return done(`canary ${name} ${text}`);
    }
    case 'promote':
    case 'abort': {
      try {
        const client = await withTimeout(temporalClient(), 10_000, 'temporal connect');
        const r = await withTimeout(control(client, kind, ns, name, kind === 'abort' ? 'chaos abort' : undefined), 20_000, kind);
        return done(`${kind} ${name}: ${r.accepted ? `accepted (${r.state?.phase ?? '?'})` : r.note}`);
      } catch (err) {
        return { text: `${kind} ${name}: refused (${errText(err)})`, refused: true };
      }
    }
    case 'delete':
      await kube.delete(appRef(ns, name));
      model.exists.set(name, false);
      return done(`delete ${name}${present ? '' : ' (absent)'}`);
    case 'recreate': {
      await kube.delete(appRef(ns, name));
      model.exists.set(name, false);
      const gone = await waitGone(ctx, name, 90_000);
      if (!gone) return done(`recreate ${name}: delete did not finish within 90 s (not recreated)`);
      return done(`recreate ${name}: ${await createApp(ctx, name)}`);
    }
    case 'hand-edit': {
      await kube.jsonPatch({ apiVersion: kinds.deployment.apiVersion, kind: kinds.deployment.kind, namespace: ns, name }, [
        { op: 'replace', path: '/spec/template/spec/containers/0/image', value: 'busybox:hand-edited' },
      ]);
      return done(`hand-edit ${name}: Deployment image -> busybox:hand-edited`);
    }
    case 'delete-child': {
      const child = rng.pick([kinds.deployment, kinds.service, kinds.virtualService, kinds.destinationRule]);
      await kube.delete({ apiVersion: child.apiVersion, kind: child.kind, namespace: ns, name });
      return done(`delete-child ${name}: ${child.kind}`);
    }
  }
}

function baseSpec(model: Model, rng: Rng): Json {
  return { image: `nginx:1.${++model.imageCounter}`, replicas: rng.int(1, 2), serviceMesh: { enabled: true } };
}

/** A random canary: a fixed weight or steps (sometimes ending in an indefinite pause), now and then an unready image. */
function canarySpec(model: Model, rng: Rng): { canary: Json; text: string } {
  const version = `v${++model.versionCounter}`;
  const bad = rng.chance(0.15);
  const useSteps = rng.chance(0.6);
  const canary: Json = {
    enabled: true, canaryVersion: version, healthGates: GATES, progressDeadline: `${PROGRESS_DEADLINE_S}s`,
    image: bad ? unreadyImage : null, weight: null, steps: null,
  };
  if (useSteps) {
    const w1 = rng.int(5, 40);
    const w2 = rng.int(w1, 90);
    canary['steps'] = [{ setWeight: w1 }, { pause: { duration: `${rng.int(1, 5)}s` } }, { setWeight: w2 }, { pause: { duration: `${rng.int(1, 4)}s` } }];
    if (rng.chance(0.25)) (canary['steps'] as Json[]).push({ pause: {} });
  } else {
    canary['weight'] = rng.int(1, 60);
  }
  const text = `${version}${bad ? ' (unready image)' : ''} ${useSteps ? `steps ${JSON.stringify(canary['steps'])}` : `weight ${canary['weight']}`}`;
  return { canary, text };
}

async function createApp(ctx: OpContext, name: string): Promise<string> {
  const { kube, namespace: ns, rng, model } = ctx;
  const spec = baseSpec(model, rng);
  // A name deleted a moment ago may still be finalizing: an apply now would patch the dying object.
  if (model.exists.get(name) !== true && !(await waitGone(ctx, name, 90_000))) return 'the previous incarnation is still being deleted after 90 s (not created)';
  await kube.apply({ apiVersion: API_VERSION, kind: KIND, metadata: { name, namespace: ns }, spec } as Json as never, { fieldManager: FIELD_MANAGER, force: true });
  model.exists.set(name, true);
  return `image ${spec['image']} replicas ${spec['replicas']}`;
}

/** Whether the Application is gone within timeoutMs. */
function waitGone(ctx: OpContext, name: string, timeoutMs: number): Promise<boolean> {
  const gone = async () => ((await ctx.kube.get(appRef(ctx.namespace, name))) === null ? true : undefined);
  return eventually(`${name} gone`, gone, { timeoutMs, intervalMs: 300 }).then(() => true, () => false);
}
