// Kubernetes resource quantities ("500m", "1Gi", "1e3"), parsed the way apimachinery's
// resource.ParseQuantity parses them, so that the zod model accepts exactly what the CRD's
// CEL isQuantity()/quantity() accept and orders them the same way.

const DECIMAL_SUFFIXES: ReadonlyMap<string, number> = new Map([['n', -9], ['u', -6], ['m', -3], ['', 0], ['k', 3], ['M', 6], ['G', 9], ['T', 12], ['P', 15], ['E', 18]]);
const BINARY_SUFFIXES: ReadonlyMap<string, number> = new Map([['Ki', 10], ['Mi', 20], ['Gi', 30], ['Ti', 40], ['Pi', 50], ['Ei', 60]]);
const SUFFIX_CHARS = 'eEinumkKMGTP';
const DIGITS = '0123456789';
// Exponents this large only appear in hostile input; clamping keeps the BigInt arithmetic bounded
// while keeping the sign and the order relative to any realistic quantity.
const MAX_EXPONENT = 100;
const NANO = 10n ** 9n;
const INT64_MIN = -(2n ** 63n);
const INT64_MAX = 2n ** 63n - 1n;

interface Lexed {
  negative: boolean;
  integer: string;
  fraction: string;
  suffix: string;
}

// Mirrors parseQuantityString, including its leniencies: a bare suffix ("M") or sign ("+") is zero.
function lex(s: string): Lexed | null {
  let pos = 0;
  let negative = false;
  if (s.startsWith('-') || s.startsWith('+')) {
    negative = s.startsWith('-');
    pos++;
  }
  const digitsFrom = (from: number): number => {
    let i = from;
    while (i < s.length && DIGITS.includes(s.charAt(i))) i++;
    return i;
  };
  let end = digitsFrom(pos);
  const integer = s.slice(pos, end);
  pos = end;
  let fraction = '';
  if (s.charAt(pos) === '.') {
    end = digitsFrom(pos + 1);
    fraction = s.slice(pos + 1, end);
    pos = end;
  }
  const suffixStart = pos;
  while (pos < s.length && SUFFIX_CHARS.includes(s.charAt(pos))) pos++;
  if (s.charAt(pos) === '-' || s.charAt(pos) === '+') pos++;
  if (digitsFrom(pos) !== s.length) return null;
  return { negative, integer, fraction, suffix: s.slice(suffixStart) };
}

function exponentOf(suffix: string): { base: 2n | 10n; exponent: number } | null {
  const decimal = DECIMAL_SUFFIXES.get(suffix);
  if (decimal !== undefined) return { base: 10n, exponent: decimal };
  const binary = BINARY_SUFFIXES.get(suffix);
  if (binary !== undefined) return { base: 2n, exponent: binary };
  if (suffix.length < 2 || (suffix[0] !== 'e' && suffix[0] !== 'E') || !/^[+-]?[0-9]+$/.test(suffix.slice(1))) return null;
  // strconv.ParseInt(…, 64) then an int32 conversion, as in suffixHandler.interpret.
  const parsed = BigInt(suffix.slice(1));
  if (parsed < INT64_MIN || parsed > INT64_MAX) return null;
  const exponent = Number(BigInt.asIntN(32, parsed));
  return { base: 10n, exponent: Math.max(-MAX_EXPONENT, Math.min(MAX_EXPONENT, exponent)) };
}

/**
 * Parses a quantity into nano-units (1 = 1e-9), rounded away from zero as Kubernetes rounds
 * sub-nano values; null when the string is not a quantity. Numbers are taken as integers.
 */
export function parseQuantity(value: string | number): bigint | null {
  if (typeof value === 'number') return Number.isSafeInteger(value) ? BigInt(value) * NANO : null;
  if (value === '') return null;
  const lexed = lex(value);
  if (lexed === null) return null;
  const scale = exponentOf(lexed.suffix);
  if (scale === null) return null;
  let numerator = BigInt((lexed.integer + lexed.fraction) || '0') * NANO;
  let denominator = 10n ** BigInt(lexed.fraction.length);
  if (scale.exponent >= 0) numerator *= scale.base ** BigInt(scale.exponent);
  else denominator *= scale.base ** BigInt(-scale.exponent);
  const nanos = (numerator + denominator - 1n) / denominator;
  return lexed.negative ? -nanos : nanos;
}

/** True when the string (or integer) is a Kubernetes quantity, like CEL's isQuantity(). */
export function isQuantity(value: string | number): boolean {
  return parseQuantity(value) !== null;
}
