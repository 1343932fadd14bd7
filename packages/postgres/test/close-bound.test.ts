import { LockClient } from '@dlock/core';
import { PostgresLockService } from '@dlock/postgres';
import { startTcpProxy, type TcpProxy, uniqueName } from '@dlock/test-utils';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { newPool, PG_URL, usePrivateSchema } from './helpers.js';

// close() on a real server whose connections stop answering (a blackholed TCP proxy, a backend blocked on a row
// lock), and with an observer row's insert still running: it settles within its bound, answers every later call
// with ClientClosedError, and leaves nothing of the service in the tables.
const pool = newPool(6);
const tables = usePrivateSchema(pool, 'dlock_pg_close');
const signal = new AbortController().signal;
const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));
const REQUEST_TIMEOUT_MS = 500;
/** close()'s documented bound: twice requestTimeoutMs; the margin is for timers and a loaded machine. */
const CLOSE_BOUND_MS = 2 * REQUEST_TIMEOUT_MS + 250;

async function until(predicate: () => Promise<boolean>, maxMs: number): Promise<boolean> {
  const end = performance.now() + maxMs;
  while (performance.now() < end) {
    if (await predicate()) return true;
    await sleep(10);
  }
  return predicate();
}

async function rowsOf(table: 'waiters' | 'leases', where: string, values: unknown[]): Promise<number> {
  const result = await pool.query(`SELECT 1 FROM "${tables.name}".dlock_${table} WHERE ${where}`, values);
  return result.rowCount ?? 0;
}

/** Every call on a closed service rejects with ClientClosedError; none hangs. */
async function expectClosed(service: PostgresLockService): Promise<void> {
  const lease = { name: 'c', ownerId: 'o', ownershipToken: 'x'.repeat(22), fencingToken: 1n };
  const calls: Promise<unknown>[] = [
    service.acquire({ name: 'c', ownerId: 'o', ttlMs: 5_000, waitMs: 0, signal }),
    service.acquirePermit({ name: 's', ownerId: 'o', ttlMs: 5_000, waitMs: 0, signal, permits: 2 }),
    service.renew({ lease, ttlMs: 5_000 }),
    service.renewMany([{ lease, ttlMs: 5_000 }]),
    service.release(lease),
    service.inspect('c'),
    service.inspectPermits('s', 2),
    service.updateMetadata(lease, 'm'),
    service.availablePermits('s', 2),
    service.ensureSchema(),
    service.sweep(),
    service.close(),
  ];
  const outcomes = await Promise.all(
    calls.map((call) =>
      call.then(
        () => 'ok',
        (error: { code?: string }) => error.code,
      ),
    ),
  );
  // close() again resolves (idempotent); everything else is refused.
  expect(outcomes).toEqual([...Array(calls.length - 1).fill('CLIENT_CLOSED'), 'ok']);
  service.watchChanges('c', () => {})();
  service.watch('c', () => {})();
}

