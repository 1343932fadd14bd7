import { LockClient, type LockHandle } from '@dlock/core';
import { startTcpProxy } from '@dlock/test-utils';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { lockKeys, type RedisClientLike, RedisLockService } from '../src/index.js';
import { FAMILIES, type Family } from './clients.js';
import { commandCalls, connect, disconnect, eventually, type Redis, SideRedis, sleep } from './helpers.js';

// Fair, herd-free waiting, observed on a private server so that command counts are ours alone.
let side: SideRedis;
let admin: Redis;
const opened: { close(): Promise<void> }[] = [];

/** One "process": its own connection, service (with its own subscriber connection) and lock client. */
async function node() {
  const client = await connect(side.url);
  const subscriber = await connect(side.url);
  const service = new RedisLockService({ client, subscriber });
  const locks = new LockClient(service);
  const entry = {
    client,
    service,
    locks,
    /** The process dies: both connections drop without a word, nothing reconnects, nothing is cleaned up. */
    crash: () => {
      subscriber.destroy();
      client.destroy();
    },
    close: async () => {
      await locks.close();
      await service.close();
      await disconnect(subscriber);
      await disconnect(client);
    },
  };
  opened.push(entry);
  return entry;
}

const queueLength = async (name: string): Promise<number> =>
  Number(await admin.sendCommand(['LLEN', lockKeys('dlock:', name).queue]));

beforeAll(async () => {
  side = await SideRedis.start();
  admin = await connect(side.url);
});
afterEach(async () => {
  await Promise.all(opened.splice(0).map((n) => n.close()));
});
afterAll(async () => {
  await disconnect(admin);
  await side.stop();
});

