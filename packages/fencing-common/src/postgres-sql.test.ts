import { describe, expect, it } from 'vitest';
import { InvalidArgumentError } from './errors.js';
import { classifyPostgresError, createTableRacingOthers, postgresLockTimeout } from './postgres-sql.js';

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

describe('createTableRacingOthers', () => {
  const lostRace = () => Object.assign(new Error('type "t" already exists'), { code: '42710' });

  it('retries a lost race and gives up after its attempts', async () => {
    let calls = 0;
    const create = async () => {
      calls++;
      throw lostRace();
    };
    await expect(createTableRacingOthers(create, 3)).rejects.toMatchObject({ code: '42710' });
    expect(calls).toBe(3);
  });

  it('refuses an attempt count that could loop for ever before trying', async () => {
    // A name already taken by another type fails with 42710 on every attempt, so the bound is all that ends it.
    for (const attempts of [101, 1e6, Number.MAX_SAFE_INTEGER]) {
      let calls = 0;
      const create = async () => {
        calls++;
        throw lostRace();
      };
      await expect(createTableRacingOthers(create, attempts)).rejects.toBeInstanceOf(InvalidArgumentError);
      expect(calls).toBe(0);
    }
    let calls = 0;
    await createTableRacingOthers(async () => {
      calls++;
    }, 100);
    expect(calls).toBe(1);
  });
});
