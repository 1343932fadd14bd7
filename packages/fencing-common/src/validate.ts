import { InvalidArgumentError } from './errors.js';
import type { Fence } from './gate-driver.js';

/** What callers may pass as a token. Whatever the form, it is stored and compared as a 64-bit signed integer. */
export type FencingTokenInput = bigint | number | string;

/** The largest token a BIGINT column holds (2^63 - 1). */
export const MAX_FENCING_TOKEN = 9_223_372_036_854_775_807n;

/** Longest accepted resource name, in UTF-8 bytes. Every dialect's key column is sized for it. */
export const MAX_RESOURCE_BYTES = 1024;

// Digits only: no sign, spaces, exponent, separators or hex, so "1e3", " 7" and "0x10" cannot slip through
// BigInt()'s laxer parsing. Leading zeros are allowed because ZooKeeper sequence names are zero-padded and decimal
// leaves no ambiguity; the length cap keeps BigInt() from parsing megabytes of digits.
const DECIMAL = /^[0-9]{1,64}$/;

/**
 * Turns a token from any lock backend into a `bigint` in `1 ..= 2^63 - 1`, or throws {@link InvalidArgumentError}.
 *
 * Accepts a `bigint`, a `number` that is a positive safe integer (larger numbers have already lost precision), or
 * a string of ASCII decimal digits (etcd and others hand out int64 values as strings).
 *
 * @example
 * ```ts
 * parseFencingToken('0000000042'); // 42n
 * parseFencingToken(-1);           // throws InvalidArgumentError (field 'token')
 * ```
 */
export function parseFencingToken(token: unknown, field = 'token'): bigint {
  let value: bigint;
  if (typeof token === 'bigint') {
    value = token;
  } else if (typeof token === 'number') {
    if (!Number.isSafeInteger(token)) {
      throw new InvalidArgumentError(field, `must be a safe integer when given as a number (got ${token})`);
    }
    value = BigInt(token);
  } else if (typeof token === 'string') {
    if (!DECIMAL.test(token)) {
      throw new InvalidArgumentError(field, 'must be a string of 1 to 64 decimal digits');
    }
    value = BigInt(token);
  } else {
    throw new InvalidArgumentError(
      field,
      `must be a bigint, number or decimal string (got ${describeValue(token)})`,
    );
  }
  if (value < 1n || value > MAX_FENCING_TOKEN) {
    throw new InvalidArgumentError(field, `must be in 1..${MAX_FENCING_TOKEN} (got ${value})`);
  }
  return value;
}

/**
 * Checks a resource name: a non-empty, well-formed string of at most {@link MAX_RESOURCE_BYTES} UTF-8 bytes with
 * no NUL. Lone surrogates are refused because they cannot be encoded: drivers would substitute U+FFFD and two
 * different names would share one fence row. PostgreSQL text cannot hold NUL.
 */
export function assertResource(resource: unknown, field = 'resource'): string {
  if (typeof resource !== 'string') {
    throw new InvalidArgumentError(field, `must be a string (got ${describeValue(resource)})`);
  }
  if (resource.length === 0) throw new InvalidArgumentError(field, 'must not be empty');
  // Every UTF-16 unit encodes to at least one UTF-8 byte, so a name with more units than the byte limit is too long
  // whatever it holds: refused from its length alone, a 10 MB name is not scanned or encoded first.
  if (resource.length > MAX_RESOURCE_BYTES) {
    throw new InvalidArgumentError(
      field,
      `must be at most ${MAX_RESOURCE_BYTES} UTF-8 bytes (got ${resource.length} UTF-16 code units)`,
    );
  }
  if (resource.includes('\u0000')) throw new InvalidArgumentError(field, 'must not contain NUL characters');
  const bytes = utf8Length(resource);
  if (bytes < 0) throw new InvalidArgumentError(field, 'must not contain lone surrogates');
  if (bytes > MAX_RESOURCE_BYTES) {
    throw new InvalidArgumentError(field, `must be at most ${MAX_RESOURCE_BYTES} UTF-8 bytes (got ${bytes})`);
  }
  return resource;
}

/** Checks a resource and a token together, in that order, as every gate call takes them. */
export function parseFence(resource: unknown, token: unknown): Fence {
  return { resource: assertResource(resource), token: parseFencingToken(token) };
}

/** Checks that a gate was given a callback to run; throws {@link InvalidArgumentError} otherwise. */
export function assertCallback(fn: unknown, field = 'fn'): void {
  if (typeof fn !== 'function') throw new InvalidArgumentError(field, 'must be a function');
}

// A conservative identifier grammar that is valid unquoted and quoted on PostgreSQL, MySQL and SQLite, and fits
// PostgreSQL's 63-byte limit. Names are quoted as well, so this is defence in depth, not the only barrier.
const IDENTIFIER = /^[A-Za-z_][A-Za-z0-9_]{0,62}$/;

/** Checks a table or schema name against `[A-Za-z_][A-Za-z0-9_]{0,62}`; throws {@link InvalidArgumentError}. */
export function assertIdentifier(name: unknown, field: string): string {
  if (typeof name !== 'string' || !IDENTIFIER.test(name)) {
    throw new InvalidArgumentError(field, 'must match [A-Za-z_][A-Za-z0-9_]{0,62}');
  }
  return name;
}

/** UTF-8 length of `s`, or -1 if it holds a lone surrogate (String#isWellFormed is ES2024, beyond our lib). */
function utf8Length(s: string): number {
  let bytes = 0;
  for (let i = 0; i < s.length; i++) {
    const unit = s.charCodeAt(i);
    if (unit < 0x80) bytes += 1;
    else if (unit < 0x800) bytes += 2;
    else if (unit >= 0xd800 && unit <= 0xdbff) {
      const next = s.charCodeAt(i + 1);
      if (!(next >= 0xdc00 && next <= 0xdfff)) return -1;
      bytes += 4;
      i++;
    } else if (unit >= 0xdc00 && unit <= 0xdfff) return -1;
    else bytes += 3;
  }
  return bytes;
}

/** A short, safe description of a wrong value for an error message; never throws, whatever `value` is. */
export function describeValue(value: unknown): string {
  if (value === null) return 'null';
  if (Array.isArray(value)) return 'an array';
  if (typeof value === 'object') {
    try {
      // Data properties only: a getter could throw or run caller code. A Proxy's traps can still throw, hence try.
      const prototype: unknown = Object.getPrototypeOf(value);
      const ctor =
        prototype === null ? undefined : Object.getOwnPropertyDescriptor(prototype, 'constructor')?.value;
      const name =
        typeof ctor === 'function' ? Object.getOwnPropertyDescriptor(ctor, 'name')?.value : undefined;
      return typeof name === 'string' && name.length > 0 && name.length <= 64 ? name : 'object';
    } catch {
      return 'object';
    }
  }
  return typeof value;
}