describe('close() with a connection that stopped answering', () => {
  let proxy: TcpProxy;
  beforeAll(async () => {
    proxy = await startTcpProxy({ targetPort: Number(new URL(PG_URL).port || 5432) });
  });
  afterAll(async () => {
    await proxy.close();
  });

  it('blackholed with a waiter queued and a name observed: settles within twice requestTimeoutMs', {
    timeout: 20_000,
  }, async () => {
    // A connection opened while blackholed would wait for its handshake for as long as the server allows.
    const far = new pg.Pool({
      connectionString: `postgres://postgres@127.0.0.1:${proxy.port}/test`,
      max: 4,
      connectionTimeoutMillis: 1_000,
    });
    far.on('error', () => {});
    const service = new PostgresLockService({
      pool: far,
      schema: tables.name,
      requestTimeoutMs: REQUEST_TIMEOUT_MS,
    });
    const other = new PostgresLockService({ pool, schema: tables.name, listen: false });
    const name = uniqueName('blackholed');
    const holder = await new LockClient(other).acquire(name, { ttlMs: 10_000 });
    try {
      const pending = service.acquire({ name, ownerId: 'o', ttlMs: 5_000, waitMs: 20_000, signal });
      pending.catch(() => {});
      const unwatch = service.watchChanges(`${name}-observed`, () => {});
      expect(
        await until(async () => (await rowsOf('waiters', 'channel = $1', [service.channel])) === 2, 3_000),
      ).toBe(true);
      proxy.mode = 'blackhole';
      const started = performance.now();
      await service.close();
      const ms = performance.now() - started;
      console.log(`blackholed: close() settled after ${ms.toFixed(0)} ms`);
      expect(ms).toBeLessThan(CLOSE_BOUND_MS);
      await expect(pending).rejects.toMatchObject({ code: 'CLIENT_CLOSED' });
      await expectClosed(service);
      unwatch();
    } finally {
      proxy.mode = 'pass';
      await holder.release();
      await other.close();
      await far.end();
    }
  });

  it('a backend blocked on a row lock under a pending acquire: settles within twice requestTimeoutMs', {
    timeout: 20_000,
  }, async () => {
    const service = new PostgresLockService({
      pool,
      schema: tables.name,
      requestTimeoutMs: REQUEST_TIMEOUT_MS,
    });
    const name = uniqueName('blocked');
    const blocker = await pool.connect();
    try {
      await blocker.query('BEGIN');
      await blocker.query(
        `INSERT INTO "${tables.name}".dlock_tokens VALUES ('l', $1, 0, 1) ON CONFLICT DO NOTHING`,
        [name],
      );
      await blocker.query(
        `SELECT 1 FROM "${tables.name}".dlock_tokens WHERE kind = 'l' AND name = $1 AND slot = 0 FOR UPDATE`,
        [name],
      );
      const unwatch = service.watchChanges(`${name}-observed`, () => {});
      const pending = service.acquire({ name, ownerId: 'o', ttlMs: 5_000, waitMs: 20_000, signal });
      pending.catch(() => {});
      await sleep(100);
      const started = performance.now();
      const closing = service.close();
      // Calls made while close() runs are refused as after it.
      const during = expectClosed(service);
      await closing;
      const ms = performance.now() - started;
      console.log(`blocked: close() settled after ${ms.toFixed(0)} ms`);
      await during;
      expect(ms).toBeLessThan(CLOSE_BOUND_MS);
      await expect(pending).rejects.toMatchObject({ code: 'CLIENT_CLOSED' });
      await expectClosed(service);
      unwatch();
      await blocker.query('ROLLBACK');
      // The acquire statement, no longer held, runs now, past its bound: it must write nothing that stays.
      await sleep(300);
      expect(await rowsOf('waiters', 'channel = $1', [service.channel])).toBe(0);
      expect(await rowsOf('leases', 'name = $1', [name])).toBe(0);
    } finally {
      await blocker.query('ROLLBACK');
      blocker.release();
    }
  });
});

describe('close() with an observer row being written', () => {
  it('leaves no observer row once it has settled', { timeout: 20_000 }, async () => {
    const service = new PostgresLockService({ pool, schema: tables.name, requestTimeoutMs: 2_000 });
    const name = uniqueName('observed');
    // An uncommitted row with the same key holds the service's observer insert on the server until it rolls back.
    const blocker = await pool.connect();
    try {
      await blocker.query('BEGIN');
      await blocker.query(
        `INSERT INTO "${tables.name}".dlock_waiters (kind, name, id, channel, expires_at)
         VALUES ('o', $1, $2, $2, clock_timestamp() + interval '1 minute')`,
        [name, service.channel],
      );
      const unwatch = service.watchChanges(name, () => {});
      await sleep(200);
      const closing = service.close();
      await sleep(200);
      await blocker.query('ROLLBACK');
      await closing;
      await expectClosed(service);
      // The insert, no longer held, commits at once: look for what it left after it has.
      await sleep(300);
      expect(await rowsOf('waiters', 'channel = $1', [service.channel])).toBe(0);
      unwatch();
    } finally {
      blocker.release();
    }
  });
});
