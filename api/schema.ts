// Building blocks of the API models (Application, Release): zod schemas that check what the CRDs' schemas and CEL
// rules check, worded like the API server ("Required value", "Unsupported value", "should be less than or equal
// to"), so a status condition reads the same whichever of the two caught a problem.
import { z } from 'zod';

export const DURATION = /^([0-9]+(ms|s|m|h))+$/;
const DURATION_TOKEN = /([0-9]+)(ms|s|m|h)/g;
export const DNS1123_LABEL = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?$/;
export const DNS1035_LABEL = /^[a-z]([-a-z0-9]*[a-z0-9])?$/;
export const DNS1123_SUBDOMAIN = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$/;
export const LABEL_VALUE = /^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$/;
// Go's unicode.IsSpace, which the kubelet-side image check uses (the CEL rule spells it [[:space:]\x{85}\p{Z}]):
// a no-break space passed an ASCII-only rule, then every pod create failed.
export const WHITESPACE = /[\t\n\v\f\r \u0085\p{Z}]/u;
const MS_PER_UNIT: Readonly<Record<string, number>> = { ms: 1, s: 1000, m: 60_000, h: 3_600_000 };
// Go's time.Duration (what CEL's duration() parses into) is int64 nanoseconds.
const MAX_DURATION_MS = 9_223_372_036_854;
// Kubernetes does not check image references; a malformed digest would only fail at every pull.
const DIGEST = /^[^@]+@(sha256:[0-9a-f]{64}|sha512:[0-9a-f]{128})$/;

/** A digest, when the image has one, that a registry could serve. */
export const digestOk = (s: string) => !s.includes('@') || DIGEST.test(s);

/** Milliseconds in a duration string such as `500ms`, `30s` or `1h30m`; throws RangeError when it is not one. */
export function parseDuration(s: string): number {
  if (!DURATION.test(s)) throw new RangeError(`not a duration (units ms, s, m, h): ${JSON.stringify(s)}`);
  let ms = 0;
  for (const [, amount, unit] of s.matchAll(DURATION_TOKEN)) {
    ms += Number(amount) * (MS_PER_UNIT[unit ?? ''] ?? 0);
  }
  if (ms > MAX_DURATION_MS) throw new RangeError(`duration out of range: ${JSON.stringify(s)}`);
  return ms;
}

function isDuration(s: string, minMs: number): boolean {
  try {
    return parseDuration(s) >= minMs;
  } catch {
    return false;
  }
}

export function typeError(type: string) {
  return (issue: { input?: unknown }): string => (issue.input === undefined ? 'Required value' : `must be of type ${type}`);
}

const tooLong = (max: number): string => `Too long: may not be more than ${max} bytes`;
const tooMany = (max: number) => (issue: { input?: unknown }): string =>
  `Too many: ${Array.isArray(issue.input) ? issue.input.length : '?'}: must have at most ${max} items`;

export function str(maxLength?: number) {
  const s = z.string({ error: typeError('string') });
  return maxLength === undefined ? s : s.max(maxLength, tooLong(maxLength));
}

export function bool() {
  return z.boolean({ error: typeError('boolean') });
}

export function int(min?: number, max?: number) {
  let n = z.int({ error: typeError('integer') });
  if (min !== undefined) n = n.min(min, `should be greater than or equal to ${min}`);
  if (max !== undefined) n = n.max(max, `should be less than or equal to ${max}`);
  return n;
}

export function oneOf<const T extends readonly [string, ...string[]]>(values: T) {
  const supported = values.map((v) => JSON.stringify(v)).join(', ');
  return z.enum(values, {
    error: (issue) => (issue.input === undefined ? 'Required value' : `Unsupported value: ${JSON.stringify(issue.input)}: supported values: ${supported}`),
  });
}

export function list<T extends z.ZodType>(item: T, maxItems: number) {
  return z.array(item, { error: typeError('array') }).max(maxItems, { error: tooMany(maxItems) });
}

// x-kubernetes-list-type: map — one entry per key, reported on the later duplicate.
export function uniqueBy<T>(key: keyof T & string) {
  return (items: T[], ctx: z.RefinementCtx<T[]>): void => {
    const seen = new Set<unknown>();
    items.forEach((item, index) => {
      const value = item[key];
      if (seen.has(value)) {
        ctx.addIssue({ code: 'custom', path: [index], message: `Duplicate value: ${JSON.stringify({ [key]: value })}` });
      }
      seen.add(value);
    });
  };
}

export function intOrString(maxLength: number) {
  return z.union([z.int(), str(maxLength)], { error: typeError('integer or string') });
}

/**
 * A duration of at least minMs (none: any, zero included) that fits Go's time.Duration, as the CRD's rules check it
 * (their duration() refuses a longer one): a pause of 99999999h would pass a pattern alone and then fail every pass.
 */
export function duration(message: string, minMs: number | null) {
  return str(32).refine((s) => isDuration(s, minMs ?? 0), message);
}

/** A zod issue's path as the API server writes field paths (a.b[0].c). */
export function formatPath(path: readonly PropertyKey[]): string {
  return path.map((p, i) => (typeof p === 'number' ? `[${p}]` : `${i === 0 ? '' : '.'}${String(p)}`)).join('');
}

/** Every problem of a failed parse, by field path, in one message. */
export function issuesMessage(error: z.ZodError): string {
  return error.issues.map((issue) => `${formatPath(issue.path)}: ${issue.message}`).join('; ');
}
