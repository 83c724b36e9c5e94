// The setup most end-to-end test files share: a namespace of their own, an operator watching only it, and
// optionally a recorder judging every VirtualService version seen. Called inside a describe(); registers its
// before() and after() hooks there, and undoes everything after the suite, whatever failed.
import { after, before } from 'node:test';
import { closeTemporal, testNamespace } from './apps.ts';
import { startOperator, type OperatorOptions, type OperatorProcess } from './operator.ts';
import { recordRoutes } from './routes.ts';

export interface OperatorSuite {
  /** The suite's namespace. */
  readonly ns: string;
  /** The operator process (restart or stop it in a test; it is stopped after the suite). */
  readonly op: OperatorProcess;
  /** The route recorder; only with `routes: true`. */
  readonly routes: ReturnType<typeof recordRoutes>;
}

export function operatorSuite(prefix: string, opts: {
  operator?: Omit<OperatorOptions, 'namespaces'>;
  /** Record and judge every VirtualService version in the namespace. */
  routes?: boolean;
  /** Runs after the namespace exists and before the operator starts (e.g. a metrics exporter to scrape). */
  setUp?: (ns: string) => Promise<void>;
  /** Runs after the operator stopped, before the namespace goes. */
  tearDown?: () => Promise<void>;
} = {}): OperatorSuite {
  let ns: Awaited<ReturnType<typeof testNamespace>> | undefined;
  let op: OperatorProcess | undefined;
  let routes: ReturnType<typeof recordRoutes> | undefined;
  const need = <T>(x: T | undefined, what: string): T => {
    if (x === undefined) throw new Error(`operatorSuite: ${what} is not set up (used outside a test, or its before() failed)`);
    return x;
  };
  before(async () => {
    ns = await testNamespace(prefix);
    await opts.setUp?.(ns.name);
    op = await startOperator({ ...opts.operator, namespaces: [ns.name] });
    if (opts.routes) routes = recordRoutes(ns.name);
  });
  after(async () => {
    // A test that failed before stopping the recorder would otherwise keep the file running until its timeout.
    await routes?.stop();
    await op?.stop();
    await closeTemporal();
    await opts.tearDown?.();
    await ns?.cleanup();
  });
  return {
    get ns() { return need(ns, 'the namespace').name; },
    get op() { return need(op, 'the operator'); },
    get routes() { return need(routes, 'the route recorder (routes: true)'); },
  };
}
