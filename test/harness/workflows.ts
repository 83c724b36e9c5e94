// One bundle per test run: the operator's workflows plus test-only ones.
export * from '../workflows/sleeper.ts';
