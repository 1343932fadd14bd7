import type pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  FenceBusyError,
  FenceConflictError,
  FencingGate,
  type IsolationLevel,
  type RunOptions,
  withFenceRetry,
} from '../src/index.js';
import { checkedOut, newPool, uniqueName, waitForLockWaiters } from './helpers.js';

const fenceTable = uniqueName('fence_iso');
const gate = new FencingGate({ table: fenceTable });
let pool: pg.Pool;
let observer: pg.Pool;
let counter = 0;

beforeAll(async () => {
  pool = newPool(4);
  observer = newPool(1);
  await gate.ensureSchema(pool);
});

afterAll(async () => {
  await pool.query(gate.sql.dropTable);
  await pool.end();
  await observer.end();
});

const noop = async () => undefined;
const settle = (p: Promise<unknown>) =>
  p.then(
    (value) => ({ ok: true as const, value }),
    (error: unknown) => ({ ok: false as const, error }),
  );

/**
 * Holds the fence row with `holderToken` while a second `run` with `options` queues behind it, then lets the
 * holder commit. Returns how the queued writer ended.
 */
async function contend(resource: string, holderToken: bigint, waiterToken: bigint, options: RunOptions) {
  let waiter: Promise<{ ok: boolean; value?: unknown; error?: unknown }> | undefined;
  await gate.run(pool, resource, holderToken, async () => {
    waiter = settle(gate.run(pool, resource, waiterToken, async () => 'waiter wrote', options));
    await waitForLockWaiters(observer, fenceTable, 1);
  });
  return waiter!;
}

describe.each<IsolationLevel>(['repeatable read', 'serializable'])('run() under %s', (isolationLevel) => {
  it('surfaces a concurrent raise of the mark as a retryable FenceConflictError', async () => {
    const r = `iso/${counter++}`;
    await gate.run(pool, r, 1n, noop);
    const outcome = await contend(r, 5n, 6n, { isolationLevel });
    expect(outcome.ok).toBe(false);
    expect(outcome.error).toBeInstanceOf(FenceConflictError);
    expect(outcome.error).toMatchObject({
      code: 'FENCE_CONFLICT',
      retryable: true,
      cause: { code: '40001' },
    });
    expect(await gate.highWaterMark(pool, r)).toBe(5n);
    expect(checkedOut(pool)).toBe(0);
  });

  it('succeeds when retried as a whole transaction with withFenceRetry', async () => {
    const r = `iso/${counter++}`;
    await gate.run(pool, r, 1n, noop);
    const attempts: number[] = [];
    let holder: Promise<unknown> | undefined;
    const result = await withFenceRetry(
      async (attempt) => {
        attempts.push(attempt);
        if (attempt === 1) {
          // First attempt queues behind a holder that raises the mark, so it must conflict.
          let waiter: Promise<string> | undefined;
          holder = gate.run(pool, r, 5n, async () => {
            waiter = gate.run(pool, r, 6n, async () => 'first', { isolationLevel });
            waiter.catch(() => undefined);
            await waitForLockWaiters(observer, fenceTable, 1);
          });
          await holder;
          return waiter!;
        }
        return gate.run(pool, r, 6n, async () => 'retried', { isolationLevel });
      },
      { baseDelayMs: 0, maxDelayMs: 0 },
    );
    expect(result).toBe('retried');
    expect(attempts).toEqual([1, 2]);
    expect(await gate.highWaterMark(pool, r)).toBe(6n);
    expect(checkedOut(pool)).toBe(0);
  });
});

describe('check() inside a caller transaction', () => {
  it.each<IsolationLevel>(['repeatable read', 'serializable'])(
    'under %s, a mark raised after the snapshot gives FenceConflictError',
    async (level) => {
      const r = `iso/${counter++}`;
      await gate.run(pool, r, 1n, noop);
      const client = await pool.connect();
      try {
        await client.query(`BEGIN ISOLATION LEVEL ${level.toUpperCase()}`);
        await client.query('SELECT 1'); // takes the snapshot
        await gate.run(pool, r, 3n, noop);
        await expect(gate.check(client, r, 4n)).rejects.toMatchObject({
          code: 'FENCE_CONFLICT',
          cause: { code: '40001' },
        });
        await client.query('ROLLBACK');
      } finally {
        client.release();
      }
      expect(await gate.highWaterMark(pool, r)).toBe(3n);
    },
  );
});

describe('run() under read committed (the default)', () => {
  it('lets a queued higher token through after the holder commits', async () => {
    const r = `iso/${counter++}`;
    const outcome = await contend(r, 5n, 6n, {});
    expect(outcome).toEqual({ ok: true, value: 'waiter wrote' });
    expect(await gate.highWaterMark(pool, r)).toBe(6n);
  });

  it('judges a queued lower token against the holder’s committed mark', async () => {
    const r = `iso/${counter++}`;
    const outcome = await contend(r, 5n, 4n, {});
    expect(outcome.error).toMatchObject({ code: 'STALE_FENCING_TOKEN', highWaterMark: 5n, token: 4n });
    expect(checkedOut(pool)).toBe(0);
  });
});

describe('lockTimeoutMs', () => {
  it('gives up on a held fence row with FenceBusyError and releases the client', async () => {
    const r = `iso/${counter++}`;
    let waiter: { ok: boolean; error?: unknown } | undefined;
    await gate.run(pool, r, 5n, async () => {
      // The holder stays in its callback until the waiter has given up: a lock wait with a 50 ms bound.
      waiter = await settle(gate.run(pool, r, 6n, noop, { lockTimeoutMs: 50 }));
    });
    expect(waiter?.error).toBeInstanceOf(FenceBusyError);
    expect(waiter?.error).toMatchObject({ code: 'FENCE_BUSY', retryable: true, cause: { code: '55P03' } });
    expect(await gate.highWaterMark(pool, r)).toBe(5n);
    expect(checkedOut(pool)).toBe(0);
  });
});
