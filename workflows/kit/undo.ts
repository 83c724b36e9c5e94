// The saga's undo stack, as data: each entry names an undo registered right after the step it undoes succeeded, so
// a new run (continue-as-new, or a rollout taken up again) can carry it; unwound last first, shielded from
// cancellation, each entry leaving the stack only once its undo succeeded.
import { CancellationScope } from '@temporalio/workflow';

export class UndoStack<K extends string> {
  private readonly entries: K[];

  constructor(carried: K[] = []) {
    this.entries = [...carried];
  }

  /** Registers an undo (once: a step taken up again does not register it twice). */
  push(kind: K): void {
    if (!this.entries.includes(kind)) this.entries.push(kind);
  }

  has(kind: K): boolean {
    return this.entries.includes(kind);
  }

  /** What is registered, oldest first: what a new run carries. */
  get carried(): K[] {
    return [...this.entries];
  }

  /** Forgets every undo (the work they would undo is now meant to stay, e.g. after a promotion). */
  clear(): void {
    this.entries.length = 0;
  }

  /** Runs every undo, last first, under a non-cancellable scope; an entry leaves the stack once `undo` returned. */
  unwind(undo: (kind: K) => Promise<void>): Promise<void> {
    return CancellationScope.nonCancellable(async () => {
      for (let kind = this.entries.at(-1); kind !== undefined; kind = this.entries.at(-1)) {
        await undo(kind);
        this.entries.pop();
      }
    });
  }
}
