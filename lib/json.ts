// JSON comparisons for objects read back from the API server.

/** Equal as JSON, whatever the order of keys (the API server stores objects with sorted keys). */
export function sameJson(a: unknown, b: unknown): boolean {
  const canonical = (v: unknown): unknown => (Array.isArray(v) ? v.map(canonical)
    : v && typeof v === 'object' ? Object.fromEntries(Object.entries(v).sort(([x], [y]) => x.localeCompare(y)).map(([k, x]) => [k, canonical(x)])) : v);
  return JSON.stringify(canonical(a)) === JSON.stringify(canonical(b));
}
