// Publishing an entity's status only when it changed: what it last wrote, remembered (and carried across runs),
// so a write that would say nothing new is skipped, and a mere refresh is told apart from news.

/** What was last written, as text. */
export class WrittenStatus {
  private last: string;

  constructor(carried = '') {
    this.last = carried;
  }

  /** True when `status` differs from what was last written. */
  isNew(status: unknown): boolean {
    return JSON.stringify(status) !== this.last;
  }

  /** `status` was written (call only once the write succeeded, so a failed one is tried again). */
  wrote(status: unknown): void {
    this.last = JSON.stringify(status);
  }

  /** What a new run carries. */
  get carried(): string {
    return this.last;
  }
}
