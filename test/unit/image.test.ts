// Image references: the canary's image derived from spec.image, and what counts as running an image once admission
// (a digest-pinning policy) rewrote it.
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { imageAtVersion, runsImage } from '../../api/image.ts';

const digest = `sha256:${'ab'.repeat(32)}`;

describe('imageAtVersion', () => {
  const cases: [string, string, string][] = [
    ['nginx:1.25', '1.26', 'nginx:1.26'],
    ['nginx', 'v2', 'nginx:v2'],
    ['registry.local:5000/team/app:1.0', '1.1', 'registry.local:5000/team/app:1.1'],
    ['registry.local:5000/team/app', '1.1', 'registry.local:5000/team/app:1.1'],
    [`app:1.0@${digest}`, '2.0', 'app:2.0'],
    [`app@${digest}`, '2.0', 'app:2.0'],
  ];
  for (const [image, version, expected] of cases) test(`${image} at ${version} is ${expected}`, () => assert.equal(imageAtVersion(image, version), expected));
});

describe('runsImage', () => {
  const cases: [string | undefined, string, boolean, string][] = [
    ['nginx:1.26', 'nginx:1.26', true, 'the same reference'],
    [`nginx:1.26@${digest}`, 'nginx:1.26', true, 'pinned to a digest, tag kept'],
    [`registry.local:5000/team/app:1.1@${digest}`, 'registry.local:5000/team/app:1.1', true, 'a registry with a port'],
    [`nginx@${digest}`, 'nginx', true, 'no tag wanted, pinned'],
    [`nginx@${digest}`, 'nginx:1.26', false, 'tag dropped: the digest may be any tag\'s'],
    [`nginx:1.25@${digest}`, 'nginx:1.26', false, 'another tag pinned'],
    [`nginx:1.26@${digest}`, `nginx:1.26@sha256:${'cd'.repeat(32)}`, false, 'a wanted digest is only itself'],
    ['nginx:1.26@latest', 'nginx:1.26', false, 'not a digest'],
    [`nginx:1.26@sha256:abc`, 'nginx:1.26', false, 'too short to be a digest'],
    ['nginx:1.266', 'nginx:1.26', false, 'a longer tag'],
    ['mirror.local/nginx:1.26', 'nginx:1.26', false, 'another registry (only the promote\'s stored image says so)'],
    [undefined, 'nginx:1.26', false, 'no container'],
  ];
  for (const [running, wanted, expected, why] of cases) {
    test(`${running} runs ${wanted}: ${expected} (${why})`, () => assert.equal(runsImage(running, wanted), expected));
  }
});
