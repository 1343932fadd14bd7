import { LockClient, type LockHandle, TransportError } from '@dlock/core';
import { PostgresLockService } from '@dlock/postgres';
import { describe, expect, it } from 'vitest';
import { hooked, newPool, usePrivateSchema } from './helpers.js';

const pool = newPool(20);
const tables = usePrivateSchema(pool);

const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));
const signal = new AbortController().signal;

async function until(predicate: () => Promise<boolean> | boolean, maxMs: number): Promise<boolean> {
  const end = performance.now() + maxMs;
  while (performance.now() < end) {
    if (await predicate()) return true;
    await sleep(20);
  }
  return predicate();
}

async function rowsOf(table: 'leases' | 'waiters', name: string): Promise<number> {
  const result = await pool.query(
    `SELECT count(*)::int AS n FROM "${tables.name}".dlock_${table} WHERE name = $1`,
    [name],
  );
  return result.rows[0].n;
}

describe('the queue', () => {
  it('serves 6 waiters of two services in arrival order, each woken by one notice (3 statements each)', async () => {
    const services = [
      new PostgresLockService({ pool, schema: tables.name }),
      new PostgresLockService({ pool, schema: tables.name }),
    ];
    const [first, second] = services as [PostgresLockService, PostgresLockService];
    const holder = await new LockClient(first).acquire('fifo', { ttlMs: 10_000 });
    const before = first.statements + second.statements;
    const order: number[] = [];
    const waits: Promise<void>[] = [];
    for (let i = 0; i < 6; i++) {
      const client = new LockClient(services[i % 2] as PostgresLockService);
      waits.push(
        client.acquire('fifo', { ttlMs: 10_000, waitMs: 20_000 }).then(async (handle: LockHandle) => {
          order.push(i);
          await handle.release();
          await client.close();
        }),
      );
      await until(async () => (await rowsOf('waiters', 'fifo')) === i + 1, 2_000);
    }
    const started = performance.now();
    await holder.release();
    await Promise.all(waits);
    const tookMs = performance.now() - started;
    expect(order).toEqual([0, 1, 2, 3, 4, 5]);
    // Each waiter: its enqueue, one re-check after its notice, its release (and the holder's release); each service
    // checks its new listening connection once (a notice to itself through the pool).
    const spent = first.statements + second.statements - before;
    expect(spent).toBeLessThanOrEqual(6 * 3 + 1 + 2 + 2);
    console.log(`6 hand-offs in ${tookMs.toFixed(0)} ms, ${spent} statements`);
    expect(await rowsOf('waiters', 'fifo')).toBe(0);
    await Promise.all(services.map((s) => s.close()));
  });

  it('the first waiter behind a live holder names itself in the lease row, so a racing release still wakes it', async () => {
    const service = new PostgresLockService({ pool, schema: tables.name });
    const holder = await new LockClient(service).acquire('marked', { ttlMs: 10_000 });
    const client = new LockClient(service);
    const waiting = client.acquire('marked', { ttlMs: 10_000, waitMs: 10_000 });
    await until(async () => (await rowsOf('waiters', 'marked')) === 1, 2_000);
    const row = await pool.query(
      `SELECT next_waiter = (SELECT id FROM "${tables.name}".dlock_waiters WHERE name = 'marked') AS named, next_channel
         FROM "${tables.name}".dlock_leases WHERE name = 'marked'`,
    );
    expect(row.rows).toEqual([{ named: true, next_channel: service.channel }]);
    await holder.release();
    await (await waiting).release();
    await client.close();
    await service.close();
  });

  it('without LISTEN (listen: false) waiters are still served, in order, on their backoff', async () => {
    const service = new PostgresLockService({ pool, schema: tables.name, listen: false });
    const holder = await new LockClient(service).acquire('quiet', { ttlMs: 10_000 });
    const order: number[] = [];
    const waits = [0, 1, 2].map(async (i) => {
      await sleep(100 * i);
      const client = new LockClient(service);
      const handle = await client.acquire('quiet', { ttlMs: 10_000, waitMs: 10_000 });
      order.push(i);
      await handle.release();
      await client.close();
    });
    await sleep(400);
    await holder.release();
    await Promise.all(waits);
    expect(order).toEqual([0, 1, 2]);
    await service.close();
  });

  it("a crashed waiter's row stops counting at its expiry and is deleted by the next statement on the name", async () => {
    const service = new PostgresLockService({ pool, schema: tables.name, listen: false });
    await pool.query(
      `INSERT INTO "${tables.name}".dlock_waiters (kind, name, id, channel, expires_at)
       VALUES ('l', 'crashed-waiter', 'gone', 'nobody', clock_timestamp() + interval '400 ms')`,
    );
    const request = { name: 'crashed-waiter', ownerId: 'o', ttlMs: 5_000, waitMs: 0, signal };
    expect((await service.acquire(request)).acquired).toBe(false);
    await sleep(450);
    expect((await service.acquire(request)).acquired).toBe(true);
    expect(await rowsOf('waiters', 'crashed-waiter')).toBe(0);
    await service.close();
  });

  it('wakes its waiters after its listening connection is killed, and listens again', async () => {
    const service = new PostgresLockService({ pool, schema: tables.name });
    const holder = await new LockClient(service).acquire('relisten', { ttlMs: 10_000 });
    const client = new LockClient(service);
    const waiting = client.acquire('relisten', { ttlMs: 10_000, waitMs: 10_000 });
    const listener = async () =>
      (
        await pool.query<{ pid: number }>(
          `SELECT pid FROM pg_stat_activity WHERE query = $1 AND pid <> pg_backend_pid()`,
          [`LISTEN ${service.channel}`],
        )
      ).rows;
    expect(await until(async () => (await listener()).length === 1, 3_000)).toBe(true);
    const [killed] = await listener();
    await pool.query('SELECT pg_terminate_backend($1)', [killed?.pid]);
    expect(await until(async () => (await listener()).some((r) => r.pid !== killed?.pid), 5_000)).toBe(true);
    const released = performance.now();
    await holder.release();
    const next = await waiting;
    expect(performance.now() - released).toBeLessThan(1_000);
    await next.release();
    await client.close();
    await service.close();
  });
});

