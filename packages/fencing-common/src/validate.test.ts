import { describe, expect, it } from 'vitest';
import { InvalidArgumentError } from './errors.js';
import { assertIdentifier, assertResource, MAX_FENCING_TOKEN, parseFencingToken } from './validate.js';

describe('parseFencingToken', () => {
  it.each([
    [1n, 1n],
    [MAX_FENCING_TOKEN, MAX_FENCING_TOKEN],
    [1, 1n],
    [Number.MAX_SAFE_INTEGER, 9007199254740991n],
    ['1', 1n],
    ['0000000042', 42n],
    ['9223372036854775807', MAX_FENCING_TOKEN],
  ])('accepts %s', (input, expected) => {
    expect(parseFencingToken(input)).toBe(expected);
  });

  it.each([
    ['zero bigint', 0n],
    ['negative bigint', -1n],
    ['bigint over int64', MAX_FENCING_TOKEN + 1n],
    ['zero', 0],
    ['negative number', -5],
    ['fraction', 1.5],
    ['NaN', Number.NaN],
    ['Infinity', Number.POSITIVE_INFINITY],
    ['unsafe integer', Number.MAX_SAFE_INTEGER + 1],
    ['negative zero', -0],
    ['empty string', ''],
    ['zero string', '0'],
    ['signed string', '+5'],
    ['negative string', '-5'],
    ['padded string', ' 5'],
    ['trailing newline', '5\n'],
    ['exponent string', '1e3'],
    ['hex string', '0x10'],
    ['fraction string', '1.0'],
    ['separator string', '1_000'],
    ['non-ASCII digits', '\u0661\u0662'],
    ['string over int64', '9223372036854775808'],
    ['very long string', '1'.repeat(65)],
    ['null', null],
    ['undefined', undefined],
    ['boolean', true],
    ['boxed number', Object(5)],
    ['object', { valueOf: () => 5 }],
  ])('rejects %s', (_label, input) => {
    const error = catchError(() => parseFencingToken(input));
    expect(error).toBeInstanceOf(InvalidArgumentError);
    expect(error).toMatchObject({ code: 'INVALID_ARGUMENT', field: 'token', retryable: false });
  });

  it('names the field it was given', () => {
    expect(catchError(() => parseFencingToken(0, 'options.token'))).toMatchObject({ field: 'options.token' });
  });
});

describe('assertResource', () => {
  it('accepts up to 1024 UTF-8 bytes, counting multi-byte characters', () => {
    expect(assertResource('a'.repeat(1024))).toHaveLength(1024);
    expect(assertResource('\u00e9'.repeat(512))).toHaveLength(512); // 2 bytes each
    expect(assertResource('\u{1F512}'.repeat(256))).toHaveLength(512); // 4 bytes each, 2 UTF-16 units
  });

  it.each([
    ['empty', ''],
    ['1025 bytes', 'a'.repeat(1025)],
    ['1026 bytes of 2-byte characters', '\u00e9'.repeat(513)],
    ['1028 bytes of 4-byte characters', '\u{1F512}'.repeat(257)],
    ['lone high surrogate', 'a\ud800b'],
    ['lone low surrogate', '\udc00'],
    ['trailing high surrogate', 'abc\ud83d'],
    ['NUL', 'a\u0000b'],
    ['number', 42],
    ['null', null],
    ['boxed string', Object('x')],
  ])('rejects %s', (_label, input) => {
    expect(catchError(() => assertResource(input))).toMatchObject({
      code: 'INVALID_ARGUMENT',
      field: 'resource',
    });
  });
});

describe('assertIdentifier', () => {
  it('accepts plain identifiers up to 63 characters', () => {
    expect(assertIdentifier('dlock_fencing', 'table')).toBe('dlock_fencing');
    expect(assertIdentifier(`_${'a'.repeat(62)}`, 'table')).toHaveLength(63);
  });

  it.each([
    '',
    '1abc',
    'a'.repeat(64),
    'a-b',
    'a b',
    'a"b',
    'a`b',
    "a'b",
    'a;drop table x',
    'schema.table',
    '\u00e9t\u00e9',
  ])('rejects %j', (input) => {
    expect(catchError(() => assertIdentifier(input, 'options.table'))).toMatchObject({
      code: 'INVALID_ARGUMENT',
      field: 'options.table',
    });
  });
});

function catchError(fn: () => unknown): unknown {
  try {
    fn();
  } catch (error) {
    return error;
  }
  throw new Error('expected a throw');
}
