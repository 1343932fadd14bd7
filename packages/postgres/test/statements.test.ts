import { LockClient } from '@dlock/core';
import { PostgresLockService } from '@dlock/postgres';
import type pg from 'pg';
import { describe, expect, it } from 'vitest';
import { hooked, newPool, usePrivateSchema } from './helpers.js';

const pool = newPool(10);
const tables = usePrivateSchema(pool);

/** The pool as the service sees it, counting every statement that reaches it (what goes over the wire). */
function countingPool(real: pg.Pool): { pool: pg.Pool; sent: string[] } {
  const sent: string[] = [];
  // A config ({ text, values }, and a name with preparedStatements), by the pool's query or on a client of its own.
  const pool = hooked(real, (query, run) => {
    sent.push(query.text.slice(0, 40).replace(/\s+/g, ' '));
    return run();
  });
  return { pool, sent };
}

/** A service checks each listening connection it opens with one notice to itself through the pool. */
const isListeningCheck = (text: string): boolean => text.startsWith('SELECT pg_notify($1, $2)');
const operations = (sent: readonly string[]): number => sent.filter((text) => !isListeningCheck(text)).length;

async function cycles(client: LockClient, n: number, waitMs: number): Promise<void> {
  for (let i = 0; i < n; i++) {
    const lock = await client.acquire(`cycle-${waitMs}`, { ttlMs: 10_000, waitMs });
    await lock.release();
  }
}

describe('statements per operation (counted at the pool)', () => {
  it.each([false, true])(
    'uncontended acquire + release: one statement each, with or without a wait budget (prepared: %s)',
    async (preparedStatements) => {
      const { pool: counting, sent } = countingPool(pool);
      const service = new PostgresLockService({ pool: counting, schema: tables.name, preparedStatements });
      const client = new LockClient(service);
      await cycles(client, 20, 0);
      expect(sent.length).toBe(40);
      sent.length = 0;
      await cycles(client, 20, 5_000);
      expect(operations(sent)).toBe(40);
      const checks = sent.length - 40;
      expect(checks).toBeLessThanOrEqual(1);
      expect(service.statements).toBe(80 + checks);
      await client.close();
      await service.close();
    },
  );

  it('a refused tryAcquire is one statement; a permit is one statement to take and one to give back', async () => {
    const { pool: counting, sent } = countingPool(pool);
    const service = new PostgresLockService({ pool: counting, schema: tables.name });
    const client = new LockClient(service);
    const holder = await client.acquire('busy', { ttlMs: 10_000 });
    sent.length = 0;
    expect(await new LockClient(service).tryAcquire('busy', { ttlMs: 1_000 })).toBeNull();
    expect(sent.length).toBe(1);
    await holder.release();
    sent.length = 0;
    const permit = await client
      .semaphore('pool-of-3', { permits: 3, ttlMs: 10_000 })
      .acquire({ waitMs: 1_000 });
    await permit.release();
    expect(operations(sent)).toBe(2);
    await client.close();
    await service.close();
  });

  it('renewMany of 1,000 held leases is one statement, and renews them all', async () => {
    const { pool: counting, sent } = countingPool(pool);
    const service = new PostgresLockService({ pool: counting, schema: tables.name, listen: false });
    const signal = new AbortController().signal;
    const leases = [];
    for (let i = 0; i < 1_000; i++) {
      const result = await service.acquire({
        name: `held-${i}`,
        ownerId: 'o',
        ttlMs: 20_000,
        waitMs: 0,
        signal,
      });
      if (!result.acquired) throw new Error('not acquired');
      const { ownershipToken, fencingToken } = result.grant;
      leases.push({ name: `held-${i}`, ownerId: 'o', ownershipToken, fencingToken });
    }
    sent.length = 0;
    const started = performance.now();
    const results = await service.renewMany(leases.map((lease) => ({ lease, ttlMs: 20_000 })));
    const tookMs = performance.now() - started;
    expect(sent.length).toBe(1);
    expect(results.every((r) => r.renewed)).toBe(true);
    console.log(`renewMany of 1,000 leases: 1 statement, ${tookMs.toFixed(1)} ms`);
    const [first] = leases;
    if (!first) throw new Error('no lease');
    const wrongToken = { ...first, fencingToken: first.fencingToken + 99n };
    expect(await service.renewMany([{ lease: wrongToken, ttlMs: 1_000 }])).toEqual([{ renewed: false }]);
    await Promise.all(leases.map((lease) => service.release(lease)));
    await service.close();
  });
});

describe('what a release commits', () => {
  it('does not wait for its WAL flush, and turns that off for its own transaction only', async () => {
    const one = newPool(1);
    try {
      // Nothing waits here: no LISTEN, which a pool of one connection could not also carry.
      const service = new PostgresLockService({ pool: one, schema: tables.name, listen: false });
      const client = new LockClient(service);
      await cycles(client, 3, 0);
      // The pool's only connection ran the three releases: none left its setting behind.
      expect((await one.query('SHOW synchronous_commit')).rows[0]).toEqual({ synchronous_commit: 'on' });
      await client.close();
      await service.close();

      const connection = await one.connect();
      try {
        await connection.query('BEGIN');
        // A release of nothing (no such owner) still runs the function's body.
        await connection.query(
          `SELECT * FROM "${tables.name}".dlock_release('l', 'nobody-here', 0, 'nobody', 1, 3000)`,
        );
        const inside = await connection.query("SELECT current_setting('synchronous_commit') AS s");
        await connection.query('COMMIT');
        const after = await connection.query("SELECT current_setting('synchronous_commit') AS s");
        expect(inside.rows[0]).toEqual({ s: 'off' });
        expect(after.rows[0]).toEqual({ s: 'on' });
      } finally {
        connection.release();
      }
    } finally {
      await one.end();
    }
  });
});