describe("a semaphore's queue", () => {
  it('three slots freed at once reach three waiters without waiting for a refresh', async () => {
    const service = new PostgresLockService({ pool, schema: tables.name });
    const sem = (client: LockClient) => client.semaphore('trio', { permits: 3, ttlMs: 10_000 });
    const holders = await Promise.all([0, 1, 2].map(() => sem(new LockClient(service)).acquire()));
    const clients = [0, 1, 2].map(() => new LockClient(service));
    const waits = [];
    for (const client of clients) {
      waits.push(sem(client).acquire({ waitMs: 20_000 }));
      await until(async () => (await rowsOf('waiters', 'trio')) === waits.length, 2_000);
    }
    const released = performance.now();
    await Promise.all(holders.map((h) => h.release()));
    const permits = await Promise.all(waits);
    const tookMs = performance.now() - released;
    expect(new Set(permits.map((p) => p.slot))).toEqual(new Set([0, 1, 2]));
    for (const permit of permits) {
      const before = holders.find((h) => h.slot === permit.slot);
      expect(permit.fencingToken).toBeGreaterThan(before?.fencingToken ?? 0n);
    }
    // Far below a waiter row's refresh (a third of its lease: 3.3 s here).
    expect(tookMs).toBeLessThan(1_000);
    await Promise.all(permits.map((p) => p.release()));
    await Promise.all(clients.map((c) => c.close()));
    await service.close();
  });
});

describe('undo', () => {
  it('a grant whose reply is lost in transit is given back once the statement settles', async () => {
    let delayMs = 0;
    // The acquire statement reaches the server only after the caller gave up on it, and then commits its grant.
    const slow = hooked(pool, async (query, run) => {
      if (delayMs > 0 && query.text.includes('dlock_lock"(')) await sleep(delayMs);
      return run();
    });
    const service = new PostgresLockService({ pool: slow, schema: tables.name, requestTimeoutMs: 200 });
    delayMs = 600;
    const lost = await service
      .acquire({ name: 'lost-reply', ownerId: 'o', ttlMs: 30_000, waitMs: 0, signal })
      .catch((error: unknown) => error);
    expect(lost).toBeInstanceOf(TransportError);
    delayMs = 0;
    // The grant lands after the call failed; the background leave, retried until that statement settled, removes
    // it (not the 30 s lease).
    const minted = async () =>
      (await pool.query(`SELECT 1 FROM "${tables.name}".dlock_tokens WHERE name = 'lost-reply'`)).rows
        .length === 1;
    expect(await until(minted, 2_000)).toBe(true);
    expect(await until(async () => (await rowsOf('leases', 'lost-reply')) === 0, 3_000)).toBe(true);
    const other = new PostgresLockService({ pool, schema: tables.name, listen: false });
    const request = { name: 'lost-reply', ownerId: 'p', ttlMs: 5_000, waitMs: 0, signal };
    expect((await other.acquire(request)).acquired).toBe(true);
    await Promise.all([service.close(), other.close()]);
  });
});

