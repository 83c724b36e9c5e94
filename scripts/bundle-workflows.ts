#!/usr/bin/env node
// Bundles the operator's workflow code (workflows/index.ts) into one file, so workers load it with
// --workflow-bundle / WORKFLOW_BUNDLE_PATH instead of running webpack at every start. The container image runs this
// at build time. Usage: node scripts/bundle-workflows.ts [out.js]   (default dist/workflow-bundle.js)
import { mkdir, writeFile } from 'node:fs/promises';
import { dirname, resolve } from 'node:path';
import { bundleWorkflows, workflowsIndex } from '../operator/workflow-bundle.ts';

const out = resolve(process.argv[2] ?? 'dist/workflow-bundle.js');
const code = await bundleWorkflows();
await mkdir(dirname(out), { recursive: true });
await writeFile(out, code);
console.log(`wrote ${out} (${Math.round(code.length / 1024)} KiB) from ${workflowsIndex}`);