describe('queued waiters', () => {
  it('get the lock in arrival order, whichever process they are in', async () => {
    const name = 'fifo';
    const holder = await node();
    const first = await holder.locks.acquire(name, { ttlMs: 10_000 });
    const nodes = await Promise.all([node(), node(), node()]);
    const order: number[] = [];
    const waits: Promise<void>[] = [];
    for (let i = 0; i < 6; i++) {
      const n = nodes[i % nodes.length] as (typeof nodes)[number];
      waits.push(
        n.locks.acquire(name, { ttlMs: 10_000, waitMs: 20_000 }).then(async (handle) => {
          order.push(i);
          await sleep(5);
          await handle.release();
        }),
      );
      // Arrival order is the order the server queued them in.
      expect(await eventually(async () => (await queueLength(name)) === i + 1, 5_000)).toBe(true);
    }
    await first.release();
    await Promise.all(waits);
    expect(order).toEqual([0, 1, 2, 3, 4, 5]);
  });

  it('hands a usable lock to a waiter that queued for longer than its own TTL, in its turn', async () => {
    const name = 'long-wait';
    const [a, b, c] = await Promise.all([node(), node(), node()]);
    const first = await a.locks.acquire(name, { ttlMs: 10_000 });
    const order: string[] = [];
    const short = b.locks.acquire(name, { ttlMs: 1_000, waitMs: 15_000 }).then((h) => {
      order.push('short-ttl');
      return h;
    });
    expect(await eventually(async () => (await queueLength(name)) === 1, 5_000)).toBe(true);
    const long = c.locks.acquire(name, { ttlMs: 10_000, waitMs: 10_000 }).then((h) => {
      order.push('long-ttl');
      return h;
    });
    expect(await eventually(async () => (await queueLength(name)) === 2, 5_000)).toBe(true);
    await sleep(3_300); // more than three of the first waiter's TTLs since it last heard from Redis
    await first.release();
    const handle = await short;
    // Its lease was extended on arrival: a full window, not a grant core must drop as expired on arrival.
    expect(handle.isHeld()).toBe(true);
    expect(handle.expiresAt - performance.now()).toBeGreaterThan(500);
    await sleep(2_000); // and renewed from then on
    expect(handle.isHeld()).toBe(true);
    expect(order).toEqual(['short-ttl']);
    await handle.release();
    await (await long).release();
    expect(order).toEqual(['short-ttl', 'long-ttl']);
  });

  it('one release wakes one waiter: one message, and no waiter calls Redis to take its turn', async () => {
    const name = 'herd';
    const holder = await node();
    const nodes = await Promise.all(Array.from({ length: 4 }, () => node()));
    let handle = await holder.locks.acquire(name, { ttlMs: 10_000 });
    const acquired: LockHandle[] = [];
    const waits = Array.from({ length: 12 }, (_, i) =>
      (nodes[i % nodes.length] as (typeof nodes)[number]).locks
        .acquire(name, { ttlMs: 10_000, waitMs: 20_000 })
        .then((h) => {
          acquired.push(h);
          return h;
        }),
    );
    expect(await eventually(async () => (await queueLength(name)) === 12, 5_000)).toBe(true);
    for (let round = 1; round <= 12; round++) {
      await admin.sendCommand(['CONFIG', 'RESETSTAT']);
      await handle.release();
      expect(await eventually(() => acquired.length === round, 5_000)).toBe(true);
      await sleep(30); // time for any other waiter that woke up to show itself
      const calls = await commandCalls(admin);
      expect(calls['publish']).toBe(1); // the hand-off, to the one process whose waiter is next
      expect(calls['evalsha'] ?? 0).toBe(1); // the release script, and nothing from any waiter
      expect(acquired).toHaveLength(round);
      handle = acquired[round - 1] as LockHandle;
    }
    await handle.release();
    await Promise.all(waits);
  });

  it('never lets a caller that did not queue overtake the queue', async () => {
    const name = 'no-barging';
    const [a, b, c] = await Promise.all([node(), node(), node()]);
    const first = await a.locks.acquire(name, { ttlMs: 10_000 });
    const waiting = b.locks.acquire(name, { ttlMs: 10_000, waitMs: 10_000 });
    expect(await eventually(async () => (await queueLength(name)) === 1, 5_000)).toBe(true);
    await first.release();
    // The release handed the lock over inside its own script: it was never free for a bystander.
    expect(await c.locks.tryAcquire(name, { ttlMs: 10_000 })).toBeNull();
    expect(await a.locks.tryAcquire(name, { ttlMs: 10_000 })).toBeNull();
    const second = await waiting;
    expect(second.fencingToken).toBeGreaterThan(first.fencingToken);
    await second.release();
    expect(await c.locks.tryAcquire(name, { ttlMs: 10_000 })).not.toBeNull();
  });

  it('lets an aborted waiter leave the queue, and the next one takes its turn', async () => {
    const name = 'abort';
    const [a, b, c] = await Promise.all([node(), node(), node()]);
    const first = await a.locks.acquire(name, { ttlMs: 10_000 });
    const controller = new AbortController();
    const aborted = b.locks.acquire(name, { ttlMs: 10_000, waitMs: 10_000, signal: controller.signal });
    expect(await eventually(async () => (await queueLength(name)) === 1, 5_000)).toBe(true);
    const next = c.locks.acquire(name, { ttlMs: 10_000, waitMs: 10_000 });
    expect(await eventually(async () => (await queueLength(name)) === 2, 5_000)).toBe(true);
    controller.abort(new Error('user gave up'));
    await expect(aborted).rejects.toThrow('user gave up');
    expect(await eventually(async () => (await queueLength(name)) === 1, 5_000)).toBe(true);
    await first.release();
    const handle = await next;
    expect(handle.isHeld()).toBe(true);
  });

  it('lets a waiter whose wait ran out leave the queue', async () => {
    const name = 'timeout';
    const [a, b] = await Promise.all([node(), node()]);
    const first = await a.locks.acquire(name, { ttlMs: 10_000 });
    const started = performance.now();
    await expect(b.locks.acquire(name, { ttlMs: 10_000, waitMs: 300 })).rejects.toMatchObject({
      code: 'ACQUIRE_TIMEOUT',
    });
    expect(performance.now() - started).toBeLessThan(2_000);
    expect(await queueLength(name)).toBe(0);
    await first.release();
  });

  it('skips the entry of a waiter whose process died, at once', async () => {
    const name = 'crashed';
    const [a, dead, c] = await Promise.all([node(), node(), node()]);
    const first = await a.locks.acquire(name, { ttlMs: 10_000 });
    const gone = new AbortController();
    void dead.locks.acquire(name, { ttlMs: 10_000, waitMs: 30_000, signal: gone.signal }).catch(() => {});
    expect(await eventually(async () => (await queueLength(name)) === 1, 5_000)).toBe(true);
    // Its queue entry stays behind, with a deadline 30 s away.
    dead.crash();
    gone.abort();
    const next = c.locks.acquire(name, { ttlMs: 10_000, waitMs: 10_000 });
    expect(await eventually(async () => (await queueLength(name)) === 2, 5_000)).toBe(true);
    const released = performance.now();
    await first.release();
    // The release saw nobody listening for the dead waiter (PUBLISH reached no one) and went on to the next.
    const handle = await next;
    expect(performance.now() - released).toBeLessThan(1_000);
    expect(handle.fencingToken).toBeGreaterThan(first.fencingToken);
  });

  it('skips entries past their own deadline', async () => {
    const name = 'stale-entry';
    const keys = lockKeys('dlock:', name);
    const [a, b] = await Promise.all([node(), node()]);
    const first = await a.locks.acquire(name, { ttlMs: 10_000 });
    // A waiter from a process that is still subscribed (our own channel) but whose deadline passed long ago.
    const stale = 'stale-waiter-token-0000000000';
    await admin.sendCommand(['RPUSH', keys.queue, stale]);
    await admin.sendCommand(['HSET', keys.waiters, stale, `${Date.now() - 1_000} 10000 dlock:wake:nobody`]);
    const next = b.locks.acquire(name, { ttlMs: 10_000, waitMs: 10_000 });
    expect(await eventually(async () => (await queueLength(name)) === 2, 5_000)).toBe(true);
    await first.release();
    const handle = await next;
    expect(handle.isHeld()).toBe(true);
    expect(await admin.sendCommand(['HEXISTS', keys.waiters, stale])).toBe(0);
  });

  it('wakes the head waiter when the holder expires without a release, not at the end of its wait', async () => {
    const name = 'expiry';
    const [a, b] = await Promise.all([node(), node()]);
    // A bare grant, never renewed and never released: the holder crashed right after taking it.
    const first = await a.service.acquire({
      name,
      ownerId: 'crashed-holder',
      ttlMs: 600,
      waitMs: 0,
      signal: new AbortController().signal,
    });
    expect(first.acquired).toBe(true);
    const started = performance.now();
    const handle = await b.locks.acquire(name, { ttlMs: 10_000, waitMs: 20_000 });
    const waited = performance.now() - started;
    expect(waited).toBeGreaterThan(400);
    expect(waited).toBeLessThan(600 + 1_000);
    if (first.acquired) expect(handle.fencingToken).toBeGreaterThan(first.grant.fencingToken);
  });

  it('re-checks after its subscriber reconnects, so a hand-off lost meanwhile costs no full wait', async () => {
    const name = 'resubscribe';
    const [a, b] = await Promise.all([node(), node()]);
    const first = await a.locks.acquire(name, { ttlMs: 20_000 });
    const waiting = b.locks.acquire(name, { ttlMs: 10_000, waitMs: 30_000 });
    expect(await eventually(async () => (await queueLength(name)) === 1, 5_000)).toBe(true);
    // Drop every subscriber connection and release while b's is down: the hand-off message reaches nobody.
    await admin.sendCommand(['CLIENT', 'KILL', 'TYPE', 'pubsub']);
    await first.release();
    const started = performance.now();
    const handle = await waiting;
    expect(performance.now() - started).toBeLessThan(3_000);
    expect(handle.fencingToken).toBeGreaterThan(first.fencingToken);
  });

  it('queues and hands over names with spaces, braces, unicode and 1,024 bytes', async () => {
    const [a, b] = await Promise.all([node(), node()]);
    const names = ['with space', '{braces}', 'a}b{c', '%7B', 'ünïcödé 🔒 名前', 'é'.repeat(512)];
    for (const name of names) {
      const first = await a.locks.acquire(name, { ttlMs: 10_000 });
      const waiting = b.locks.acquire(name, { ttlMs: 10_000, waitMs: 10_000 });
      expect(await eventually(async () => (await queueLength(name)) === 1, 5_000)).toBe(true);
      await first.release();
      const second = await waiting;
      expect(second.fencingToken).toBeGreaterThan(first.fencingToken);
      await second.release();
    }
    // Distinct names stay distinct locks.
    const held = await Promise.all(names.map((name) => a.locks.acquire(name, { ttlMs: 10_000 })));
    expect(held).toHaveLength(names.length);
  });

  it('ends queued waits on close(), and they leave the queue', async () => {
    const name = 'close';
    const [a, b] = await Promise.all([node(), node()]);
    const first = await a.locks.acquire(name, { ttlMs: 10_000 });
    const waiting = b.service.acquire({
      name,
      ownerId: 'direct',
      ttlMs: 10_000,
      waitMs: 30_000,
      signal: new AbortController().signal,
    });
    expect(await eventually(async () => (await queueLength(name)) === 1, 5_000)).toBe(true);
    const outcome = waiting.catch((error: unknown) => error);
    const started = performance.now();
    await b.service.close();
    expect(await outcome).toMatchObject({ code: 'TRANSPORT' });
    expect(performance.now() - started).toBeLessThan(1_000);
    expect(await queueLength(name)).toBe(0);
    await first.release();
  });
});

