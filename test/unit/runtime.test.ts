// The operator's process settings (operator/runtime.ts) are the ones the image and `npm start` use, and the spawners'
// merge keeps what a caller already set.
import assert from 'node:assert/strict';
import { existsSync, readFileSync } from 'node:fs';
import { test } from 'node:test';
import { MALLOC_ARENA_MAX, NODE_OPTIONS, PRELOAD, preloadArgs, runtimeEnv, runtimeTuned, withRuntimeEnv } from '../../operator/runtime.ts';

const read = (file: string) => readFileSync(new URL(`../../${file}`, import.meta.url), 'utf8');

/** The Dockerfile's ENV settings of its last stage (the image that runs), continuation lines joined. */
function imageEnv(dockerfile: string): Record<string, string> {
  const stages = dockerfile.replace(/\\\n/g, ' ').split(/^FROM /m);
  const env: Record<string, string> = {};
  for (const line of (stages.at(-1) ?? '').split('\n').filter((l) => l.startsWith('ENV '))) {
    for (const [, k, v] of line.slice(4).matchAll(/([A-Z_]+)=("[^"]*"|\S+)/g)) env[k ?? ''] = (v ?? '').replace(/^"|"$/g, '');
  }
  return env;
}

test('the image runs the operator with the runtime settings of operator/runtime.ts', () => {
  const env = imageEnv(read('Dockerfile'));
  for (const [k, v] of Object.entries(runtimeEnv)) assert.equal(env[k], v, `Dockerfile ENV ${k}`);
});

test('the image, the launcher and the spawners preload operator/sandbox-calls.ts by a path that resolves where the entry point does', () => {
  assert.ok(existsSync(new URL(`../../${PRELOAD}`, import.meta.url)), `${PRELOAD} exists`);
  const entrypoint = /^ENTRYPOINT (.*)$/m.exec(read('Dockerfile'))?.[1] ?? '';
  assert.deepEqual(JSON.parse(entrypoint), ['node', `--import=./${PRELOAD}`, 'bin/application-operator.ts', 'run'], 'beside the entry point, from WORKDIR');
  assert.ok(read('bin/application-operator').includes(`exec "$node" --import="$root/${PRELOAD}" "$dir/application-operator.ts" "$@"`), 'the launcher, from its own root');
  assert.deepEqual(preloadArgs('/repo'), [`--import=/repo/${PRELOAD}`]);
});

test('npm start runs the operator with the same settings', () => {
  const start = (JSON.parse(read('package.json')) as { scripts: Record<string, string> }).scripts['start'] ?? '';
  assert.match(start, new RegExp(`NODE_OPTIONS=${NODE_OPTIONS}( |$)`));
  assert.match(start, new RegExp(`MALLOC_ARENA_MAX=${MALLOC_ARENA_MAX}( |$)`));
  assert.ok(start.endsWith(`node --import=./${PRELOAD} bin/application-operator.ts run`), start);
});

test('withRuntimeEnv adds the settings and keeps what the caller set', () => {
  assert.deepEqual(withRuntimeEnv({ PATH: '/bin' }), { PATH: '/bin', NODE_OPTIONS, MALLOC_ARENA_MAX });
  // Other node options stay, after ours.
  assert.equal(withRuntimeEnv({ NODE_OPTIONS: '--enable-source-maps' })['NODE_OPTIONS'], `${NODE_OPTIONS} --enable-source-maps`);
  // A caller's own young-generation size and arena cap win (an experiment with other values).
  assert.deepEqual(withRuntimeEnv({ NODE_OPTIONS: '--max-semi-space-size=8', MALLOC_ARENA_MAX: '4' }), { NODE_OPTIONS: '--max-semi-space-size=8', MALLOC_ARENA_MAX: '4' });
});

test('runtimeTuned: both settings, from NODE_OPTIONS or node\'s own arguments', () => {
  assert.equal(runtimeTuned({ ...runtimeEnv }, []), true);
  assert.equal(runtimeTuned({ MALLOC_ARENA_MAX: '2' }, ['--max-semi-space-size=2']), true);
  assert.equal(runtimeTuned({ NODE_OPTIONS }, []), false, 'no arena cap');
  assert.equal(runtimeTuned({ MALLOC_ARENA_MAX: '2' }, []), false, 'default young generation');
});