describe('close', () => {
  it('ends a pending acquire (its waiter row removed) and rejects every later call with ClientClosedError', async () => {
    const service = new PostgresLockService({ pool, schema: tables.name });
    const other = new PostgresLockService({ pool, schema: tables.name, listen: false });
    const holder = await new LockClient(other).acquire('closing', { ttlMs: 10_000 });
    const pending = service.acquire({ name: 'closing', ownerId: 'o', ttlMs: 5_000, waitMs: 20_000, signal });
    pending.catch(() => {});
    await until(async () => (await rowsOf('waiters', 'closing')) === 1, 2_000);
    await service.close();
    await expect(pending).rejects.toMatchObject({ code: 'CLIENT_CLOSED' });
    expect(await rowsOf('waiters', 'closing')).toBe(0);
    const lease = { name: 'closing', ownerId: 'o', ownershipToken: 'x'.repeat(22), fencingToken: 1n };
    const calls: Promise<unknown>[] = [
      service.acquire({ name: 'closing', ownerId: 'o', ttlMs: 5_000, waitMs: 0, signal }),
      service.acquirePermit({ name: 's', ownerId: 'o', ttlMs: 5_000, waitMs: 0, signal, permits: 2 }),
      service.renew({ lease, ttlMs: 5_000 }),
      service.renewMany([{ lease, ttlMs: 5_000 }]),
      service.release(lease),
      service.inspect('closing'),
      service.updateMetadata(lease, 'm'),
      service.availablePermits('s', 2),
      service.ensureSchema(),
      service.sweep(),
    ];
    for (const call of calls) await expect(call).rejects.toMatchObject({ code: 'CLIENT_CLOSED' });
    await holder.release();
    await other.close();
  });

  it("retries a pending acquire's clean-up that failed as it closed, so its waiter row does not outlive it", async () => {
    let failLeaves = 0;
    // The first leave statement fails as on a connection killed under it (pg_terminate_backend, a failover).
    const flaky = hooked(pool, async (query, run) => {
      if (failLeaves > 0 && query.text.includes('left_queue')) {
        failLeaves--;
        throw new Error('Connection terminated unexpectedly');
      }
      return run();
    });
    const service = new PostgresLockService({ pool: flaky, schema: tables.name, requestTimeoutMs: 1_000 });
    const other = new PostgresLockService({ pool, schema: tables.name, listen: false });
    const name = 'closing-flaky';
    const holder = await new LockClient(other).acquire(name, { ttlMs: 10_000 });
    const pending = service.acquire({ name, ownerId: 'o', ttlMs: 5_000, waitMs: 20_000, signal });
    pending.catch(() => {});
    expect(await until(async () => (await rowsOf('waiters', name)) === 1, 2_000)).toBe(true);
    failLeaves = 1;
    await service.close();
    await expect(pending).rejects.toMatchObject({ code: 'CLIENT_CLOSED' });
    expect(failLeaves).toBe(0);
    // Not a waiter row ahead of everyone for its lease (10 s here): the next caller is served once the holder goes.
    expect(await rowsOf('waiters', name)).toBe(0);
    await holder.release();
    await other.close();
  });

  it.each([
    ['a lock, tryAcquire', 'l', 0],
    ['a lock, waiting', 'l', 20_000],
    ['a semaphore', 's', 20_000],
  ] as const)(
    'an acquire statement still running when close() ends its call grants nothing that stays (%s)',
    async (_, kind, waitMs) => {
      const service = new PostgresLockService({ pool, schema: tables.name, requestTimeoutMs: 1_000 });
      const name = `close-in-flight-${kind}-${waitMs}`;
      const request = { name, ownerId: 'o', ttlMs: 30_000, waitMs: 0, signal, permits: 1 };
      const take = (r: typeof request) => (kind === 'l' ? service.acquire(r) : service.acquirePermit(r));
      const first = await take(request);
      if (!first.acquired) throw new Error('not acquired');
      const { ownershipToken, fencingToken } = first.grant;
      await service.release({
        name,
        ownerId: 'o',
        ownershipToken,
        fencingToken,
        ...(kind === 's' ? { slot: 0 } : {}),
      });
      // An outside transaction holds the row the acquire statement locks first (the name's token row, or the
      // semaphore's admission row), so the statement is still running on the server when close() ends its call.
      const blocker = await pool.connect();
      await blocker.query('BEGIN');
      await blocker.query(
        `SELECT 1 FROM "${tables.name}".dlock_tokens WHERE kind = $1 AND name = $2 AND slot = $3 FOR UPDATE`,
        [kind, name, kind === 'l' ? 0 : -1],
      );
      const pending = take({ ...request, waitMs });
      pending.catch(() => {});
      await sleep(200);
      const closing = service.close();
      // Let go within the statement's own bound: it grants, after the call that sent it was ended.
      await sleep(300);
      await blocker.query('COMMIT');
      blocker.release();
      await closing;
      await expect(pending).rejects.toMatchObject({ code: 'CLIENT_CLOSED' });
      // The statement, no longer blocked, commits at once: count after it has.
      await sleep(200);
      // Not a 30 s lease held by nobody, nor a waiter row ahead of everyone: another service takes it at once.
      expect(await rowsOf('leases', name)).toBe(0);
      expect(await rowsOf('waiters', name)).toBe(0);
      const other = new PostgresLockService({ pool, schema: tables.name, listen: false });
      const next = kind === 'l' ? await other.acquire(request) : await other.acquirePermit(request);
      expect(next.acquired).toBe(true);
      await other.close();
    },
  );
});
