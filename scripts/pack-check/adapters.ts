// Each lock adapter, installed from its tarball with its peer client from the registry, takes and releases a lock on
// the local server through @dlock/core: proves the adapters' exports, types and peer ranges work outside the
// workspace. Run by scripts/pack-check.sh after smoke.ts; every server is local and every call is bounded.
import { LockClient, type LockService } from '@dlock/core';
import { EtcdLockService } from '@dlock/etcd';
import { PostgresLockService } from '@dlock/postgres';
import { RedisLockService, RedlockService } from '@dlock/redis';
import { ZooKeeperLockService } from '@dlock/zookeeper';
import { Etcd3 } from 'etcd3';
import pg from 'pg';
import { createClient } from 'redis';

async function roundTrip(label: string, service: LockService): Promise<void> {
  const client = new LockClient(service);
  try {
    const name = `pack-check ${label} ${process.pid} {é}`;
    const first = await client.acquire(name, { ttlMs: 3_000, waitMs: 5_000 });
    const firstToken: bigint = first.fencingToken;
    await first.release();
    const second = await client.acquire(name, { ttlMs: 3_000, waitMs: 5_000 });
    if (second.fencingToken <= firstToken) throw new Error(`${label}: fencing token did not increase`);
    await second.release();
  } finally {
    await client.close();
  }
  console.log(`pack-check: ${label} acquires, increases its token and releases`);
}

const redis = createClient({ url: 'redis://127.0.0.1:6379' });
await redis.connect();
try {
  await roundTrip('@dlock/redis RedisLockService', new RedisLockService({ client: redis }));
  await roundTrip('@dlock/redis RedlockService (one node)', new RedlockService({ clients: [redis] }));
} finally {
  redis.destroy();
}

const etcd = new Etcd3({ hosts: '127.0.0.1:2379' });
const etcdService = new EtcdLockService({ client: etcd, session: true });
try {
  await roundTrip('@dlock/etcd', etcdService);
} finally {
  await etcdService.close();
  etcd.close();
}

const zookeeper = new ZooKeeperLockService({ connectionString: '127.0.0.1:2181' });
try {
  await roundTrip('@dlock/zookeeper', zookeeper);
} finally {
  await zookeeper.close();
}

// PostgreSQL: tables in a schema of this run's own, dropped after; a waiter queued in the database is handed the lock
// by the holder's release (one notice) with a higher token.
const pool = new pg.Pool({ connectionString: 'postgres://postgres@127.0.0.1:5432/test' });
const schema = `pack_check_${process.pid}`;
const postgres = new PostgresLockService({ pool, schema });
try {
  await postgres.ensureSchema();
  await roundTrip('@dlock/postgres', postgres);
  const first = new LockClient(postgres);
  const second = new LockClient(postgres);
  try {
    const holder = await first.acquire('pack-check hand-off', { ttlMs: 10_000 });
    const waiting = second.acquire('pack-check hand-off', { ttlMs: 10_000, waitMs: 5_000 });
    await new Promise((resolve) => setTimeout(resolve, 100));
    await holder.release();
    const next = await waiting;
    if (next.fencingToken <= holder.fencingToken)
      throw new Error('@dlock/postgres: hand-off token did not increase');
    await next.release();
  } finally {
    await Promise.all([first.close(), second.close()]);
  }
  console.log('pack-check: @dlock/postgres hands a released lock to a waiter queued in PostgreSQL');
} finally {
  await postgres.close();
  await pool.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
  await pool.end();
}
