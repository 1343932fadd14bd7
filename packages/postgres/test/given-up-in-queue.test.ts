import { PostgresLockService } from '@dlock/postgres';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { newPool, PG_URL, uniqueName } from './helpers.js';

// Statements whose callers gave up while they waited in the pool's queue for a connection: run once a connection
// frees up, each is one more round trip that writes nothing (its bound is over) and delays every live statement
// queued behind it; under overload such a backlog only grows. Counted on the server: the transactions committed in a
// database of their own, which nothing else uses.
const admin = newPool(2);
const database = uniqueName('dlock_pg_queue').toLowerCase();
const url = new URL(PG_URL);
url.pathname = `/${database}`;
const DATABASE_URL = url.toString();
const REQUEST_TIMEOUT_MS = 300;
const GIVEN_UP = 20;

const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

function poolOfOne(): pg.Pool {
  const pool = new pg.Pool({ connectionString: DATABASE_URL, max: 1 });
  pool.on('error', () => {});
  return pool;
}

/** Transactions committed in the database, once every connection to it has gone (a backend reports at exit). */
async function committed(): Promise<number> {
  for (let i = 0; i < 200; i++) {
    const result = await admin.query<{ backends: number; commits: string }>(
      'SELECT numbackends AS backends, xact_commit::text AS commits FROM pg_stat_database WHERE datname = $1',
      [database],
    );
    const row = result.rows[0];
    if (row && row.backends === 0) return Number(row.commits);
    await sleep(10);
  }
  throw new Error(`connections to ${database} did not go`);
}

beforeAll(async () => {
  await admin.query(`CREATE DATABASE "${database}"`);
  const pool = poolOfOne();
  const service = new PostgresLockService({ pool, listen: false });
  await service.ensureSchema();
  await service.close();
  await pool.end();
});

afterAll(async () => {
  await committed().catch(() => undefined);
  await admin.query(`DROP DATABASE IF EXISTS "${database}"`);
  await admin.end();
});

describe('a statement given up on while it waited for a connection', () => {
  it('never reaches the server, and settles once, as its caller was told', async () => {
    // What a connection costs by itself (its start-up) and one statement of the test's own.
    let before = await committed();
    const control = poolOfOne();
    await control.query('SELECT 1');
    await control.end();
    const baseline = (await committed()) - before;

    before = await committed();
    const pool = poolOfOne();
    const service = new PostgresLockService({ pool, listen: false, requestTimeoutMs: REQUEST_TIMEOUT_MS });
    const held = await pool.connect();
    await held.query('SELECT 1');
    const lease = { name: 'given-up', ownerId: 'o', ownershipToken: 'x'.repeat(22), fencingToken: 1n };
    const outcomes = await Promise.all(
      Array.from({ length: GIVEN_UP }, () =>
        service.release(lease).then(
          () => 'ok',
          (error: { code?: string }) => error.code,
        ),
      ),
    );
    expect(outcomes).toEqual(Array.from({ length: GIVEN_UP }, () => 'TRANSPORT'));
    expect(pool.waitingCount).toBe(GIVEN_UP);
    held.release();
    // A live statement after them gets the connection and answers.
    expect(await service.inspect('given-up')).toMatchObject({ held: false });
    // Every connection handed to a given-up statement went back, unused.
    expect([pool.waitingCount, pool.idleCount, pool.totalCount]).toEqual([0, 1, 1]);
    await service.close();
    await pool.end();
    // The start-up, the test's own statement and the live one: none of the given-up releases.
    expect((await committed()) - before - baseline - 1).toBe(0);
  });
});