describe('a subscriber that cannot subscribe', () => {
  it('holds up one waiting acquire by the command timeout, not every one', async () => {
    const client = await connect(side.url);
    const proxy = await startTcpProxy({ targetPort: side.port });
    const subscriber = await connect(`redis://127.0.0.1:${proxy.port}`);
    // The subscriber's connection is open but nothing it sends comes back: SUBSCRIBE never answers.
    proxy.mode = 'blackhole';
    const service = new RedisLockService({ client, subscriber, commandTimeoutMs: 400 });
    const locks = new LockClient(service);
    try {
      const name = 'stuck-subscriber';
      const times: number[] = [];
      for (let i = 0; i < 4; i++) {
        const started = performance.now();
        const handle = await locks.acquire(name, { ttlMs: 5_000, waitMs: 10_000 });
        times.push(performance.now() - started);
        await handle.release();
      }
      expect(times[0]).toBeGreaterThanOrEqual(350); // the first one waited for the subscription
      for (const ms of times.slice(1)) expect(ms).toBeLessThan(300); // the others did not
    } finally {
      await locks.close();
      await service.close();
      subscriber.destroy();
      await disconnect(client);
      await proxy.close();
    }
  });
});

describe('a subscriber the caller owns', () => {
  it('is left with none of the service’s channels after close()', async () => {
    const client = await connect(side.url);
    const subscriber = await connect(side.url);
    const service = new RedisLockService({ client, subscriber });
    const channel = lockKeys('dlock:', 'watched-after-close').released;
    const numsub = async (): Promise<number> => {
      const reply = (await admin.sendCommand(['PUBSUB', 'NUMSUB', channel])) as unknown[];
      return Number(reply[1]);
    };
    try {
      let calls = 0;
      service.watch('watched-after-close', () => {
        calls += 1;
      });
      expect(await eventually(async () => (await numsub()) === 1, 5_000)).toBe(true);
      await service.close();
      expect(await numsub()).toBe(0);
      await admin.sendCommand(['PUBLISH', channel, 'x']);
      await sleep(100);
      expect(calls).toBe(0);
    } finally {
      await service.close();
      await disconnect(subscriber);
      await disconnect(client);
    }
  });
});

