import { InvalidArgumentError, LockClient } from '@dlock/core';
import { PostgresLockService } from '@dlock/postgres';
import { describe, expect, it } from 'vitest';
import { newPool, usePrivateSchema } from './helpers.js';

// The tables live in a schema of this file's own, made through a pool large enough for it.
const tables = usePrivateSchema(newPool(2));

/** How many connections a pool has opened so far (pg.Pool's own count). */
const opened = (pool: { totalCount: number }): number => pool.totalCount;

describe('the pool a service listens on', () => {
  it('refuses a pool of one connection before any I/O, naming the ways out', async () => {
    const pool = newPool(1);
    try {
      let refused: unknown;
      try {
        new PostgresLockService({ pool, schema: tables.name });
      } catch (error) {
        refused = error;
      }
      expect(refused).toBeInstanceOf(InvalidArgumentError);
      expect((refused as InvalidArgumentError).field).toBe('options.pool');
      expect((refused as Error).message).toMatch(/max: 1.*max 2 or more.*listen: false/);
      expect(opened(pool)).toBe(0);
    } finally {
      await pool.end();
    }
  });

  it('takes a pool of one connection when the service does not listen on it', async () => {
    const pool = newPool(1);
    const service = new PostgresLockService({ pool, schema: tables.name, listen: false });
    const locks = new LockClient(service);
    try {
      const handle = await locks.acquire('one-connection', { ttlMs: 5_000 });
      expect(handle.fencingToken).toBeGreaterThan(0n);
      await handle.release();
      expect(handle.state).toBe('released');
    } finally {
      await locks.close();
      await service.close();
      await pool.end();
    }
  });

  it('with two connections, a waiter listens on one while the holder releases on the other', async () => {
    const pool = newPool(2);
    const service = new PostgresLockService({ pool, schema: tables.name });
    const holderClient = new LockClient(service);
    const waiterClient = new LockClient(service);
    try {
      const held = await holderClient.acquire('two-connections', { ttlMs: 10_000 });
      const waiting = waiterClient.acquire('two-connections', { ttlMs: 10_000, waitMs: 8_000 });
      // Read below; caught here too, so that a failure above it does not leave the rejection unhandled.
      waiting.catch(() => {});
      // Long enough for the waiter to queue and its service to take a connection for LISTEN.
      await new Promise((resolve) => setTimeout(resolve, 300));
      const releasedAt = performance.now();
      await held.release();
      expect(held.state).toBe('released');
      const next = await waiting;
      // Granted on the release's notice, long before the holder's 10 s lease would have run out.
      expect(performance.now() - releasedAt).toBeLessThan(3_000);
      expect(next.fencingToken).toBeGreaterThan(held.fencingToken);
      await next.release();
    } finally {
      await holderClient.close();
      await waiterClient.close();
      await service.close();
      await pool.end();
    }
  });
});
