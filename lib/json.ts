// JSON comparisons for objects read back from the API server.

const canonical = (v: unknown): unknown => (Array.isArray(v) ? v.map(canonical)
  : v && typeof v === 'object' ? Object.fromEntries(Object.entries(v).sort(([x], [y]) => x.localeCompare(y)).map(([k, x]) => [k, canonical(x)])) : v);

/** Equal as JSON, whatever the order of keys (the API server stores objects with sorted keys). */
export function sameJson(a: unknown, b: unknown): boolean {
  return JSON.stringify(canonical(a)) === JSON.stringify(canonical(b));
}

/**
 * A short fingerprint of a value as JSON, whatever the order of keys (FNV-1a, 32 bits, 8 hex digits): to tell whether
 * something changed, not to guard against anyone. Pure, so workflows can use it too.
 */
export function fingerprint(value: unknown): string {
  const text = JSON.stringify(canonical(value)) ?? 'undefined';
  let h = 0x811c9dc5;
  for (let i = 0; i < text.length; i++) {
    h ^= text.charCodeAt(i);
    h = Math.imul(h, 0x01000193) >>> 0;
  }
  return h.toString(16).padStart(8, '0');
}
