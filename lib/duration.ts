// Durations in words a person reads at a glance, in the units the API's durations are written in (ms, s, m, h).

/**
 * A duration as a spec would write it: under a minute as it is (`400 ms`, `20 s`), longer ones in hours, minutes and
 * seconds, zero parts left out (`1m30s`, `10m`, `72h`): a pause of three days reads `72h`, not `259200 s`. `space`
 * goes between a number and its unit under a minute (status messages say `20 s`; history summaries `20s`).
 */
export function formatDuration(ms: number, space = ' '): string {
  if (ms < 1000) return `${Math.max(0, Math.round(ms))}${space}ms`;
  const total = Math.round(ms / 1000);
  if (total < 60) return `${total}${space}s`;
  const h = Math.floor(total / 3600);
  const m = Math.floor((total % 3600) / 60);
  const s = total % 60;
  return `${h ? `${h}h` : ''}${m ? `${m}m` : ''}${s ? `${s}s` : ''}`;
}
