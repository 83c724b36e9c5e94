// One bundle per test run: the operator's workflows plus test-only ones.
export * from '../../workflows/index.ts';
export * from '../workflows/sleeper.ts';
