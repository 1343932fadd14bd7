import { PostgresLockService, type PostgresLockServiceOptions } from '@dlock/postgres';
import { PG_URL, uniqueName } from '@dlock/test-utils';
import { PGlite } from '@electric-sql/pglite';
import pg from 'pg';
import { afterAll, beforeAll } from 'vitest';

export { PG_URL, uniqueName };

export function newPool(max = 10): pg.Pool {
  const pool = new pg.Pool({ connectionString: PG_URL, max });
  // A backend killed on purpose (or by a server restart) surfaces on idle clients as pool errors.
  pool.on('error', () => {});
  return pool;
}

/**
 * A schema of its own for one test file, created with the tables, and dropped by `drop()`: files never share rows.
 */
export async function privateSchema(
  pool: pg.Pool,
  prefix = 'dlock_pg_test',
): Promise<{ readonly schema: string; drop(): Promise<void> }> {
  const schema = uniqueName(prefix).toLowerCase();
  const service = new PostgresLockService({ pool, schema, listen: false });
  await service.ensureSchema();
  await service.close();
  return {
    schema,
    drop: async () => {
      await pool.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
    },
  };
}

/** One embedded database with the tables in place (PGlite takes a moment to start: share it within a file). */
export async function embedded(): Promise<PGlite> {
  const db = await PGlite.create();
  const service = new PostgresLockService({ pool: db });
  await service.ensureSchema();
  await service.close();
  return db;
}

/**
 * {@link privateSchema} for the test file that calls it: made before its tests, dropped after them, and the pool
 * ended then. `name` is the schema's once the tests run.
 */
export function usePrivateSchema(pool: pg.Pool, prefix?: string): { readonly name: string } {
  const tables = { name: '' };
  let drop = async (): Promise<void> => {};
  beforeAll(async () => {
    const made = await privateSchema(pool, prefix);
    tables.name = made.schema;
    drop = made.drop;
  });
  afterAll(async () => {
    await drop();
    await pool.end();
  });
  return tables;
}

export type ServiceOptions = Omit<PostgresLockServiceOptions, 'pool'>;
