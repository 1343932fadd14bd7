/**
 * `pg_advisory_xact_lock`: the lock is the transaction. Acquire checks a connection out of the pool, `BEGIN`s and
 * takes the name's advisory lock (`pg_try_advisory_xact_lock` without waiting; `pg_advisory_xact_lock` under a
 * `lock_timeout` when it may wait, queued in the server's lock manager); release is `COMMIT`, which drops it, and
 * the connection goes back. No TTL, no fencing token, and a connection (with an open transaction) per held lock, so
 * scenario C (1,000 held locks) is not run for it.
 */
import { packageVersion } from '../lib/index.mjs';
import { countingPool } from './client.mjs';

export function advisorySubject({ poolSize = 10 } = {}) {
  let db;
  return {
    name: 'pg_advisory_xact_lock',
    version: `pg ${packageVersion('pg')}`,
    config: `BEGIN; SELECT pg_try_advisory_xact_lock(hashtext(name)) (waiting: SET LOCAL lock_timeout, then pg_advisory_xact_lock) … COMMIT; a pooled connection per held lock (pool of ${poolSize}: waiters beyond it queue in the pool)`,
    countRequests: async () => db.counts.statements,
    async setup() {
      db = countingPool(poolSize);
      await db.pool.query('SELECT 1');
    },
    async acquire(name, { waitMs, signal }) {
      if (signal?.aborted) return null;
      const connection = await db.connect();
      const { client, query } = connection;
      let open = false;
      try {
        await query('BEGIN');
        open = true;
        let granted;
        if (waitMs <= 0) {
          granted = (await query('SELECT pg_try_advisory_xact_lock(hashtext($1)) AS ok', [name])).rows[0].ok;
        } else {
          await query(`SET LOCAL lock_timeout = ${Math.max(1, Math.ceil(waitMs))}`);
          granted = await query('SELECT pg_advisory_xact_lock(hashtext($1))', [name]).then(
            () => true,
            (error) => {
              if (error.code === '55P03') return false; // lock_not_available: the wait ran out
              throw error;
            },
          );
        }
        if (!granted) {
          await query('ROLLBACK');
          client.release();
          return null;
        }
        return {
          release: async () => {
            try {
              await query('COMMIT');
              client.release();
            } catch (error) {
              client.release(error);
              throw error;
            }
          },
        };
      } catch (error) {
        if (open) await query('ROLLBACK').catch(() => {});
        client.release(error);
        throw error;
      }
    },
    async close() {
      await db?.pool.end().catch(() => {});
    },
  };
}
