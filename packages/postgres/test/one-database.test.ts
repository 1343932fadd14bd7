import { LockClient } from '@dlock/core';
import { FencingGate, StaleFencingTokenError } from '@dlock/fencing-pg';
import { PostgresLockService } from '@dlock/postgres';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { newPool, privateSchema } from './helpers.js';

const pool = newPool(10);
let schema = '';
let drop: () => Promise<void> = async () => {};
beforeAll(async () => {
  ({ schema, drop } = await privateSchema(pool));
  await pool.query(`CREATE TABLE "${schema}".accounts (id int PRIMARY KEY, balance int NOT NULL)`);
  await pool.query(`INSERT INTO "${schema}".accounts VALUES (42, 100)`);
});
afterAll(async () => {
  await drop();
  await pool.end();
});

describe('one database: the lock, its tokens and the fencing gate side by side', () => {
  it("a holder paused past its lease is refused by @dlock/fencing-pg's gate in the same database", async () => {
    const service = new PostgresLockService({ pool, schema });
    const gate = new FencingGate({ schema });
    await gate.ensureSchema(pool);
    const a = new LockClient(service);
    const b = new LockClient(service);
    // A's lease is not renewed (a stand-in for a process frozen past its TTL).
    const stale = await a.acquire('account:42', { ttlMs: 300, renew: false });
    await gate.runFenced(pool, 'account:42', stale.fencingToken, (tx) =>
      tx.query(`UPDATE "${schema}".accounts SET balance = balance + 10 WHERE id = 42`),
    );
    const fresh = await b.acquire('account:42', { ttlMs: 10_000, waitMs: 5_000 });
    expect(fresh.fencingToken).toBeGreaterThan(stale.fencingToken);
    await gate.runFenced(pool, 'account:42', fresh.fencingToken, async (tx) => {
      // The same transaction can also see that the lease is still live, by the server's clock.
      const live = await tx.query(
        `SELECT 1 FROM "${schema}".dlock_leases
          WHERE kind = 'l' AND name = $1 AND token = $2::bigint AND expires_at > clock_timestamp()`,
        ['account:42', fresh.fencingToken.toString()],
      );
      expect(live.rows).toHaveLength(1);
      await tx.query(`UPDATE "${schema}".accounts SET balance = balance - 30 WHERE id = 42`);
    });
    // The paused holder wakes up and writes with its old token: refused in the write's own transaction.
    const refused = await gate
      .runFenced(pool, 'account:42', stale.fencingToken, (tx) =>
        tx.query(`UPDATE "${schema}".accounts SET balance = 0 WHERE id = 42`),
      )
      .catch((error: unknown) => error);
    expect(refused).toBeInstanceOf(StaleFencingTokenError);
    const balance = await pool.query(`SELECT balance FROM "${schema}".accounts WHERE id = 42`);
    expect(balance.rows[0]).toEqual({ balance: 80 });
    expect(await gate.highWaterMark(pool, 'account:42')).toBe(fresh.fencingToken);
    await fresh.release();
    await Promise.all([a.close(), b.close()]);
    await service.close();
  });
});
