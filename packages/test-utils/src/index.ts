import { randomBytes } from 'node:crypto';
import pg from 'pg';

/** The servers the integration suites use; `scripts/services.sh` starts them. Override per run with env vars. */
export const PG_URL = process.env['DLOCK_TEST_PG_URL'] ?? 'postgres://postgres@127.0.0.1:5432/test';
export const MYSQL_URL = process.env['DLOCK_TEST_MYSQL_URL'] ?? 'mysql://root@127.0.0.1:3306/test';

/** A table (or key) name no other run or file uses, so suites never collide and can drop what they made. */
export function uniqueName(prefix: string): string {
  return `${prefix}_${process.pid}_${randomBytes(4).toString('hex')}`;
}

/** Fisher–Yates with Math.random: race tests want a new order each round, not a reproducible one. */
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

/** Largest of some bigints, or undefined for none (Math.max does not take bigints). */
export function maxOf(values: Iterable<bigint | undefined>): bigint | undefined {
  let max: bigint | undefined;
  for (const value of values) {
    if (value !== undefined && (max === undefined || value > max)) max = value;
  }
  return max;
}

/** The rejection reason of a promise that must reject; fails if it resolves. */
export async function rejection(promise: Promise<unknown>): Promise<unknown> {
  return promise.then(
    () => {
      throw new Error('expected a rejection');
    },
    (error: unknown) => error,
  );
}

/**
 * Race suites open about 50 PostgreSQL connections each; the server allows 100 in all. Holding this session-level
 * advisory lock while racing makes suites of different packages take turns when they run at the same time.
 * Returns the function that ends the session and so frees the slot.
 */
export async function takeRaceSlot(): Promise<() => Promise<void>> {
  const client = new pg.Client({ connectionString: PG_URL });
  client.on('error', () => {});
  await client.connect();
  await client.query('SELECT pg_advisory_lock(7307264001)');
  return () => client.end();
}
