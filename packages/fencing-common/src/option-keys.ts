import { InvalidArgumentError } from './errors.js';

// @dlock/core has the same check; it is duplicated on purpose, because the gates must not depend on core.

/**
 * Refuses an options object holding a key the call does not read. In JavaScript a misspelt option
 * (`lockTimeoutMS`, `tabel`) would otherwise be ignored and the call would run with the default: no lock wait
 * bound, or marks kept in another table. The error names the key and, when one is close, the key probably meant.
 *
 * `undefined` passes (the caller's defaults apply); `null`, arrays and non-objects are refused.
 *
 * @example
 * ```ts
 * rejectUnknownKeys({ lockTimeoutMS: 50 }, 'options', ['isolationLevel', 'lockTimeoutMs']);
 * // throws InvalidArgumentError: options.lockTimeoutMS is not an option (did you mean "lockTimeoutMs"?); …
 * ```
 */
export function rejectUnknownKeys(options: unknown, field: string, known: readonly string[]): void {
  assertKeyList(known, 'known');
  if (options === undefined) return;
  if (typeof options !== 'object' || options === null || Array.isArray(options)) {
    throw new InvalidArgumentError(field, `must be an object (got ${describeOptions(options)})`);
  }
  for (const key of Object.keys(options)) {
    if (known.includes(key)) continue;
    // A key far longer than any option name is no typo of one; it is cut short so a megabyte key neither gets
    // compared letter by letter nor copied into the error.
    const shown = key.length > MAX_SHOWN_KEY ? `${key.slice(0, MAX_SHOWN_KEY)}…` : key;
    const meant = key.length > MAX_SHOWN_KEY ? undefined : closestKey(key, known);
    const hint = meant === undefined ? '' : ` (did you mean "${meant}"?)`;
    throw new InvalidArgumentError(
      `${typeof field === 'string' ? field : 'options'}.${shown}`,
      `is not an option${hint}; known options: ${known.join(', ')}`,
    );
  }
}

/** Longest key quoted whole in an error; option names are far shorter. */
const MAX_SHOWN_KEY = 64;

function assertKeyList(known: unknown, field: string): asserts known is readonly string[] {
  if (!Array.isArray(known) || !known.every((key) => typeof key === 'string')) {
    throw new InvalidArgumentError(field, 'must be an array of option names');
  }
}

/**
 * The known key that `key` most likely stands for, or `undefined` when none is close. Closest first: the same
 * letters in another case, then one name containing the other (`timeout` in `lockTimeoutMs`; the typed key needs
 * at least 4 characters so `a` does not match everything), then one edit apart, then two. Ties go to the key
 * listed first.
 */
export function closestKey(key: string, known: readonly string[]): string | undefined {
  if (typeof key !== 'string') throw new InvalidArgumentError('key', 'must be a string');
  assertKeyList(known, 'known');
  const typed = key.toLowerCase();
  let best: string | undefined;
  let bestRank = 4; // ranks 0..3 are close enough to suggest
  for (const candidate of known) {
    const rank = closeness(typed, candidate.toLowerCase());
    if (rank < bestRank) {
      bestRank = rank;
      best = candidate;
    }
  }
  return best;
}

/** 0 same letters, 1 containment, 2 or 3 for one or two edits, 4 for anything further. */
function closeness(typed: string, candidate: string): number {
  if (typed === candidate) return 0;
  if (typed.length >= 4 && (candidate.includes(typed) || typed.includes(candidate))) return 1;
  return 1 + Math.min(editDistanceUpTo2(typed, candidate), 3);
}

/**
 * Levenshtein distance when it is at most 2, otherwise 3. Lengths more than 2 apart cannot be within 2 edits, so
 * an overlong key is dismissed before any table is built and the table stays option-name sized.
 */
function editDistanceUpTo2(a: string, b: string): number {
  if (Math.abs(a.length - b.length) > 2) return 3;
  let above: number[] = [];
  for (let j = 0; j <= b.length; j++) above.push(j);
  for (let i = 1; i <= a.length; i++) {
    const row: number[] = [i];
    for (let j = 1; j <= b.length; j++) {
      const replace = (above[j - 1] ?? 0) + (a[i - 1] === b[j - 1] ? 0 : 1);
      row.push(Math.min((above[j] ?? 0) + 1, (row[j - 1] ?? 0) + 1, replace));
    }
    above = row;
  }
  return Math.min(above[b.length] ?? 3, 3);
}

function describeOptions(value: unknown): string {
  if (value === null) return 'null';
  if (Array.isArray(value)) return 'an array';
  return typeof value;
}
