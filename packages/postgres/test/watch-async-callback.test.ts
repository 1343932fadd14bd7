import { PostgresLockService } from '@dlock/postgres';
import { afterEach, describe, expect, it } from 'vitest';
import { newPool, usePrivateSchema } from './helpers.js';

const pool = newPool(4);
const schema = usePrivateSchema(pool, 'dlock_pg_watch_async');

const request = (name: string) => ({
  name,
  ownerId: 'o',
  ttlMs: 5_000,
  waitMs: 0,
  signal: new AbortController().signal,
});

describe('watch and watchChanges callbacks that return a rejected promise', () => {
  const unhandled: unknown[] = [];
  const record = (error: unknown): void => {
    unhandled.push(error);
  };
  afterEach(() => {
    process.off('unhandledRejection', record);
    unhandled.length = 0;
  });

  it('leave no unhandled rejection (Node ends the process on one), and the other callbacks still hear', async () => {
    process.on('unhandledRejection', record);
    const watcher = new PostgresLockService({ pool, schema: schema.name });
    const holder = new PostgresLockService({ pool, schema: schema.name });
    const heard: string[] = [];
    try {
      const name = 'n';
      // Typed () => void, an async callback type-checks all the same (LockClient catches its own; these are the
      // service's public watch and watchChanges, called directly).
      watcher.watch(name, async () => {
        throw new Error('async watch callback broke');
      });
      watcher.watchChanges(name, async () => {
        throw new Error('async change callback broke');
      });
      watcher.watch(name, () => heard.push('watch'));
      // The other service's release reaches the watcher by a notice through the server: wait until it observes.
      const deadline = Date.now() + 5_000;
      for (;;) {
        const rows = await pool.query(
          `SELECT count(*)::int AS n FROM "${schema.name}".dlock_waiters WHERE kind = 'o' AND name = $1`,
          [name],
        );
        if (rows.rows[0]?.n === 1 || Date.now() > deadline) break;
        await new Promise((resolve) => setTimeout(resolve, 20));
      }
      // Its own grant and release (told in process) and the other service's (told by a notice).
      for (const service of [watcher, holder]) {
        const taken = await service.acquire(request(name));
        if (!taken.acquired) throw new Error('not acquired');
        await service.release({
          name,
          ownerId: 'o',
          ownershipToken: taken.grant.ownershipToken,
          fencingToken: taken.grant.fencingToken,
        });
      }
      const heardBy = Date.now() + 5_000;
      while (heard.length < 4 && Date.now() < heardBy)
        await new Promise((resolve) => setTimeout(resolve, 20));
      await new Promise((resolve) => setImmediate(resolve));
      expect(unhandled).toEqual([]);
      expect(heard.length).toBeGreaterThanOrEqual(4);
    } finally {
      await watcher.close();
      await holder.close();
    }
  });
});
