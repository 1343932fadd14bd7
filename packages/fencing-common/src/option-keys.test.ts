import { describe, expect, it } from 'vitest';
import { InvalidArgumentError } from './errors.js';
import { closestKey, rejectUnknownKeys } from './option-keys.js';

const RUN_KEYS = ['isolationLevel', 'lockTimeoutMs'] as const;
const TABLE_KEYS = ['table', 'schema', 'dialect'] as const;

function refusal(options: unknown, known: readonly string[], field = 'options'): InvalidArgumentError {
  try {
    rejectUnknownKeys(options, field, known);
  } catch (error) {
    expect(error).toBeInstanceOf(InvalidArgumentError);
    return error as InvalidArgumentError;
  }
  throw new Error(`${JSON.stringify(options)} was accepted`);
}

describe('rejectUnknownKeys', () => {
  it('accepts known keys, an empty object and undefined', () => {
    expect(() =>
      rejectUnknownKeys({ isolationLevel: 'serializable', lockTimeoutMs: 5 }, 'o', RUN_KEYS),
    ).not.toThrow();
    expect(() => rejectUnknownKeys({ lockTimeoutMs: undefined }, 'o', RUN_KEYS)).not.toThrow();
    expect(() => rejectUnknownKeys({}, 'o', RUN_KEYS)).not.toThrow();
    expect(() => rejectUnknownKeys(undefined, 'o', RUN_KEYS)).not.toThrow();
  });

  it('names the key, the key meant and every known key, with the INVALID_ARGUMENT code', () => {
    const error = refusal({ isolationLevel: 'serializable', lockTimeoutMS: 50 }, RUN_KEYS);
    expect(error.code).toBe('INVALID_ARGUMENT');
    expect(error.retryable).toBe(false);
    expect(error.field).toBe('options.lockTimeoutMS');
    expect(error.message).toBe(
      'options.lockTimeoutMS is not an option (did you mean "lockTimeoutMs"?); known options: isolationLevel, lockTimeoutMs',
    );
  });

  it('refuses an unknown key even when its value is undefined', () => {
    expect(refusal({ tabel: undefined }, TABLE_KEYS).field).toBe('options.tabel');
  });

  it('gives no suggestion when nothing is close', () => {
    const error = refusal({ retries: 3 }, RUN_KEYS, 'runOptions');
    expect(error.field).toBe('runOptions.retries');
    expect(error.message).toBe(
      'runOptions.retries is not an option; known options: isolationLevel, lockTimeoutMs',
    );
  });

  it.each([
    ['null', null, 'null'],
    ['a string', 'serializable', 'string'],
    ['a number', 50, 'number'],
    ['an array', [], 'an array'],
    ['a function', () => undefined, 'function'],
  ])('refuses %s in place of the object', (_label, options, got) => {
    const error = refusal(options, RUN_KEYS);
    expect(error.field).toBe('options');
    expect(error.message).toBe(`options must be an object (got ${got})`);
  });

  it('checks own keys only and ignores symbols', () => {
    const inherited = Object.create({ tabel: 'x' }) as object;
    expect(() => rejectUnknownKeys(inherited, 'o', TABLE_KEYS)).not.toThrow();
    expect(() => rejectUnknownKeys({ [Symbol('tag')]: 1, table: 't' }, 'o', TABLE_KEYS)).not.toThrow();
  });

  it('treats keys named like Object.prototype members as unknown', () => {
    for (const key of ['__proto__', 'constructor', 'toString', 'hasOwnProperty']) {
      expect(refusal(JSON.parse(`{"${key}": 1}`), TABLE_KEYS).field).toBe(`options.${key}`);
    }
  });
});

describe('closestKey', () => {
  it.each([
    ['the same letters in another case', 'LOCKTIMEOUTMS', RUN_KEYS, 'lockTimeoutMs'],
    ['a key the typed one is part of', 'prefix', ['ttlMs', 'keyPrefix'], 'keyPrefix'],
    ['a key the typed one is part of', 'isolation', RUN_KEYS, 'isolationLevel'],
    ['a key inside the typed one', 'fenceTable', TABLE_KEYS, 'table'],
    ['one edit away', 'schena', TABLE_KEYS, 'schema'],
    ['two edits away (swapped letters)', 'tabel', TABLE_KEYS, 'table'],
    ['two edits away', 'dialet_', TABLE_KEYS, 'dialect'],
  ])('suggests %s: %s', (_label, typed, known, expected) => {
    expect(closestKey(typed, known)).toBe(expected);
  });

  it.each([
    ['three edits away', 'tb', TABLE_KEYS],
    ['a key under 4 characters contained in a known one', 'abc', ['abcdefgh']],
    ['nothing alike', 'retries', RUN_KEYS],
    ['an empty key', '', RUN_KEYS],
    ['an empty list', 'table', []],
  ])('suggests nothing for %s', (_label, typed, known) => {
    expect(closestKey(typed, known)).toBeUndefined();
  });

  it('prefers a case-only difference, then containment, then one edit, then two', () => {
    expect(closestKey('Table', ['tables', 'table'])).toBe('table');
    expect(closestKey('time', ['tie', 'timeout'])).toBe('timeout');
    expect(closestKey('shema', ['schemas', 'schema'])).toBe('schema');
  });

  it('breaks ties by the order of the known keys', () => {
    expect(closestKey('ab', ['ax', 'ay'])).toBe('ax');
    expect(closestKey('ab', ['ay', 'ax'])).toBe('ay');
  });

  it('answers at once for a very long key', () => {
    const long = 'x'.repeat(1_000_000);
    expect(closestKey(long, TABLE_KEYS)).toBeUndefined();
    expect(closestKey(`${long}table`, TABLE_KEYS)).toBe('table');
  });
});
