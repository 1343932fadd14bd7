// Compiled against the packed packages with plain tsc (NodeNext) and run with plain node: proves that the exports
// maps, the type declarations and the runtime entry points work for a user outside this workspace.
import { isDLockError, LockClient, MemoryLockService } from '@dlock/core';
import { fenced } from '@dlock/fencing-kysely';
import { FencingGate, StaleFencingTokenError } from '@dlock/fencing-pg';
import { instrument, METRICS } from '@dlock/opentelemetry';
import { FakeClock, FencedStore } from '@dlock/testing';
import { Kysely, PostgresDialect } from 'kysely';
import pg from 'pg';

const clock = new FakeClock();
const client = new LockClient(new MemoryLockService({ clock }), { clock });
const store = new FencedStore<string>();
const lock = await client.acquire('smoke', { ttlMs: 1_000 });
const token: bigint = lock.fencingToken;
if (!store.write('smoke', token, 'ok').accepted) throw new Error('write rejected');
await lock.release();
const error = await client.acquire('', { ttlMs: 1_000 }).catch((e: unknown) => e);
if (!isDLockError(error) || error.code !== 'INVALID_ARGUMENT') throw new Error('expected INVALID_ARGUMENT');
await client.close();
console.log('pack-check: @dlock/core and @dlock/testing install and work on their own');

// @dlock/opentelemetry with only its peer @opentelemetry/api (no SDK: the global no-op providers).
const observed = new LockClient(new MemoryLockService({ clock }), { clock });
const uninstrument = instrument(observed, { nameAttribute: (name) => name.split(':')[0] });
await (await observed.acquire('smoke:1', { ttlMs: 1_000 })).release();
const badOption = (() => {
  try {
    instrument(observed, { nameAttribute: true as never });
  } catch (e) {
    return e;
  }
})();
if (!isDLockError(badOption) || badOption.code !== 'INVALID_ARGUMENT')
  throw new Error('expected INVALID_ARGUMENT');
uninstrument[Symbol.dispose]();
await observed.close();
console.log(`pack-check: @dlock/opentelemetry installs and instruments a client (${METRICS.acquireWait}, …)`);

// The fencing gates, each on its own, against the local PostgreSQL when one answers (CI always has one).

const pool = new pg.Pool({
  connectionString: 'postgres://postgres@127.0.0.1:5432/test',
  max: 2,
});
const table = `pack_check_${process.pid}`;
const gate = new FencingGate({ table });
try {
  await gate.ensureSchema(pool);
  await gate.run(pool, 'smoke', 2n, async (tx) => tx.query('select 1'));
  const stale = await gate.run(pool, 'smoke', 1n, async () => 'written').catch((e: unknown) => e);
  if (!(stale instanceof StaleFencingTokenError) || stale.highWaterMark !== 2n)
    throw new Error('expected a stale rejection');
  const db = new Kysely<Record<string, never>>({ dialect: new PostgresDialect({ pool }) });
  const value = await fenced(db, 'smoke', 3, async () => 'kysely ok', { table });
  if (value !== 'kysely ok') throw new Error('fenced() did not return the callback value');
  console.log('pack-check: @dlock/fencing-pg and @dlock/fencing-kysely install and work on their own');
} finally {
  await pool.query(gate.sql.dropTable);
  await pool.end();
}
