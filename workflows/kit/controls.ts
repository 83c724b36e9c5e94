// Control of a long-running entity (a rollout, a Release) as Temporal updates and signals with the same rules:
// an update is validated (a refusal answers with the reason and leaves nothing in the history) and answered with the
// entity's state; a signal is validated the same way, and a refused one is logged and dropped.
import type { UpdateDefinition } from '@temporalio/common';
import { log, setHandler } from '@temporalio/workflow';
import { controlActions, controlSignals, type ControlAction, type ControlRequest } from '../contract.ts';

/** What an entity offers its controls. */
export interface Controllable<S> {
  /** Throws, with the message the caller sees, when `action` cannot be taken now. */
  validate(action: ControlAction): void;
  /** Takes a validated request; returns the state after it. */
  accept(action: ControlAction, request?: ControlRequest): S;
  /** True once it has ended: a signal refused then is expected news (a promote's own last step switches the spec's
   * canary off, which the Application's workflow passes on as an abort), not a warning. */
  readonly ended?: boolean;
}

/** Wires promote, abort, pause and resume, as updates (the given definitions) and as signals, to `entity`. */
export function wireControls<S>(entity: Controllable<S>, updates: Record<ControlAction, UpdateDefinition<S, [ControlRequest]>>): void {
  for (const action of controlActions) {
    setHandler(updates[action], (r) => entity.accept(action, r), { validator: (_r: unknown) => entity.validate(action) });
    setHandler(controlSignals[action], (r) => {
      try {
        entity.validate(action);
        entity.accept(action, r);
      } catch (err) {
        const line = `ignored ${action} signal: ${(err as Error).message}`;
        if (entity.ended) log.info(line);
        else log.warn(line);
      }
    });
  }
}
