// The whole desired state of an Application in one pure call: what to apply, in dependency order, and which
// children must not exist, so the reconciler can apply and prune in one pass. The table of children is in
// children.ts.

import { rolloutRouterOf, type Application } from '../api/application.ts';
import { children, childRef, type Child, type ChildObject, type ChildRef, type RenderOptions } from './children.ts';
import { namespaceOf } from './meta.ts';

export type { ChildObject, ChildRef, RenderOptions } from './children.ts';

export interface DesiredChild {
  child: Child;
  object: ChildObject;
}

export interface AbsentChild {
  child: Child;
  ref: ChildRef;
}

export interface DesiredChildren {
  /** Objects to server-side apply, in the table's order. */
  apply: DesiredChild[];
  /** Children that must not exist. Delete each only when its controller owner reference is this Application. */
  absent: AbsentChild[];
}

/**
 * Every child the Application should have, and the ones it must not have. A rollout in flight (a canary route)
 * adds the canary Deployment, the canary subset and the weighted route.
 */
export function renderChildren(app: Application, options: RenderOptions = { canary: null }): DesiredChildren {
  if (options.canary !== null && rolloutRouterOf(app.spec) === undefined) {
    throw new Error(`Application ${app.metadata.name} cannot route a canary: it has no router (serviceMesh.enabled or traffic.router)`);
  }
  const namespace = namespaceOf(app);
  const apply: DesiredChild[] = [];
  const absent: AbsentChild[] = [];
  for (const child of children) {
    const object = child.render(app, options);
    if (object) apply.push({ child, object });
    else if (child.pruned) absent.push({ child, ref: childRef(child, namespace, app.metadata.name) });
  }
  return { apply, absent };
}
