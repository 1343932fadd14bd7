import { AcquireTimeoutError, type Leader, type Leadership, LockClient } from '@dlock/core';
import { FencingGate } from '@dlock/fencing-pg';
import {
  PG_URL,
  startTcpProxy,
  startZooKeeperServer,
  uniqueName,
  ZK_CONNECT,
  type ZooKeeperServer,
} from '@dlock/test-utils';
import pg from 'pg';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { lockParentPath, type ZooKeeperClientLike, ZooKeeperLockService } from '../src/index.js';
import { type Child, forkFixture } from './child.js';
import { connectedClient, sleep, waitFor } from './helpers.js';

// Elections on real servers, with candidates and observers in processes of their own where the issue asks for it.
// A frozen leader runs on a private server (tickTime 200, so a 2 s session, the leader's TTL, is allowed); the rest
// on the shared one, whose sessions (the TTL) are 4 s at least.
const ROOT = '/dlock-test/election';
const cleanups: (() => Promise<unknown> | unknown)[] = [];
let pool: pg.Pool;
let writes: string;
const gate = new FencingGate();

beforeAll(async () => {
  pool = new pg.Pool({ connectionString: PG_URL, max: 2 });
  await gate.ensureSchema(pool);
  writes = uniqueName('zk_election_writes');
  await pool.query(
    `CREATE TABLE ${writes} (election text NOT NULL, epoch bigint NOT NULL, value text NOT NULL)`,
  );
});

afterAll(async () => {
  await pool?.query(`DROP TABLE IF EXISTS ${writes}`);
  await pool?.end();
});

afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

/** A candidate (or observer) in this process, on a service, and so a session, of its own. */
function candidate(connectionString: string, sessionTimeoutMs: number) {
  const service = new ZooKeeperLockService({ connectionString, sessionTimeoutMs, keyPrefix: ROOT });
  const client = new LockClient(service);
  cleanups.push(
    () => service.close(),
    () => client.close(),
  );
  return { service, client };
}

function fork(script: string, args: readonly string[]): Child {
  const child = forkFixture(script, args);
  cleanups.push(() => child.stop());
  return child;
}

async function fencedWrite(name: string, epoch: bigint, value: string): Promise<void> {
  await gate.runFenced(pool, name, epoch, (tx) =>
    tx.query(`INSERT INTO ${writes} (election, epoch, value) VALUES ($1, $2, $3)`, [
      name,
      String(epoch),
      value,
    ]),
  );
}

async function writtenBy(name: string): Promise<{ epoch: string; value: string }[]> {
  const { rows } = await pool.query<{ epoch: string; value: string }>(
    `SELECT epoch::text AS epoch, value FROM ${writes} WHERE election = $1 ORDER BY epoch`,
    [name],
  );
  return rows;
}

describe('a leader frozen past its TTL (its own process, a private server)', () => {
  const SESSION_MS = 2_000;
  // The server expires the session 2.0 to 2.2 s after it last heard from the leader: the pause leaves it room.
  const PAUSE_MS = 4_500;
  let server: ZooKeeperServer;

  beforeAll(async () => {
    server = await startZooKeeperServer({ tickTimeMs: 200 });
  }, 60_000);

  afterAll(() => server?.stop());

  it('a successor leads with a higher epoch within TTL + one renewal interval; the old leader wakes lost, and its fenced write is refused', {
    timeout: 60_000,
  }, async () => {
    const name = uniqueName('frozen');
    const frozen = fork('candidate.mjs', [
      server.connectString,
      ROOT,
      name,
      'host-a',
      String(SESSION_MS),
      PG_URL,
      writes,
    ]);
    const leading = await frozen.next('leading', 20_000);
    expect(leading['write']).toEqual({ ok: true });
    const oldEpoch = BigInt(leading['epoch'] as string);

    const { service, client } = candidate(server.connectString, SESSION_MS);
    const election = client.election(name, { ttlMs: SESSION_MS });
    const campaign = election.campaign({ value: 'host-b', waitMs: Number.POSITIVE_INFINITY });
    // Queued behind the leader before it freezes.
    expect(await waitFor(async () => (await service.inspect(name)).waiters === 1, 10_000)).toBe(true);

    frozen.send({ type: 'pause', ms: PAUSE_MS });
    const pausedAt = performance.now();
    const successor = await campaign;
    const takeoverMs = performance.now() - pausedAt;
    const takenAt = Date.now();
    expect(successor.epoch).toBeGreaterThan(oldEpoch);
    // The TTL (the session the server must expire first) plus one renewal interval (a third of it).
    expect(takeoverMs).toBeLessThan(SESSION_MS + SESSION_MS / 3);
    expect(await election.leader()).toEqual({ value: 'host-b', epoch: successor.epoch });
    await fencedWrite(name, successor.epoch, 'host-b');

    const woke = await frozen.next('woke', PAUSE_MS + 15_000);
    expect(woke['wokeAt'] as number).toBeGreaterThan(takenAt);
    // The moment it woke, before any timer of its own ran, it no longer believed it led.
    expect(woke['leaderAtWake']).toBe(false);
    expect(woke['write']).toMatchObject({
      ok: false,
      error: { code: 'STALE_FENCING_TOKEN', highWaterMark: String(successor.epoch) },
    });
    expect(woke['state']).toBe('lost');
    expect(woke['lost']).toEqual(['expired']);
    // Only the two leaders' writes, each under its own epoch.
    expect(await writtenBy(name)).toEqual([
      { epoch: String(oldEpoch), value: 'host-a' },
      { epoch: String(successor.epoch), value: 'host-b' },
    ]);
    expect(successor.isLeader()).toBe(true);
    expect(await election.leader()).toEqual({ value: 'host-b', epoch: successor.epoch });
    await successor.resign();
    console.log(
      `[zookeeper election] frozen leader replaced in ${takeoverMs.toFixed(0)} ms (TTL ${SESSION_MS} ms)`,
    );
  });
});

