import { randomBytes } from 'node:crypto';
import pg from 'pg';

/** The local server the suite runs against; override with DLOCK_TEST_PG_URL. */
export const PG_URL = process.env['DLOCK_TEST_PG_URL'] ?? 'postgres://postgres@127.0.0.1:5432/test';

/** A table name no other run or file uses, so suites never collide and can drop what they made. */
export function uniqueName(prefix: string): string {
  return `${prefix}_${process.pid}_${randomBytes(4).toString('hex')}`;
}

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

/** Fisher-Yates with Math.random: the race tests want a new order each round, not a reproducible one. */
export function shuffle<T>(items: readonly T[]): T[] {
  const out = [...items];
  for (let i = out.length - 1; i > 0; i--) {
    const j = Math.floor(Math.random() * (i + 1));
    [out[i], out[j]] = [out[j] as T, out[i] as T];
  }
  return out;
}

export function isNonDecreasing(values: readonly bigint[]): boolean {
  return values.every((value, i) => i === 0 || (values[i - 1] as bigint) <= value);
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

/** Largest of some bigints, or undefined for none (Math.max does not take bigints). */
export function maxOf(values: Iterable<bigint | undefined>): bigint | undefined {
  let max: bigint | undefined;
  for (const value of values) {
    if (value !== undefined && (max === undefined || value > max)) max = value;
  }
  return max;
}

/**
 * The race suites of both fencing packages open 50 connections each; PostgreSQL allows 100 in all. Holding this
 * session-level advisory lock while racing makes the suites take turns when they run at the same time.
 * Returns the function that ends the session and so frees the slot.
 */
export async function takeRaceSlot(): Promise<() => Promise<void>> {
  const client = await newClient();
  await client.query('SELECT pg_advisory_lock(7307264001)');
  return () => client.end();
}
