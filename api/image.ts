// Container image references: what the rollouts derive from spec.image, and what counts as running it.

/**
 * Whether a container that runs `running` runs `wanted`: the same reference, or `wanted` pinned to a digest by
 * admission (a policy that resolves tags, as Kyverno's mutateDigest does): registry.example/api:2.0 runs as
 * registry.example/api:2.0@sha256:…. Not registry.example/api@sha256:… (the tag dropped): that digest could be any
 * tag's, the previous version's too. A wanted reference that names a digest itself is only the same reference.
 */
export function runsImage(running: string | undefined, wanted: string): boolean {
  if (running === wanted) return true;
  if (running === undefined || wanted.includes('@') || !running.startsWith(`${wanted}@`)) return false;
  return /^[a-z0-9]+(?:[.+_-][a-z0-9]+)*:[a-zA-Z0-9=_-]{32,}$/.test(running.slice(wanted.length + 1));
}

/** An image with its tag (or digest) replaced by `version`: registry.example/api:1.0 at 2.0 is registry.example/api:2.0. */
export function imageAtVersion(image: string, version: string): string {
  return `${repositoryOf(image)}:${version}`;
}

/** An image without its tag and digest: registry.example:5000/api:1.0 is registry.example:5000/api. */
function repositoryOf(image: string): string {
  const named = image.split('@')[0] ?? image;
  const tagAt = named.lastIndexOf(':');
  return tagAt > named.lastIndexOf('/') ? named.slice(0, tagAt) : named;
}
