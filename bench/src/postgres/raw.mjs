/**
 * The floor: a lease row per name, taken by one `INSERT … ON CONFLICT DO UPDATE … WHERE expired` and given back by
 * an owner-checked `DELETE`, expiry by the server's clock. No queue and no fencing token: when it has to wait it
 * polls (a fixed retry delay, as a hand-written lease would). Scenario C renews every held lease in one `UPDATE`
 * per third of the TTL.
 */
import { randomBytes } from 'node:crypto';
import { now, packageVersion, sleep } from '../lib/index.mjs';
import { countingPool, dropSchema } from './client.mjs';

const SCHEMA = 'dlock_bench_raw';

export function rawSubject({ retryDelayMs = 10, retryJitterMs = 5 } = {}) {
  let db;
  const held = new Map();
  let renewing;
  const T = `"${SCHEMA}".lease`;

  const tryOnce = async (name, ttlMs) => {
    const owner = randomBytes(12).toString('base64url');
    const result = await db.query(
      `INSERT INTO ${T} AS l (name, owner, expires_at) VALUES ($1, $2, clock_timestamp() + $3 * interval '1 ms')
       ON CONFLICT (name) DO UPDATE SET owner = excluded.owner, expires_at = excluded.expires_at
        WHERE l.expires_at <= clock_timestamp()
       RETURNING 1`,
      [name, owner, ttlMs],
    );
    if (result.rowCount !== 1) return null;
    return {
      owner,
      release: async () => {
        held.delete(owner);
        await db.query(`DELETE FROM ${T} WHERE name = $1 AND owner = $2`, [name, owner]);
      },
    };
  };

  const acquire = async (name, { ttlMs, waitMs, signal }) => {
    const deadline = now() + waitMs;
    for (;;) {
      const lease = await tryOnce(name, ttlMs);
      if (lease) return lease;
      const left = deadline - now();
      if (left <= 0 || signal?.aborted) return null;
      await sleep(Math.min(left, retryDelayMs + (Math.random() * 2 - 1) * retryJitterMs), signal);
    }
  };

  return {
    name: 'raw INSERT … ON CONFLICT lease',
    version: `pg ${packageVersion('pg')}`,
    baseline: true,
    config: `one lease row per name: INSERT … ON CONFLICT DO UPDATE WHERE expired (1 statement) + owner-checked DELETE (1 statement), no token, no queue; waits poll every ${retryDelayMs}±${retryJitterMs} ms; (C): one UPDATE for every held lease each TTL/3`,
    countRequests: async () => db.counts.statements,
    countCommands: async () => db.counts.rowsUpdated,
    async setup() {
      db = countingPool(10);
      await db.pool.query(`CREATE SCHEMA IF NOT EXISTS "${SCHEMA}"`);
      await db.pool.query(
        `CREATE TABLE IF NOT EXISTS ${T} (name text PRIMARY KEY, owner text NOT NULL, expires_at timestamptz NOT NULL)`,
      );
    },
    acquire,
    async hold(name, { ttlMs }) {
      const lease = await acquire(name, { ttlMs, waitMs: 0 });
      if (!lease) throw new Error(`raw: ${name} is busy`);
      held.set(lease.owner, ttlMs);
      renewing ??= setInterval(() => {
        if (held.size === 0) return;
        db.query(
          `UPDATE ${T} SET expires_at = clock_timestamp() + $2 * interval '1 ms' WHERE owner = ANY($1)`,
          [[...held.keys()], ttlMs],
        ).catch(() => {});
      }, ttlMs / 3);
      return lease;
    },
    async close() {
      clearInterval(renewing);
      await db?.pool.end().catch(() => {});
      await dropSchema(SCHEMA).catch(() => {});
    },
  };
}
