// What every phase of one benchmark invocation shares: its options, the stack, the clients and where logs go.
import type { Client } from '@temporalio/client';
import type { Kube } from '../kube/client.ts';
import type { StackInfo } from '../stack/stack.ts';
import type { ApiServer } from './apiserver.ts';
import type { LoadSampler } from './load.ts';
import type { Options } from './options.ts';

export interface Ctx {
  opts: Options;
  info: StackInfo;
  api: ApiServer;
  kube: Kube;
  temporal: Client;
  /** Fingerprint of the operator's sources when the workflow bundle was built. */
  bundleSource: string;
  /** Operator logs and probe files, kept with the results. */
  logDir: string;
  /** Stops what a phase started (operator processes); run on Ctrl-C before the stack is torn down. */
  cleanups: (() => Promise<void>)[];
  /** The machine's load, sampled through the whole benchmark. */
  load: LoadSampler;
  /** The operator processes running now, by pid, so the load sampler counts their CPU as ours. */
  operatorPids: [string, number | undefined][];
}
