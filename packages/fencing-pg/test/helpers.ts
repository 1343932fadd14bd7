import { PG_URL } from '@dlock/test-utils';
import pg from 'pg';
import { afterAll, beforeAll } from 'vitest';
import { FencingGate, type PgClientLike, type PgPoolClientLike, type PgPoolLike } from '../src/index.js';

export { isNonDecreasing, maxOf, PG_URL, shuffle, takeRaceSlot, uniqueName } from '@dlock/test-utils';

export function newPool(max = 10): pg.Pool {
  const pool = new pg.Pool({ connectionString: PG_URL, max });
  // A backend killed on purpose (or by a server restart) surfaces on idle clients as pool errors.
  pool.on('error', () => {});
  return pool;
}

export async function newClient(): Promise<pg.Client> {
  const client = new pg.Client({ connectionString: PG_URL });
  client.on('error', () => {});
  await client.connect();
  return client;
}

/** The table the protected writes go to; `seq` records the order in which writers got past the gate. */
export async function createProtectedTable(db: pg.Pool | pg.Client, name: string): Promise<void> {
  await db.query(
    `CREATE TABLE "${name}" (seq bigserial PRIMARY KEY, resource text NOT NULL, token bigint NOT NULL)`,
  );
}

export async function committedTokens(
  db: pg.Pool | pg.Client,
  table: string,
  resource: string,
): Promise<bigint[]> {
  const result = await db.query<{ token: string }>(
    `SELECT token::text AS token FROM "${table}" WHERE resource = $1 ORDER BY seq`,
    [resource],
  );
  return result.rows.map((row) => BigInt(row.token));
}

/**
 * Waits until `count` backends are blocked on a lock while running a statement that mentions `table`. This is a
 * condition, not a timer: it polls pg_stat_activity and gives up after a bounded number of looks.
 */
export async function waitForLockWaiters(db: pg.Pool, table: string, count: number): Promise<void> {
  for (let attempt = 0; attempt < 2000; attempt++) {
    const result = await db.query<{ n: string }>(
      `SELECT count(*)::text AS n FROM pg_stat_activity
        WHERE wait_event_type = 'Lock' AND query LIKE '%' || $1 || '%' AND pid <> pg_backend_pid()`,
      [table],
    );
    if (Number(result.rows[0]?.n) >= count) return;
    await new Promise((resolve) => setImmediate(resolve));
  }
  throw new Error(`no ${count} backend(s) ever waited on a lock for ${table}`);
}

/** Clients checked out and not yet returned. */
export function checkedOut(pool: pg.Pool): number {
  return pool.totalCount - pool.idleCount;
}

/**
 * Before a file's tests, opens a pool of `poolSize`, makes a gate on the fencing table `fenceTable` with its
 * schema, and the protected table `dataTable` if one is named, and hands pool and gate to `opened`; after them,
 * drops those tables and ends the pool.
 */
export function withGate(
  tables: { readonly fenceTable: string; readonly dataTable?: string; readonly poolSize: number },
  opened: (pool: pg.Pool, gate: FencingGate) => void,
): void {
  const { fenceTable, dataTable, poolSize } = tables;
  let pool: pg.Pool;
  let gate: FencingGate;
  beforeAll(async () => {
    pool = newPool(poolSize);
    gate = new FencingGate({ table: fenceTable });
    await gate.ensureSchema(pool);
    if (dataTable !== undefined) await createProtectedTable(pool, dataTable);
    opened(pool, gate);
  });
  afterAll(async () => {
    await pool.query(gate.sql.dropTable);
    if (dataTable !== undefined) await pool.query(`DROP TABLE IF EXISTS "${dataTable}"`);
    await pool.end();
  });
}

/** A callback for the gate that writes `token` for `resource` to the protected table `table`. */
export function protectedWrite(table: string) {
  return (resource: string, token: bigint) => (tx: PgClientLike) =>
    tx.query(`INSERT INTO "${table}" (resource, token) VALUES ($1, $2::bigint)`, [
      resource,
      token.toString(),
    ]);
}

/** A real pool that counts what reaches it, to prove that bad input is refused before any SQL or checkout. */
export function countingPool(inner: pg.Pool) {
  const counts = { queries: 0, connects: 0 };
  const db: PgPoolLike = {
    get idleCount() {
      return inner.idleCount;
    },
    query: (text, values) => {
      counts.queries++;
      return inner.query(text, values);
    },
    connect: async () => {
      counts.connects++;
      const client = await inner.connect();
      return {
        query: (text: string, values?: unknown[]) => {
          counts.queries++;
          return client.query(text, values);
        },
        release: (err?: Error | boolean) => client.release(err),
        getTransactionStatus: () => client.getTransactionStatus(),
      } satisfies PgPoolClientLike;
    },
  };
  return { db, counts };
}
