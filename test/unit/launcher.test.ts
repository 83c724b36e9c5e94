// The command a user runs (bin/application-operator, and `kubectl app`, which goes through it) picks the Node that
// can run the TypeScript CLI: the project's own, else a new enough one on PATH, else it says in one line what to do.
// Run here with stand-in Node binaries (shell scripts that answer --version and print how they were called).
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { chmodSync, copyFileSync, existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { after, describe, test } from 'node:test';
import { PRELOAD } from '../../operator/runtime.ts';

const bin = resolve(import.meta.dirname, '..', '..', 'bin');
const made: string[] = [];
after(() => {
  for (const dir of made) rmSync(dir, { recursive: true, force: true });
});

/** A copy of the launchers in a fresh project folder, optionally with a project Node, and a PATH with a `node` of `version`. */
function project(opts: { projectNode?: boolean; pathNode?: string }): { root: string; path: string } {
  const root = mkdtempSync(join(tmpdir(), 'launcher-'));
  made.push(root);
  mkdirSync(join(root, 'bin'));
  for (const f of ['application-operator', 'kubectl-app']) copyFileSync(join(bin, f), join(root, 'bin', f));
  const fake = (path: string, name: string, version: string) => {
    writeFileSync(path, `#!/bin/sh\n[ "$1" = --version ] && { echo ${version}; exit 0; }\necho "${name} ran: $*"\n`);
    chmodSync(path, 0o755);
  };
  if (opts.projectNode) {
    mkdirSync(join(root, 'node_modules', '.bin'), { recursive: true });
    fake(join(root, 'node_modules', '.bin', 'node'), 'project node', 'v24.9.0');
  }
  const pathDir = join(root, 'path');
  mkdirSync(pathDir);
  if (opts.pathNode) fake(join(pathDir, 'node'), 'PATH node', opts.pathNode);
  // Only what the launcher needs from the system besides node: the machine's own node stays out of reach.
  for (const tool of ['dirname', 'readlink']) symlinkSync(['/usr/bin', '/bin'].map((d) => join(d, tool)).find((f) => existsSync(f))!, join(pathDir, tool));
  return { root, path: pathDir };
}

/** The preload the launcher puts before the entry point (operator/runtime.ts PRELOAD), from the project's root. */
const preload = (root: string) => `--import=${join(root, PRELOAD)}`;

function run(file: string, args: string[], path: string): Promise<{ code: number; out: string; err: string }> {
  return new Promise((res) => {
    execFile('/bin/sh', [file, ...args], { env: { PATH: path } }, (error, stdout, stderr) => {
      res({ code: error ? Number(error.code ?? 1) : 0, out: stdout, err: stderr });
    });
  });
}

describe('the launcher', () => {
  test("uses the project's own Node even when an old one is on PATH", async () => {
    const p = project({ projectNode: true, pathNode: 'v20.20.2' });
    const r = await run(join(p.root, 'bin', 'application-operator'), ['status', 'shop'], p.path);
    assert.equal(r.code, 0, r.err);
    assert.equal(r.out.trim(), `project node ran: ${preload(p.root)} ${join(p.root, 'bin', 'application-operator.ts')} status shop`);
  });

  test('without one, uses a new enough node on PATH', async () => {
    const p = project({ pathNode: 'v22.19.0' });
    const r = await run(join(p.root, 'bin', 'application-operator'), ['--help'], p.path);
    assert.equal(r.out.trim(), `PATH node ran: ${preload(p.root)} ${join(p.root, 'bin', 'application-operator.ts')} --help`);
  });

  for (const version of ['v20.20.2', 'v22.18.0']) {
    test(`an older node (${version}) gets one line that says what to do, not a stack trace`, async () => {
      const p = project({ pathNode: version });
      const r = await run(join(p.root, 'bin', 'application-operator'), ['--help'], p.path);
      assert.equal(r.code, 1);
      assert.equal(r.out, '');
      assert.equal(r.err, `application-operator: needs Node.js >= 22.19, and ${join(p.path, 'node')} is ${version}: run npm ci in ${p.root} (it brings Node 24), or put a newer node on PATH\n`);
    });
  }

  test('no node at all: one line too', async () => {
    const p = project({});
    const r = await run(join(p.root, 'bin', 'application-operator'), ['--help'], p.path);
    assert.equal(r.code, 1);
    assert.match(r.err, /^application-operator: no Node\.js found: run npm ci in .* \(it brings Node 24\), or put Node >= 22\.19 on PATH\n$/);
  });

  test('kubectl app goes through it', async () => {
    const p = project({ pathNode: 'v20.20.2' });
    const r = await run(join(p.root, 'bin', 'kubectl-app'), ['pause', 'shop'], p.path);
    assert.equal(r.code, 1);
    assert.match(r.err, /needs Node\.js >= 22\.19/);
  });

  test('package.json names the launcher as the command and declares no engines (npm would warn before every npx answer under an older system Node, which the launcher does not need)', () => {
    const pkg = JSON.parse(readFileSync(join(bin, '..', 'package.json'), 'utf8')) as { bin: Record<string, string>; engines?: unknown };
    assert.equal(pkg.bin['application-operator'], './bin/application-operator');
    assert.equal(pkg.engines, undefined);
  });
});
