// Which code a benchmark measured: the commit, uncommitted changes, and a fingerprint of the operator's sources
// (other people edit the operator while a long benchmark runs, so it is taken per run).
import { execFile } from 'node:child_process';
import { createHash } from 'node:crypto';
import { readFile, readdir } from 'node:fs/promises';
import { join, resolve } from 'node:path';
import { promisify } from 'node:util';

const root = resolve(import.meta.dirname, '..');

const sourceDirs = ['activities', 'api', 'kube', 'operator', 'reconcile', 'render', 'watcher', 'workflows', 'bin'];

/** A short hash of every .ts file the operator runs. */
export async function sourceHash(): Promise<string> {
  const h = createHash('sha256');
  for (const dir of sourceDirs) {
    const files = (await readdir(join(root, dir), { recursive: true })).filter((f) => f.endsWith('.ts')).sort();
    for (const f of files) h.update(`${dir}/${f}\0`).update(await readFile(join(root, dir, f)));
  }
  return h.digest('hex').slice(0, 12);
}

/** The checked-out commit and the operator's source files with uncommitted changes. */
export async function gitState(): Promise<{ commit: string; dirty: string[] }> {
  const git = (args: string[]) => promisify(execFile)('git', args, { cwd: root }).then((r) => r.stdout.trimEnd(), () => '');
  const commit = (await git(['rev-parse', '--short', 'HEAD'])).trim() || 'unknown';
  const dirty = (await git(['status', '--porcelain', '--', ...sourceDirs])).split('\n').filter(Boolean).map((l) => l.slice(3));
  return { commit, dirty };
}
