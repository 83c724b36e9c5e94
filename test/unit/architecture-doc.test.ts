// docs/architecture.md stays true to the code: every backticked path exists (and is not a generated file, which a
// reader must not edit), every backticked identifier occurs in the code, every flag is one the code defines, and
// the CLI's row lists every command the CLI has.
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { readFileSync, readdirSync, statSync } from 'node:fs';
import { join, relative } from 'node:path';
import { describe, test } from 'node:test';
import { promisify } from 'node:util';

const root = join(import.meta.dirname, '../..');
const skipped = new Set(['node_modules', '.git', '.state', 'docs']);

/** What the doc's words are checked against: the repository's paths, and the words and flags of its code. */
interface Repo {
  /** Every file and folder, relative to the root, folders with a trailing '/'. */
  paths: Set<string>;
  /** The first line of a file, to tell a generated one. */
  firstLine: (path: string) => string;
  /** Every identifier-like word of the code (TypeScript, and the CRDs for field names). */
  words: Set<string>;
  /** The code's text, for flags. */
  code: string;
}

function scanRepo(): Repo {
  const paths = new Set<string>();
  const texts: string[] = [];
  const walk = (dir: string) => {
    for (const name of readdirSync(dir)) {
      if (skipped.has(name)) continue;
      const full = join(dir, name);
      const rel = relative(root, full);
      if (statSync(full).isDirectory()) {
        paths.add(`${rel}/`);
        walk(full);
      } else {
        paths.add(rel);
        // Not this file: its own examples of what is missing would be found.
        if (/\.(ts|ya?ml)$/.test(name) && full !== import.meta.filename) texts.push(readFileSync(full, 'utf8'));
      }
    }
  };
  walk(root);
  const code = texts.join('\n');
  return { paths, firstLine: (p) => readFileSync(join(root, p), 'utf8').split('\n', 1)[0] ?? '', words: new Set(code.match(/[A-Za-z_$][\w$]*/g)), code };
}

/** The backticked spans of a markdown text, outside fenced blocks (the diagrams). */
export function backticked(markdown: string): string[] {
  return [...markdown.replace(/^```[\s\S]*?^```/gm, '').matchAll(/`([^`\n]+)`/g)].map((m) => m[1] ?? '');
}

const PATH = /^[\w.-]+(\/[\w.-]+)*\/?$/;
const IDENTIFIER = /^[A-Za-z_$][\w$]*(\.[A-Za-z_$][\w$]*)*(\(.*\))?$/;
const FLAG = /^--[a-z][\w-]*$/;

/** What in `markdown` the repository does not have, one line each. */
export function missing(markdown: string, repo: Repo): string[] {
  const problems: string[] = [];
  const topLevel = new Set([...repo.paths].filter((p) => !p.slice(0, -1).includes('/')).map((p) => p.replace(/\/$/, '')));
  for (const span of new Set(backticked(markdown))) {
    if (PATH.test(span) && (span.includes('/') || /\.(ts|ya?ml|json|md)$/.test(span))) {
      // From the root when it starts at a top-level folder; otherwise the end of some path (`rollout/`, `decide.ts`).
      const found = topLevel.has(span.split('/')[0] ?? '')
        ? (repo.paths.has(span) ? [span] : [])
        : [...repo.paths].filter((p) => p === span || p.endsWith(`/${span}`));
      if (!found.length) problems.push(`path ${span} does not exist`);
      else if (found.every((p) => !p.endsWith('/') && /generated/i.test(repo.firstLine(p)))) problems.push(`path ${span} is generated: name its source`);
    } else if (IDENTIFIER.test(span)) {
      const parts = span.replace(/\(.*\)$/, '').split('.');
      for (const part of parts) if (!repo.words.has(part)) problems.push(`identifier ${part} (in \`${span}\`) is not in the code`);
    } else if (FLAG.test(span)) {
      if (!repo.code.includes(`'${span} `) && !repo.code.includes(`'${span}'`)) problems.push(`flag ${span} is not defined in the code`);
    }
  }
  return problems;
}

const doc = readFileSync(join(root, 'docs/architecture.md'), 'utf8');
const repo = scanRepo();

describe('docs/architecture.md', () => {
  test('every backticked path, identifier and flag exists in the repository', () => {
    assert.deepEqual(missing(doc, repo), []);
  });

  test('the check finds what is not there', () => {
    const stale = 'Call `weightAfterGate` in `routing/route.ts` and `routing/gone.ts`, edit `deploy/clusterrole.yaml`, pass `--no-such-flag`, see `decide.ts` and `nowhere.ts`.\n```\n`inADiagram`\n```\n';
    assert.deepEqual(missing(stale, repo), [
      'identifier weightAfterGate (in `weightAfterGate`) is not in the code',
      'path routing/gone.ts does not exist',
      'path deploy/clusterrole.yaml is generated: name its source',
      'flag --no-such-flag is not defined in the code',
      'path nowhere.ts does not exist',
    ]);
  });

  test("the CLI's row names every command of the CLI", async () => {
    const { stdout } = await promisify(execFile)(process.execPath, [join(root, 'bin/application-operator.ts'), '--help']);
    const commands = [...(stdout.split('Commands:')[1] ?? '').matchAll(/^ {2}([a-z][\w-]*)/gm)].map((m) => m[1] ?? '').filter((c) => c !== 'help');
    assert.ok(commands.includes('run') && commands.includes('history'), stdout);
    const listed = backticked(doc).filter((s) => s.startsWith('application-operator ')).flatMap((s) => s.slice('application-operator '.length).split(/[|\s]+/));
    assert.deepEqual(commands.filter((c) => !listed.includes(c)), []);
  });
});
