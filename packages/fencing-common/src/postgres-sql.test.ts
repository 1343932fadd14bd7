import { describe, expect, it } from 'vitest';
import { classifyPostgresError, postgresLockTimeout } from './postgres-sql.js';

describe('classifyPostgresError', () => {
  it.each([
    ['40001', 'conflict'],
    ['40P01', 'conflict'],
    ['55P03', 'busy'],
    ['23505', undefined],
    ['22012', undefined],
  ])('SQLSTATE %s is %s', (code, kind) => {
    expect(classifyPostgresError(Object.assign(new Error('x'), { code }))).toBe(kind);
  });

  it('never throws on whatever a driver rejected with', () => {
    for (const error of [null, undefined, 'boom', 40001, {}, { code: 40001 }, Object.create(null)]) {
      expect(classifyPostgresError(error)).toBeUndefined();
    }
  });

  it('writes the lock timeout statement', () => {
    expect(postgresLockTimeout(50)).toBe('SET LOCAL lock_timeout = 50');
  });
});