describe('a subscriber connection dropped while a waiter waits, on each client family', () => {
  /** A "process" on `family`'s client, with the subscriber connection the service makes itself. */
  async function familyNode(family: Family) {
    const connected = await family.connect(side.url);
    const service = new RedisLockService({ client: connected.client as RedisClientLike });
    const locks = new LockClient(service);
    const entry = {
      locks,
      close: async () => {
        await locks.close();
        await service.close();
        await connected.close();
      },
    };
    opened.push(entry);
    return entry;
  }

  for (const family of FAMILIES) {
    it(`re-checks once it is back, so a hand-off lost meanwhile costs no full wait (${family.label})`, async () => {
      const name = `resubscribe ${family.label}`;
      const [a, b] = await Promise.all([familyNode(family), familyNode(family)]);
      const first = await a.locks.acquire(name, { ttlMs: 20_000 });
      const waiting = b.locks.acquire(name, { ttlMs: 10_000, waitMs: 30_000 });
      expect(await eventually(async () => (await queueLength(name)) === 1, 5_000)).toBe(true);
      await admin.sendCommand(['CLIENT', 'KILL', 'TYPE', 'pubsub']);
      await first.release();
      const started = performance.now();
      const handle = await waiting;
      expect(performance.now() - started).toBeLessThan(3_000);
      expect(handle.fencingToken).toBeGreaterThan(first.fencingToken);
    });
  }
});