describe('on the shared server', () => {
  it('resign hands over through the notice, long before the TTL', { timeout: 60_000 }, async () => {
    // A long lease, so that nothing but the release notice can explain a quick hand-over.
    const TTL_MS = 20_000;
    const name = uniqueName('resign');
    const a = candidate(ZK_CONNECT, TTL_MS);
    const b = candidate(ZK_CONNECT, TTL_MS);
    const first = await a.client.election(name, { ttlMs: TTL_MS }).campaign({ value: 'a' });
    expect(a.service.session?.timeoutMs).toBe(TTL_MS);
    const waiting = b.client.election(name, { ttlMs: TTL_MS }).campaign({ value: 'b', waitMs: 30_000 });
    expect(await waitFor(async () => (await a.service.inspect(name)).waiters === 1, 10_000)).toBe(true);
    const resignedAt = performance.now();
    await first.resign();
    const second = await waiting;
    const handOverMs = performance.now() - resignedAt;
    expect(second.epoch).toBeGreaterThan(first.epoch);
    expect(handOverMs).toBeLessThan(TTL_MS / 4);
    await second.resign();
    console.log(`[zookeeper election] resign handed over in ${handOverMs.toFixed(0)} ms (TTL ${TTL_MS} ms)`);
  });

  it('a candidate that does not wait is never shown as the leader, even when the leader resigns while its try is answered', {
    timeout: 60_000,
  }, async () => {
    const TTL_MS = 10_000;
    const DELAY_MS = 150;
    const name = uniqueName('no-wait');
    // The trying candidate talks to the server through a proxy that holds each chunk DELAY_MS each way: each of its
    // requests reaches the server DELAY_MS after it is sent, and its answer comes 2 x DELAY_MS after.
    const proxy = await startTcpProxy({ targetPort: Number(ZK_CONNECT.split(':')[1]) });
    cleanups.push(() => proxy.close());
    const inner = await connectedClient(`127.0.0.1:${proxy.port}`, TTL_MS);
    cleanups.push(() => inner.close());
    let listing: (() => void) | undefined;
    let armed = false;
    const listed = new Promise<void>((resolve) => {
      listing = resolve;
    });
    // The try reads the parent, sees the leader's node, and lists the queue: that listing is what it decides on.
    const parent = lockParentPath(ROOT, name);
    const client = new Proxy(inner, {
      get(target, property) {
        const value: unknown = Reflect.get(target, property);
        if (typeof value !== 'function') return value;
        const bound = value.bind(target) as (...args: unknown[]) => unknown;
        if (property !== 'getChildren') return bound;
        return (path: string, ...rest: unknown[]) => {
          if (armed && path === parent) listing?.();
          return bound(path, ...rest);
        };
      },
    }) as ZooKeeperClientLike;
    const trying = { service: new ZooKeeperLockService({ client, keyPrefix: ROOT }) };
    const tryingClient = new LockClient(trying.service);
    cleanups.push(
      () => trying.service.close(),
      () => tryingClient.close(),
    );
    cleanups.push(() => {
      proxy.delayMs = 0;
    });
    const observing = candidate(ZK_CONNECT, TTL_MS);
    const observer = observing.client.election(name, { ttlMs: TTL_MS });
    const leadership = await candidate(ZK_CONNECT, TTL_MS)
      .client.election(name, { ttlMs: TTL_MS })
      .campaign({ value: 'a' });
    await trying.service.inspect(name); // its session is up before the delay starts
    const seen: (Leader | null)[] = [];
    const observation = new AbortController();
    const observed = (async () => {
      for await (const leader of observer.observe({ signal: observation.signal })) seen.push(leader);
    })().catch(() => {});
    proxy.delayMs = DELAY_MS;
    let settled = false;
    armed = true;
    const attempt = tryingClient
      .election(name, { ttlMs: TTL_MS })
      .campaign({ value: 't' })
      .then(
        (won) => won,
        (error: unknown) => error,
      )
      .finally(() => {
        settled = true;
      });
    // Resign once the try's listing is on the server and before its answer is back: a node written to be deleted
    // would lead until its delete arrives.
    await listed;
    await sleep(DELAY_MS + 50);
    await leadership.resign();
    const polled: (Leader | null)[] = [];
    while (!settled) polled.push(await observer.leader());
    for (let i = 0; i < 10; i++) polled.push(await observer.leader());
    observation.abort();
    await observed;
    expect(await attempt).toBeInstanceOf(AcquireTimeoutError);
    expect(polled.filter((leader) => leader !== null)).toEqual([]);
    expect(seen.filter((leader) => leader?.value === 't')).toEqual([]);
    expect(await observer.leader()).toBeNull();
  });

  it('three candidates, each on its own session, take over in campaign order with rising epochs', {
    timeout: 60_000,
  }, async () => {
    const TTL_MS = 4_000;
    const name = uniqueName('order');
    const leader = await candidate(ZK_CONNECT, TTL_MS)
      .client.election(name, { ttlMs: TTL_MS })
      .campaign({ value: 'c0' });
    const inspector = candidate(ZK_CONNECT, TTL_MS).service;
    const order: string[] = [];
    const epochs: bigint[] = [leader.epoch];
    const campaigns: Promise<void>[] = [];
    for (const value of ['c1', 'c2', 'c3']) {
      const election = candidate(ZK_CONNECT, TTL_MS).client.election(name, { ttlMs: TTL_MS });
      campaigns.push(
        election.campaign({ value, waitMs: 30_000 }).then(async (leadership) => {
          order.push(value);
          epochs.push(leadership.epoch);
          await sleep(50);
          await leadership.resign();
        }),
      );
      // Each one queued before the next campaigns: that is the campaign order.
      const queued = order.length + campaigns.length;
      expect(await waitFor(async () => (await inspector.inspect(name)).waiters === queued, 10_000)).toBe(
        true,
      );
    }
    await leader.resign();
    await Promise.all(campaigns);
    expect(order).toEqual(['c1', 'c2', 'c3']);
    for (let i = 1; i < epochs.length; i++)
      expect(epochs[i] as bigint).toBeGreaterThan(epochs[i - 1] as bigint);
  });

  it('observe() in a third process sees every leader and value, in order, then nobody', {
    timeout: 60_000,
  }, async () => {
    const TTL_MS = 4_000;
    const name = uniqueName('observed');
    const observer = fork('observer.mjs', [ZK_CONNECT, ROOT, name, String(TTL_MS)]);
    await observer.next('ready', 20_000);
    const elections = [0, 1, 2].map(() =>
      candidate(ZK_CONNECT, TTL_MS).client.election(name, { ttlMs: TTL_MS }),
    );
    const first = await (elections[0] as (typeof elections)[0]).campaign({ value: 'one' });
    // The next two queue behind it; each leads as soon as the one before resigns.
    const second = (elections[1] as (typeof elections)[0]).campaign({ value: 'two', waitMs: 30_000 });
    await sleep(100);
    const third = (elections[2] as (typeof elections)[0]).campaign({ value: 'three', waitMs: 30_000 });
    await sleep(300);
    await first.proclaim('one+');
    await sleep(300);
    await first.resign();
    const leaders: Leadership[] = [first];
    for (const next of [second, third]) {
      const leadership = await next;
      leaders.push(leadership);
      await sleep(300);
      await leadership.resign();
    }
    const seen = (): unknown[] =>
      observer.messages.filter((m) => m.type === 'leader').map((m) => m['leader']);
    expect(await waitFor(() => seen().at(-1) === null && seen().length > 1, 10_000)).toBe(true);
    const [l1, l2, l3] = leaders.map((l) => String(l.epoch));
    expect(seen()).toEqual([
      null,
      { value: 'one', epoch: l1 },
      { value: 'one+', epoch: l1 },
      { value: 'two', epoch: l2 },
      { value: 'three', epoch: l3 },
      null,
    ]);
  });
});
