// @ts-check
import js from '@eslint/js';
import tseslint from 'typescript-eslint';

const nodeBuiltins = ['node:*', 'fs', 'path', 'os', 'child_process', 'http', 'https', 'net', 'crypto', 'process', 'timers', 'events', 'stream', 'util', 'url'];

export default tseslint.config(
  { ignores: ['node_modules/', 'results/', '.state/'] },
  js.configs.recommended,
  ...tseslint.configs.recommendedTypeChecked,
  {
    languageOptions: {
      parserOptions: { projectService: true, tsconfigRootDir: import.meta.dirname },
    },
    rules: {
      '@typescript-eslint/no-floating-promises': ['error', {
        allowForKnownSafeCalls: [{ from: 'package', package: 'node:test', name: ['describe', 'it', 'test', 'suite', 'before', 'after', 'beforeEach', 'afterEach'] }],
      }],
      '@typescript-eslint/no-unused-vars': ['error', { argsIgnorePattern: '^_', varsIgnorePattern: '^_' }],
      '@typescript-eslint/restrict-template-expressions': ['error', { allowNumber: true, allowBoolean: true }],
    },
  },
  {
    // Workflow code is replayed by Temporal's sandbox: no I/O, no Node built-ins, no Kubernetes client,
    // and activities only as types.
    files: ['workflows/**/*.ts'],
    rules: {
      'no-restricted-imports': ['error', {
        paths: nodeBuiltins.filter((p) => !p.includes('*')).map((name) => ({ name, message: 'workflow code must not do I/O' })),
        patterns: [
          { group: ['node:*'], message: 'workflow code must not import Node built-ins' },
          { group: ['@kubernetes/*'], message: 'workflow code must not talk to Kubernetes; use an activity' },
          { group: ['**/activities/*', '**/activities/**'], allowTypeImports: true, message: 'import activities with `import type`' },
        ],
      }],
    },
  },
  {
    // Tests poke at raw JSON from the API server; typing every field would hide what is asserted.
    files: ['test/**/*.ts', 'testkit/**/*.ts', 'bench/**/*.ts', 'chaos/**/*.ts'],
    rules: {
      '@typescript-eslint/no-explicit-any': 'off',
      '@typescript-eslint/no-unsafe-assignment': 'off',
      '@typescript-eslint/no-unsafe-member-access': 'off',
      '@typescript-eslint/no-unsafe-call': 'off',
      '@typescript-eslint/no-unsafe-return': 'off',
      '@typescript-eslint/no-unsafe-argument': 'off',
    },
  },
  {
    files: ['**/*.js'],
    ...tseslint.configs.disableTypeChecked,
  },
);
