import { InvalidArgumentError, textOf } from './errors.js';

/**
 * Refuses option keys nobody reads. In JavaScript a misspelt option (`waitMS`, `prefix` for `keyPrefix`) is
 * otherwise silently ignored and the call runs with the default: no wait, another key space. The error names the
 * key and, when one is close, the key that was probably meant.
 */
export function rejectUnknownKeys(options: object, field: string, known: readonly string[]): void {
  // for…in rather than Object.keys: no array on the hot path (this runs on every acquire).
  for (const key in options) {
    if (!Object.hasOwn(options, key) || known.includes(key)) continue;
    const meant = closestKey(key, known);
    throw new InvalidArgumentError(
      `${field}.${key}`,
      `is not an option${meant === undefined ? '' : ` (did you mean "${meant}"?)`}; known options: ${known.join(', ')}`,
    );
  }
}

/**
 * The known key a typo most likely stands for: same letters in another case, one contained in the other
 * (`prefix` → `keyPrefix`), or at most two edits apart. Undefined when nothing is close enough to suggest.
 */
export function closestKey(key: string, known: readonly string[]): string | undefined {
  const lower = key.toLowerCase();
  let best: string | undefined;
  let bestScore = Number.POSITIVE_INFINITY;
  for (const candidate of known) {
    const c = candidate.toLowerCase();
    let score: number;
    if (c === lower) score = 0;
    else if (lower.length >= 4 && (c.includes(lower) || lower.includes(c))) score = 1;
    else score = 1 + editDistance(lower, c);
    if (score < bestScore) {
      bestScore = score;
      best = candidate;
    }
  }
  return bestScore <= 3 ? best : undefined;
}

/** Levenshtein distance; option names are short, so the quadratic table is a few hundred cells at most. */
function editDistance(a: string, b: string): number {
  let previous = Array.from({ length: b.length + 1 }, (_, j) => j);
  for (let i = 1; i <= a.length; i++) {
    const row = [i];
    for (let j = 1; j <= b.length; j++) {
      const substitution = (previous[j - 1] ?? 0) + (a[i - 1] === b[j - 1] ? 0 : 1);
      row.push(Math.min((previous[j] ?? 0) + 1, (row[j - 1] ?? 0) + 1, substitution));
    }
    previous = row;
  }
  return previous[b.length] ?? 0;
}

/**
 * What a public call throws when the options it was given threw while being read (a Proxy trap, a getter, a revoked
 * Proxy): the caller's own mistake, so it gets the typed error any other bad option gets, never the raw error from
 * inside the caller's object. Errors the checks themselves throw pass through.
 */
export function unreadableOptions(error: unknown, field: string): InvalidArgumentError {
  if (error instanceof InvalidArgumentError) return error;
  return new InvalidArgumentError(field, `could not be read: ${textOf(error)}`);
}
