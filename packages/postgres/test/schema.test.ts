import { LockClient } from '@dlock/core';
import { PostgresLockService } from '@dlock/postgres';
import { afterAll, describe, expect, it } from 'vitest';
import { newPool, uniqueName } from './helpers.js';

const pool = newPool(12);
const schemas: string[] = [];
afterAll(async () => {
  for (const schema of schemas) await pool.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
  await pool.end();
});

function freshSchema(): string {
  const schema = uniqueName('dlock_pg_schema').toLowerCase();
  schemas.push(schema);
  return schema;
}

describe('ensureSchema', () => {
  it('8 concurrent calls on a fresh schema all succeed and make the documented tables once', async () => {
    const schema = freshSchema();
    const services = Array.from(
      { length: 8 },
      () => new PostgresLockService({ pool, schema, listen: false }),
    );
    const outcomes = await Promise.allSettled(services.map((service) => service.ensureSchema()));
    expect(outcomes.map((o) => o.status)).toEqual(Array(8).fill('fulfilled'));
    await services[0]?.ensureSchema(); // and again, idempotent
    const columns = await pool.query<{ table_name: string; columns: string }>(
      `SELECT table_name, string_agg(column_name || ' ' || data_type, ', ' ORDER BY ordinal_position) AS columns
         FROM information_schema.columns WHERE table_schema = $1 GROUP BY table_name ORDER BY table_name`,
      [schema],
    );
    expect(columns.rows).toEqual([
      {
        table_name: 'dlock_leases',
        columns:
          'kind "char", name text, slot integer, permits integer, owner text, owner_id text, token bigint, ' +
          'expires_at timestamp with time zone, metadata text, next_waiter text, next_channel text',
      },
      { table_name: 'dlock_tokens', columns: 'kind "char", name text, slot integer, token bigint' },
      {
        table_name: 'dlock_waiters',
        columns:
          'kind "char", name text, id text, seq bigint, permits integer, channel text, ' +
          'expires_at timestamp with time zone',
      },
    ]);
    const indexes = await pool.query<{ indexname: string }>(
      'SELECT indexname FROM pg_indexes WHERE schemaname = $1 ORDER BY indexname',
      [schema],
    );
    expect(indexes.rows.map((r) => r.indexname)).toEqual([
      'dlock_leases_pkey',
      'dlock_tokens_pkey',
      'dlock_waiters_order',
      'dlock_waiters_pkey',
    ]);
    await Promise.all(services.map((service) => service.close()));
  });

  it('a table prefix keeps two services apart; service.sql is the DDL a migration can run', async () => {
    const schema = freshSchema();
    const a = new PostgresLockService({ pool, schema, tablePrefix: 'a_', listen: false });
    const b = new PostgresLockService({ pool, schema, tablePrefix: 'b_', listen: false });
    await pool.query(a.sql.createSchema);
    await b.ensureSchema();
    const request = {
      name: 'same',
      ownerId: 'o',
      ttlMs: 5_000,
      waitMs: 0,
      signal: new AbortController().signal,
    };
    expect((await a.acquire(request)).acquired).toBe(true);
    expect((await b.acquire(request)).acquired).toBe(true);
    await Promise.all([a.close(), b.close()]);
  });
});

describe('rows', () => {
  it('token rows outlive releases, expiries and deleted lease rows: the next token is the counter + 1', async () => {
    const schema = freshSchema();
    const service = new PostgresLockService({ pool, schema, listen: false });
    await service.ensureSchema();
    const client = new LockClient(service);
    const first = await client.acquire('job', { ttlMs: 5_000 });
    await first.release();
    expect((await pool.query(`SELECT count(*)::int AS n FROM "${schema}".dlock_leases`)).rows[0].n).toBe(0);
    // Even if someone deletes every lease row by hand, the counter stays.
    await pool.query(`DELETE FROM "${schema}".dlock_leases`);
    const second = await client.acquire('job', { ttlMs: 5_000 });
    expect(second.fencingToken).toBe(first.fencingToken + 1n);
    const tokens = await pool.query(`SELECT kind, name, slot, token::text FROM "${schema}".dlock_tokens`);
    expect(tokens.rows).toEqual([{ kind: 'l', name: 'job', slot: 0, token: String(second.fencingToken) }]);
    await second.release();
    await client.close();
    await service.close();
  });

  it('statements that touch a name clean up after it; sweep() removes rows of names nobody touches', async () => {
    const schema = freshSchema();
    const service = new PostgresLockService({ pool, schema, listen: false });
    await service.ensureSchema();
    const signal = new AbortController().signal;
    // A holder and a waiter that both crashed: rows that only run out.
    await pool.query(
      `INSERT INTO "${schema}".dlock_leases (kind, name, slot, owner, token, expires_at)
       VALUES ('l', 'touched', 0, 'dead-holder', 1, clock_timestamp() - interval '1 s'),
              ('l', 'abandoned', 0, 'dead-holder', 1, clock_timestamp() - interval '1 s')`,
    );
    await pool.query(
      `INSERT INTO "${schema}".dlock_waiters (kind, name, id, channel, expires_at)
       VALUES ('l', 'touched', 'dead-waiter', 'nobody', clock_timestamp() - interval '1 s'),
              ('l', 'abandoned', 'dead-waiter', 'nobody', clock_timestamp() - interval '1 s')`,
    );
    const grant = await service.acquire({ name: 'touched', ownerId: 'o', ttlMs: 5_000, waitMs: 0, signal });
    expect(grant.acquired).toBe(true);
    const waiters = await pool.query(`SELECT name FROM "${schema}".dlock_waiters ORDER BY name`);
    expect(waiters.rows).toEqual([{ name: 'abandoned' }]);
    expect(await service.sweep()).toEqual({ leases: 1, waiters: 1 });
    const leases = await pool.query(`SELECT name, owner FROM "${schema}".dlock_leases`);
    expect(leases.rows).toEqual([
      { name: 'touched', owner: grant.acquired ? grant.grant.ownershipToken : '' },
    ]);
    await service.close();
  });
});
