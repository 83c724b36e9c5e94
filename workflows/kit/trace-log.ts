// A workflow interceptor module, bundled in only when tracing is on (operator/main.ts): every line the workflows log
// inside a traced pass or rollout step carries that trace's id (`traceId`), as the activities' lines do.
import type { WorkflowInterceptorsFactory } from '@temporalio/workflow';
import { activeSpanContext } from './trace.ts';

export const interceptors: WorkflowInterceptorsFactory = () => ({
  outbound: [{
    getLogAttributes(input, next) {
      const traceId = activeSpanContext()?.traceId;
      return next(traceId ? { ...input, traceId } : input);
    },
  }],
});
