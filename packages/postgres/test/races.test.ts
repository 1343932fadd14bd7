import { type AcquireResult, type Grant, type Lease, PermitsMismatchError } from '@dlock/core';
import { PostgresLockService } from '@dlock/postgres';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { newPool, PG_URL, privateSchema } from './helpers.js';

// Interleavings forced with an outside transaction that row-locks what a statement is about to wait on: each test
// reproduces one race a review found, and pins its fix.

const pool = newPool(20);
let schema = '';
let drop: () => Promise<void> = async () => {};
beforeAll(async () => {
  ({ schema, drop } = await privateSchema(pool, 'dlock_pg_races'));
});
afterAll(async () => {
  await drop();
  await pool.end();
});

const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));
const signal = new AbortController().signal;

function granted(result: AcquireResult): Grant {
  if (!result.acquired) throw new Error('not acquired');
  return result.grant;
}

function leaseOf(name: string, grant: Grant): Lease {
  return {
    name,
    ownerId: 'o',
    ownershipToken: grant.ownershipToken,
    fencingToken: grant.fencingToken,
    ...(grant.slot === undefined ? {} : { slot: grant.slot }),
  };
}

/** An outside transaction holding row locks (FOR UPDATE) until `end()`. */
async function rowLock(sql: string, values: unknown[]): Promise<{ end(): Promise<void> }> {
  const client = await pool.connect();
  await client.query('BEGIN');
  await client.query(sql, values);
  return {
    end: async () => {
      await client.query('COMMIT');
      client.release();
    },
  };
}

const permitRequest = (name: string, permits: number, waitMs: number) => ({
  name,
  ownerId: 'o',
  ttlMs: 15_000,
  waitMs,
  signal,
  permits,
});

describe('semaphore limit', () => {
  it('a grant that waited on a row lock decides on what committed meanwhile: two limits never hold at once', async () => {
    const service = new PostgresLockService({ pool, schema, listen: false });
    const name = 'limit-race';
    const p = granted(await service.acquirePermit(permitRequest(name, 2, 0)));
    // Creates slot 1's token row, for the outside transaction to lock.
    await service.release(leaseOf(name, granted(await service.acquirePermit(permitRequest(name, 2, 0)))));
    const lock = await rowLock(
      `SELECT 1 FROM "${schema}".dlock_tokens WHERE kind = 's' AND name = $1 AND slot = 1 FOR UPDATE`,
      [name],
    );
    // x sees p on slot 0 under limit 2, picks slot 1 and waits on its token row.
    const x = service.acquirePermit(permitRequest(name, 2, 0));
    await sleep(200);
    expect(await service.release(leaseOf(name, p))).toBe(true);
    // q, under limit 1, would see nothing live in its own snapshot.
    const q = service.acquirePermit(permitRequest(name, 1, 0)).then(
      (result) => result,
      (error: unknown) => error,
    );
    await sleep(200);
    await lock.end();
    const [xResult, qResult] = await Promise.all([x, q]);
    const live = await pool.query(
      `SELECT slot, permits FROM "${schema}".dlock_leases
        WHERE kind = 's' AND name = $1 AND expires_at > clock_timestamp()`,
      [name],
    );
    expect(new Set(live.rows.map((row: { permits: number }) => row.permits)).size).toBeLessThanOrEqual(1);
    expect(xResult.acquired).toBe(true);
    expect(qResult).toBeInstanceOf(PermitsMismatchError);
    await service.release(leaseOf(name, granted(xResult)));
    await service.close();
  });

  it('a waiter refused for another limit after it queued leaves no waiter row behind', async () => {
    const service = new PostgresLockService({ pool, schema });
    const name = 'limit-after-queue';
    const a = granted(await service.acquirePermit(permitRequest(name, 2, 0)));
    const b = granted(await service.acquirePermit(permitRequest(name, 2, 0)));
    const waiting = service.acquirePermit(permitRequest(name, 2, 10_000)).then(
      (result) => result,
      (error: unknown) => error,
    );
    await sleep(300);
    // Another limit appears while it waits (as a holder under another limit whose grant it never saw would).
    await pool.query(
      `UPDATE "${schema}".dlock_leases SET permits = 3 WHERE kind = 's' AND name = $1 AND slot = $2`,
      [name, a.slot],
    );
    await service.release(leaseOf(name, b));
    expect(await waiting).toBeInstanceOf(PermitsMismatchError);
    await sleep(300); // the leave runs in the background
    const rows = await pool.query(
      `SELECT count(*)::int AS n FROM "${schema}".dlock_waiters WHERE name = $1`,
      [name],
    );
    expect(rows.rows[0].n).toBe(0);
    await service.release(leaseOf(name, a));
    await service.close();
  });
});

describe('a reply lost while the statement stalls on the server', () => {
  it('the stalled statement grants nothing once past its bound, so the undo leaves no live lease', async () => {
    const service = new PostgresLockService({ pool, schema, listen: false, requestTimeoutMs: 300 });
    const name = 'stalled-grant';
    const request = { name, ownerId: 'o', ttlMs: 20_000, waitMs: 0, signal };
    await service.release(leaseOf(name, granted(await service.acquire(request))));
    const lock = await rowLock(
      `SELECT 1 FROM "${schema}".dlock_tokens WHERE kind = 'l' AND name = $1 AND slot = 0 FOR UPDATE`,
      [name],
    );
    await expect(service.acquire(request)).rejects.toThrow();
    // pg gives up on the statement (twice its bound) and the clean-up's retry runs; the backend still waits.
    await sleep(1_500);
    await lock.end();
    await sleep(300);
    const rows = await pool.query(
      `SELECT count(*)::int AS n FROM "${schema}".dlock_leases
        WHERE name = $1 AND expires_at > clock_timestamp()`,
      [name],
    );
    expect(rows.rows[0].n).toBe(0);
    expect((await service.acquire(request)).acquired).toBe(true);
    await service.close();
  });
});

