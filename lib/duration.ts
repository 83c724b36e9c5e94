// Durations in words a person reads at a glance, in the units the API's durations are written in (ms, s, m, h).

/**
 * A duration as a status message shows it: under a minute as it is (`400 ms`, `20 s`), longer ones in hours, minutes
 * and seconds, zero parts left out, as a spec would write them (`1m30s`, `10m`, `72h`): a pause of three days reads
 * `72h`, not `259200 s`.
 */
export function formatDuration(ms: number): string {
  if (ms < 1000) return `${Math.round(ms)} ms`;
  const total = Math.round(ms / 1000);
  if (total < 60) return `${total} s`;
  const h = Math.floor(total / 3600);
  const m = Math.floor((total % 3600) / 60);
  const s = total % 60;
  return `${h ? `${h}h` : ''}${m ? `${m}m` : ''}${s ? `${s}s` : ''}`;
}
