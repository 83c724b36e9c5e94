// How a pod of the local stack's data plane answers HTTP, chosen by its image: the pod server (stack/pod-server.ts)
// answers for every pod kwok pretends to run, and a test or a demo picks a misbehaving canary by its image tag.

/** What a pod's answers look like: the share of 503s and the delay before each answer. */
export interface PodBehaviour {
  /** Percent of requests answered 503 (0-100), spread evenly: with 5, every 20th request. */
  errorPercent: number;
  /** Milliseconds before each answer. */
  latencyMs: number;
}

export const healthyBehaviour: PodBehaviour = { errorPercent: 0, latencyMs: 0 };

/** The status of the failing answers. */
export const failureStatus = 503;

/**
 * Images with a behaviour, for tests and demos. Any other image answers 200 at once. Tokens in the tag, separated by
 * '_', choose the behaviour: `errors-<percent>` (e.g. errors-5, errors-2.5, errors-100) and `slow-<n>ms` or
 * `slow-<n>s`; other tokens (a version such as v2) are ignored, so `app:v2_errors-5_slow-200ms` combines both.
 */
export const servingImages = {
  healthy: 'registry.invalid/app:v1',
  errors5: 'registry.invalid/app:errors-5',
  errors100: 'registry.invalid/app:errors-100',
  slow200ms: 'registry.invalid/app:slow-200ms',
} as const;

/** An image of `registry.invalid/app` whose pods behave as asked (e.g. { version: 'v2', errorPercent: 5 } gives app:v2_errors-5). */
export function servingImage(opts: { version?: string; errorPercent?: number; latencyMs?: number }): string {
  const tokens = [
    opts.version,
    opts.errorPercent !== undefined ? `errors-${opts.errorPercent}` : undefined,
    opts.latencyMs !== undefined ? `slow-${opts.latencyMs}ms` : undefined,
  ].filter((t): t is string => t !== undefined && t !== '');
  return `registry.invalid/app:${tokens.join('_') || 'latest'}`;
}

/** The tag of an image reference (`latest` when it has none); a digest is not a tag. */
export function imageTag(image: string): string {
  const name = image.split('@')[0] ?? '';
  const colon = name.lastIndexOf(':');
  return colon > name.lastIndexOf('/') ? name.slice(colon + 1) : 'latest';
}

/** The behaviour an image asks for; throws saying which token is wrong (e.g. errors-150, slow-fast). */
export function behaviourOf(image: string): PodBehaviour {
  const behaviour = { ...healthyBehaviour };
  for (const token of imageTag(image).split('_')) {
    if (token.startsWith('errors-')) {
      const m = /^errors-(\d{1,3}(?:\.\d+)?)$/.exec(token);
      const percent = m ? Number(m[1]) : NaN;
      if (!(percent >= 0 && percent <= 100)) throw new Error(`image ${image}: ${token} should be errors-<percent>, a number from 0 to 100 (e.g. errors-5)`);
      behaviour.errorPercent = percent;
    } else if (token.startsWith('slow-')) {
      const m = /^slow-(\d+)(ms|s)$/.exec(token);
      if (!m) throw new Error(`image ${image}: ${token} should be slow-<n>ms or slow-<n>s (e.g. slow-200ms)`);
      behaviour.latencyMs = Number(m[1]) * (m[2] === 's' ? 1000 : 1);
    }
  }
  return behaviour;
}

/**
 * Whether the n-th request (from 1) to a pod fails: exactly floor(n * percent / 100) of the first n fail, spread
 * evenly, so a test counting answers sees the share the image names without sampling noise.
 */
export function failsRequest(n: number, errorPercent: number): boolean {
  return Math.floor((n * errorPercent) / 100) > Math.floor(((n - 1) * errorPercent) / 100);
}
