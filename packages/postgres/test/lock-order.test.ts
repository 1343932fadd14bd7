import type { AcquireResult, Lease } from '@dlock/core';
import { PostgresLockService } from '@dlock/postgres';
import { describe, expect, it } from 'vitest';
import { newPool, usePrivateSchema, waitingOnLock } from './helpers.js';

// Statements that lock several lease rows must lock them in one order, or two of them deadlock and PostgreSQL aborts
// one after deadlock_timeout: a renewal batch holding two permits of a semaphore, and the first waiter marking every
// holder's row (next_waiter), each holding one row and waiting for the other.
const pool = newPool(8);
const tables = usePrivateSchema(pool, 'dlock_pg_order');

const signal = new AbortController().signal;

function lease(name: string, result: AcquireResult): Lease {
  if (!result.acquired) throw new Error('not granted');
  const { grant } = result;
  const { slot } = grant;
  if (slot === undefined) throw new Error('not a permit');
  return {
    name,
    ownerId: 'h',
    ownershipToken: grant.ownershipToken,
    fencingToken: grant.fencingToken,
    slot,
  };
}

describe('lease rows are locked in one order', () => {
  it("a renewal batch and a semaphore waiter marking the holders' rows do not deadlock", async () => {
    const holder = new PostgresLockService({
      pool,
      schema: tables.name,
      listen: false,
      requestTimeoutMs: 5_000,
    });
    const waiter = new PostgresLockService({
      pool,
      schema: tables.name,
      listen: false,
      requestTimeoutMs: 5_000,
    });
    const name = 'marked-while-renewed';
    const request = { name, ownerId: 'h', ttlMs: 30_000, waitMs: 0, signal, permits: 2 };
    const slots = [
      lease(name, await holder.acquirePermit(request)),
      lease(name, await holder.acquirePermit(request)),
    ];
    const [zero, one] = slots[0]?.slot === 0 ? slots : [slots[1], slots[0]];
    if (zero === undefined || one === undefined) throw new Error('two permits');
    const outside = await pool.connect();
    try {
      await outside.query('BEGIN');
      await outside.query(
        `SELECT 1 FROM "${tables.name}".dlock_leases WHERE kind = 's' AND name = $1 AND slot = 0 FOR UPDATE`,
        [name],
      );
      // The waiter marks slot 0 first (held up behind the outside lock), then slot 1.
      const waiting = waiter.acquirePermit({ ...request, ownerId: 'w', waitMs: 10_000 }).then(
        (result) => result.acquired,
        (error: { code?: string; message?: string }) => `${error.code}: ${error.message}`,
      );
      await waitingOnLock(pool, '%_permit"(%', 3_000);
      // The renewal batch names slot 1 first: it locks slot 1, then queues for slot 0 behind the waiter.
      const renewing = holder
        .renewMany([
          { lease: one, ttlMs: 30_000 },
          { lease: zero, ttlMs: 30_000 },
        ])
        .then(
          (results) => results.map((r) => r.renewed),
          (error: { code?: string; message?: string }) => `${error.code}: ${error.message}`,
        );
      await waitingOnLock(pool, '%unnest(%', 3_000);
      await outside.query('COMMIT');
      expect(await renewing).toEqual([true, true]);
      await holder.release(zero);
      expect(await waiting).toBe(true);
    } finally {
      outside.release();
      await holder.close();
      await waiter.close();
    }
  });
});
