import { describe, expect, it } from 'vitest';
import { InvalidArgumentError } from './errors.js';
import { ISOLATION_LEVELS, parseIsolationLevel, parseLockTimeoutMs } from './transaction-settings.js';
import { assertCallback, parseFence } from './validate.js';

function thrown(fn: () => unknown): unknown {
  try {
    fn();
  } catch (error) {
    return error;
  }
  throw new Error('expected a throw');
}

describe('parseIsolationLevel', () => {
  it('accepts the three levels and undefined', () => {
    for (const level of ISOLATION_LEVELS) expect(parseIsolationLevel(level)).toBe(level);
    expect(parseIsolationLevel(undefined)).toBeUndefined();
  });

  it.each(['read uncommitted', 'snapshot', 'SERIALIZABLE', 'toString', 'constructor', '', null, 1])(
    'refuses %j',
    (level) => {
      const error = thrown(() => parseIsolationLevel(level));
      expect(error).toBeInstanceOf(InvalidArgumentError);
      expect(error).toMatchObject({
        field: 'options.isolationLevel',
        message: 'options.isolationLevel must be one of read committed, repeatable read, serializable',
      });
    },
  );
});

describe('parseLockTimeoutMs', () => {
  it('accepts integers in 1..2147483647 and undefined', () => {
    expect(parseLockTimeoutMs(1)).toBe(1);
    expect(parseLockTimeoutMs(2_147_483_647)).toBe(2_147_483_647);
    expect(parseLockTimeoutMs(undefined)).toBeUndefined();
  });

  it.each([
    0,
    -1,
    1.5,
    2_147_483_648,
    Number.NaN,
    Number.POSITIVE_INFINITY,
    '100',
    '100; DROP TABLE x',
    null,
  ])('refuses %j', (ms) => {
    expect(thrown(() => parseLockTimeoutMs(ms))).toMatchObject({
      code: 'INVALID_ARGUMENT',
      field: 'options.lockTimeoutMs',
      message: 'options.lockTimeoutMs must be an integer in 1..2147483647',
    });
  });
});

describe('parseFence and assertCallback', () => {
  it('check the resource before the token, and name the argument', () => {
    expect(parseFence('orders/1', '0042')).toEqual({ resource: 'orders/1', token: 42n });
    expect(thrown(() => parseFence('', 0))).toMatchObject({ field: 'resource' });
    expect(thrown(() => parseFence('r', 0))).toMatchObject({ field: 'token' });
    expect(() => assertCallback(async () => undefined)).not.toThrow();
    expect(thrown(() => assertCallback('x'))).toMatchObject({
      field: 'fn',
      message: 'fn must be a function',
    });
  });
});
