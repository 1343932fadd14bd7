import { PostgresLockService } from '@dlock/postgres';
import type pg from 'pg';
import { describe, expect, it } from 'vitest';
import { hooked, newPool, usePrivateSchema } from './helpers.js';

// An unsubscribe followed at once by a new subscription of the same name: the old subscription's delete of the
// observer row may reach the server after the new one's insert (here its connection is slow to send it), and must
// not take the new subscription's row with it, or the notices meant for it go nowhere until the next refresh (20 s).
const pool = newPool(6);
const tables = usePrivateSchema(pool, 'dlock_pg_resub');

const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

/** `pool`, whose connections send the observer row's delete 300 ms late (a slow link for that statement). */
function slowDeletes(real: pg.Pool): pg.Pool {
  return hooked(real, async (config, run) => {
    if (/^DELETE FROM \S+ w WHERE w\.kind = 'o'/.test(config.text)) await sleep(300);
    return run();
  });
}

async function observers(name: string): Promise<number> {
  const result = await pool.query<{ n: number }>(
    `SELECT count(*)::int AS n FROM "${tables.name}".dlock_waiters
      WHERE kind = 'o' AND name = $1 AND expires_at > clock_timestamp()`,
    [name],
  );
  return result.rows[0]?.n ?? 0;
}

async function until(predicate: () => Promise<boolean>, maxMs: number): Promise<boolean> {
  const end = performance.now() + maxMs;
  while (performance.now() < end) {
    if (await predicate()) return true;
    await sleep(10);
  }
  return predicate();
}

describe('unsubscribe, then subscribe again at once', () => {
  it("the old subscription's late delete leaves the new subscription's observer row, and its notices arrive", async () => {
    const own = newPool(4);
    const observer = new PostgresLockService({ pool: slowDeletes(own), schema: tables.name });
    const writer = new PostgresLockService({ pool, schema: tables.name, listen: false });
    const name = 'resubscribed';
    try {
      const first = observer.watchChanges(name, () => {});
      expect(await until(async () => (await observers(name)) === 1, 2_000)).toBe(true);
      first();
      // The delete is on its way (slowly); the new subscription's insert goes out meanwhile and lands first.
      await sleep(50);
      let changes = 0;
      const second = observer.watchChanges(name, () => {
        changes++;
      });
      // Once its row is in place, the subscription looks once.
      expect(await until(async () => changes >= 1, 2_000)).toBe(true);
      await sleep(600);
      expect(await observers(name)).toBe(1);
      const seen = changes;
      const signal = new AbortController().signal;
      const grant = await writer.acquire({ name, ownerId: 'w', ttlMs: 10_000, waitMs: 0, signal });
      expect(grant.acquired).toBe(true);
      expect(await until(async () => changes > seen, 1_000)).toBe(true);
      second();
      expect(await until(async () => (await observers(name)) === 0, 2_000)).toBe(true);
    } finally {
      await Promise.all([observer.close(), writer.close()]);
      await own.end();
    }
  });
});
