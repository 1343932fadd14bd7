import { InvalidArgumentError, systemClock } from '@dlock/core';
import { FakeClock } from '@dlock/testing';
import { describe, expect, it } from 'vitest';
import type { PGliteLike, PgPoolLike } from './client-like.js';
import { resolveOptions } from './options.js';
import { postgresStatements } from './sql.js';

const pool = { query: async () => ({ rows: [] }), connect: async () => ({}) } as unknown as PgPoolLike;
const pglite = {
  query: async () => ({ rows: [] }),
  exec: async () => [],
  listen: async () => async () => {},
} as unknown as PGliteLike;

function fieldOf(call: () => unknown): string | undefined {
  try {
    call();
  } catch (error) {
    expect(error).toBeInstanceOf(InvalidArgumentError);
    return (error as InvalidArgumentError).field;
  }
  return undefined;
}

describe('resolveOptions', () => {
  it('has defaults: tables dlock_*, the search_path, listening on a pool connection, 3 s per statement', () => {
    expect(resolveOptions({ pool })).toEqual({
      pool,
      schema: undefined,
      tablePrefix: 'dlock_',
      listen: true,
      preparedStatements: false,
      requestTimeoutMs: 3_000,
    });
    expect(resolveOptions({ pool, preparedStatements: true }).preparedStatements).toBe(true);
    expect(resolveOptions({ pool: pglite }).pool).toBe(pglite);
    const factory = async () => ({}) as never;
    expect(resolveOptions({ pool, listen: factory }).listen).toBe(factory);
    expect(resolveOptions({ pool, listen: false, tablePrefix: '' }).tablePrefix).toBe('');
    // A pool of one connection, where nothing listens on it.
    const onePool = { ...pool, options: { max: 1 } };
    expect(resolveOptions({ pool: onePool, listen: false }).pool).toBe(onePool);
    expect(resolveOptions({ pool: onePool, listen: factory }).pool).toBe(onePool);
    const clock = new FakeClock();
    expect(resolveOptions({ pool, clock }).clock).toBe(clock);
  });

  it.each([
    [undefined, 'options'],
    [{}, 'options.pool'],
    [{ pool: { query: () => {} } }, 'options.pool'],
    [{ pool: 'postgres://x' }, 'options.pool'],
    [{ pool, schema: 'my schema' }, 'options.schema'],
    [{ pool, schema: '' }, 'options.schema'],
    [{ pool, schema: 'x'.repeat(64) }, 'options.schema'],
    [{ pool, tablePrefix: 'a-b' }, 'options.tablePrefix'],
    [{ pool, tablePrefix: '1x' }, 'options.tablePrefix'],
    [{ pool, tablePrefix: 'x'.repeat(57) }, 'options.tablePrefix'],
    [{ pool, tablePrefix: 7 }, 'options.tablePrefix'],
    [{ pool, listen: 'yes' }, 'options.listen'],
    [{ pool: { ...pool, options: { max: 1 } } }, 'options.pool'],
    [{ pool, preparedStatements: 1 }, 'options.preparedStatements'],
    [{ pool, requestTimeoutMs: 0 }, 'options.requestTimeoutMs'],
    [{ pool, requestTimeoutMs: 1.5 }, 'options.requestTimeoutMs'],
    [{ pool, requestTimeoutMs: Number.NaN }, 'options.requestTimeoutMs'],
    [{ pool, clock: {} }, 'options.clock'],
    [{ pool, clock: { ...systemClock, sleep: 5 } }, 'options.clock'],
  ])('rejects %o at %s', (options, field) => {
    expect(fieldOf(() => resolveOptions(options))).toBe(field);
  });

  it.each([
    [{ pool, requestTimeout: 1_000 }, 'options.requestTimeout', 'requestTimeoutMs'],
    [{ pool, tablePrefx: 'app_' }, 'options.tablePrefx', 'tablePrefix'],
    [{ pool, Schema: 'app' }, 'options.Schema', 'schema'],
    [{ pool, listern: false }, 'options.listern', 'listen'],
  ])('refuses the misspelt key in %o, naming it (%s) and the key meant (%s)', (options, field, meant) => {
    try {
      resolveOptions(options);
      expect.unreachable();
    } catch (error) {
      expect(error).toBeInstanceOf(InvalidArgumentError);
      expect((error as InvalidArgumentError).field).toBe(field);
      expect((error as InvalidArgumentError).message).toContain(`"${meant}"`);
    }
  });
});

describe('postgresStatements', () => {
  it('quotes every table name, in the schema when one is given', () => {
    const inSchema = postgresStatements('app_', 'Locks');
    expect(inSchema.tables).toEqual({
      tokens: '"Locks"."app_tokens"',
      leases: '"Locks"."app_leases"',
      waiters: '"Locks"."app_waiters"',
    });
    expect(inSchema.createSchema).toContain('CREATE SCHEMA IF NOT EXISTS "Locks"');
    const plain = postgresStatements('dlock_', undefined);
    expect(plain.tables.leases).toBe('"dlock_leases"');
    expect(plain.createSchema).not.toContain('CREATE SCHEMA');
    expect(plain.createSchema).toContain('pg_advisory_xact_lock');
    // No session-level advisory lock anywhere: it would strand behind a transaction-pooling proxy.
    for (const text of Object.values(plain)) {
      if (typeof text === 'string') expect(text).not.toMatch(/pg_advisory_lock|pg_try_advisory_lock/);
    }
  });
});