describe('wake-ups racing releases', () => {
  async function keepListening(service: PostgresLockService): Promise<() => Promise<void>> {
    const held = granted(
      await service.acquire({ name: 'keep', ownerId: 'k', ttlMs: 30_000, waitMs: 0, signal }),
    );
    const stop = new AbortController();
    const waiter = service
      .acquire({ name: 'keep', ownerId: 'k2', ttlMs: 30_000, waitMs: 25_000, signal: stop.signal })
      .catch(() => undefined);
    await sleep(300);
    return async () => {
      stop.abort();
      await waiter;
      await service.release(leaseOf('keep', held));
    };
  }

  it.each(['l', 's'] as const)(
    'a waiter that queues while a release runs is woken by it (kind %s)',
    async (kind) => {
      const service = new PostgresLockService({ pool, schema });
      const stopKeeping = await keepListening(service);
      const name = `enqueue-during-release-${kind}`;
      const request = { name, ownerId: 'h', ttlMs: 15_000, waitMs: 0, signal, permits: 1 };
      const held = granted(
        kind === 'l' ? await service.acquire(request) : await service.acquirePermit(request),
      );
      // The release takes its snapshot (no waiter yet), then waits on the lease row.
      const lock = await rowLock(
        `SELECT 1 FROM "${schema}".dlock_leases WHERE kind = $1 AND name = $2 FOR UPDATE`,
        [kind, name],
      );
      const releasing = service.release(leaseOf(name, held));
      await sleep(200);
      const started = performance.now();
      const waitRequest = { ...request, ownerId: 'w', waitMs: 12_000 };
      const waiting = kind === 'l' ? service.acquire(waitRequest) : service.acquirePermit(waitRequest);
      await sleep(300);
      await lock.end();
      expect(await releasing).toBe(true);
      const result = await waiting;
      const tookMs = performance.now() - started;
      expect(result.acquired).toBe(true);
      expect(tookMs).toBeLessThan(1_000);
      await service.release(leaseOf(name, granted(result)));
      await stopKeeping();
      await service.close();
    },
  );

  it("a release's wake-up for a waiter already granted elsewhere is passed on to the next waiter", async () => {
    const service = new PostgresLockService({ pool, schema });
    const name = 'wake-passed-on';
    const a = granted(await service.acquirePermit(permitRequest(name, 2, 0)));
    const b = granted(await service.acquirePermit(permitRequest(name, 2, 0)));
    const w1 = service.acquirePermit(permitRequest(name, 2, 12_000));
    await sleep(300);
    const w2 = service.acquirePermit(permitRequest(name, 2, 12_000));
    await sleep(300);
    const lock = await rowLock(
      `SELECT 1 FROM "${schema}".dlock_leases WHERE kind = 's' AND name = $1 AND slot = $2 FOR UPDATE`,
      [name, b.slot],
    );
    // Sees w1 as the head, then waits; meanwhile a's release wakes w1, which takes a's slot.
    const releasingB = service.release(leaseOf(name, b));
    await sleep(200);
    expect(await service.release(leaseOf(name, a))).toBe(true);
    const g1 = granted(await w1);
    const started = performance.now();
    await lock.end();
    expect(await releasingB).toBe(true);
    const g2 = granted(await w2);
    expect(performance.now() - started).toBeLessThan(1_000);
    await service.release(leaseOf(name, g1));
    await service.release(leaseOf(name, g2));
    await service.close();
  });
});

describe('ensureSchema', () => {
  it('on existing tables waits for no table lock, so it neither waits for nor blocks writers', async () => {
    const service = new PostgresLockService({ pool, schema, listen: false, requestTimeoutMs: 2_000 });
    const lock = await rowLock(
      `INSERT INTO "${schema}".dlock_waiters (kind, name, id, expires_at) VALUES ('o', 'ddl', 'ddl', now())`,
      [],
    );
    const ensuring = service.ensureSchema();
    await sleep(300);
    const waiting = await pool.query(
      `SELECT count(*)::int AS n FROM pg_locks WHERE relation = '"${schema}".dlock_waiters'::regclass AND NOT granted`,
    );
    await ensuring;
    await lock.end();
    expect(waiting.rows[0].n).toBe(0);
    await service.close();
  });
});

describe('listening behind a proxy', () => {
  it('a LISTEN that notices never reach is found out, and waiters fall back to their backoff', async () => {
    // A transaction-pooling proxy runs the LISTEN on a server connection nobody reads: here, it goes nowhere.
    const listen = async () => {
      const client = new pg.Client({ connectionString: PG_URL });
      await client.connect();
      const query = client.query.bind(client) as (text: string) => Promise<pg.QueryResult>;
      return Object.assign(client, {
        query: (text: string) => query(text.startsWith('LISTEN') ? 'SELECT 1' : text),
      });
    };
    const service = new PostgresLockService({ pool, schema, listen, requestTimeoutMs: 500 });
    const name = 'proxied-listen';
    const request = { name, ownerId: 'o', ttlMs: 20_000, waitMs: 10_000, signal };
    const held = granted(await service.acquire({ ...request, waitMs: 0 }));
    const waiting = service.acquire(request);
    await sleep(1_500);
    const released = performance.now();
    await service.release(leaseOf(name, held));
    const result = await waiting;
    expect(result.acquired).toBe(true);
    // Without the check it would look again only at its row's refresh (a third of ~10 s).
    expect(performance.now() - released).toBeLessThan(1_500);
    await service.release(leaseOf(name, granted(result)));
    await service.close();
  });
});
