import { LockClient } from '@dlock/core';
import { PostgresLockService } from '@dlock/postgres';
import { inspectContract } from '@dlock/testing/contract';
import type { PGlite } from '@electric-sql/pglite';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { embedded, newPool, privateSchema } from './helpers.js';

// Holders from the lease rows (owner id, token, metadata, time left by the server's clock); waiters = live waiter
// rows. On a pg.Pool in a schema of the file's own, and on PGlite.
const pool = newPool(10);
let schema = '';
let drop: () => Promise<void> = async () => {};
let db: PGlite;
beforeAll(async () => {
  ({ schema, drop } = await privateSchema(pool, 'dlock_pg_inspect'));
  db = await embedded();
}, 120_000);
afterAll(async () => {
  await drop();
  await pool.end();
  await db?.close();
});

inspectContract(
  'PostgresLockService (pg.Pool)',
  () => {
    const service = new PostgresLockService({ pool, schema });
    return { service, close: () => service.close() };
  },
  { ttlMs: 2_000, lockWaiters: true },
);

inspectContract(
  'PostgresLockService (PGlite)',
  () => {
    const service = new PostgresLockService({ pool: db });
    return { service, close: () => service.close() };
  },
  { ttlMs: 2_000, lockWaiters: true },
);

it('ensureSchema adds the owner_id column to a leases table made before it; rows without one read without it', async () => {
  // ALTER TABLE waits for every lock on the table: a loaded machine may need longer than the default 3 s.
  const service = new PostgresLockService({ pool, schema, requestTimeoutMs: 15_000 });
  const client = new LockClient(service);
  try {
    const leases = `"${schema}"."dlock_leases"`;
    await pool.query(`ALTER TABLE ${leases} DROP COLUMN owner_id`);
    await service.ensureSchema();
    const column = await pool.query(
      `SELECT 1 FROM information_schema.columns WHERE table_schema = $1 AND table_name = 'dlock_leases' AND column_name = 'owner_id'`,
      [schema],
    );
    expect(column.rowCount).toBe(1);
    const handle = await client.acquire('from-before', { ttlMs: 5_000, metadata: 'job-7' });
    expect((await client.inspect('from-before')).ownerId).toBe(client.ownerId);
    await pool.query(`UPDATE ${leases} SET owner_id = NULL WHERE name = 'from-before'`);
    const info = await client.inspect('from-before');
    expect(info).toMatchObject({ held: true, fencingToken: handle.fencingToken, metadata: 'job-7' });
    expect(info.ownerId).toBeUndefined();
    await handle.release();
  } finally {
    await client.close();
    await service.close();
  }
});
