import type { Lease } from '@dlock/core';
import { startTcpProxy } from '@dlock/test-utils';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { lockKeys, RedisLockService } from '../src/index.js';
import { commandCalls, connect, disconnect, eventually, type Redis, SideRedis, sleep } from './helpers.js';

// The lock key's three states (held, tombstone, missing) on a private server, so that command counts are ours: what
// an uncontended cycle costs, fencing tokens across every way a key can go, the queue after an expiry, watchers.
let side: SideRedis;
let admin: Redis;
const cleanups: (() => Promise<void>)[] = [];

async function serviceOn(url: string, options: { fenceRetentionMs?: number; subscriberUrl?: string } = {}) {
  const client = await connect(url);
  const subscriber = options.subscriberUrl === undefined ? undefined : await connect(options.subscriberUrl);
  const service = new RedisLockService({
    client,
    ...(subscriber === undefined ? {} : { subscriber }),
    ...(options.fenceRetentionMs === undefined ? {} : { fenceRetentionMs: options.fenceRetentionMs }),
  });
  cleanups.push(async () => {
    await service.close();
    if (subscriber !== undefined) await disconnect(subscriber);
    await disconnect(client);
  });
  return service;
}

const signal = new AbortController().signal;

/** One acquire through the service itself: no LockClient, so nothing renews it. Null when refused. */
async function take(
  service: RedisLockService,
  name: string,
  ttlMs = 10_000,
  waitMs = 0,
): Promise<Lease | null> {
  const result = await service.acquire({ name, ownerId: 'test', ttlMs, waitMs, signal });
  return result.acquired ? { name, ownerId: 'test', ...result.grant } : null;
}

async function cycle(service: RedisLockService, name: string, ttlMs = 10_000): Promise<bigint> {
  const lease = await take(service, name, ttlMs);
  if (lease === null) throw new Error(`${name} is busy`);
  expect(await service.release(lease)).toBe(true);
  return lease.fencingToken;
}

/** The server clock in µs. */
async function serverMicros(): Promise<bigint> {
  const [seconds, micros] = (await admin.sendCommand(['TIME'])) as [string, string];
  return BigInt(seconds) * 1_000_000n + BigInt(micros);
}

/** Commands run since the last CONFIG RESETSTAT, but for the test's own CONFIG and INFO. */
async function lockCommands(): Promise<{ total: number; calls: Record<string, number> }> {
  const calls = await commandCalls(admin);
  for (const command of Object.keys(calls)) {
    if (command.startsWith('config') || command.startsWith('info')) delete calls[command];
  }
  return { total: Object.values(calls).reduce((sum, n) => sum + n, 0), calls };
}

const lockValue = (name: string): Promise<string | null> => admin.get(lockKeys('dlock:', name).lock);
const lockGone = async (name: string): Promise<boolean> =>
  (await admin.exists(lockKeys('dlock:', name).lock)) === 0;

beforeAll(async () => {
  side = await SideRedis.start();
  admin = await connect(side.url);
});
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});
afterAll(async () => {
  await disconnect(admin);
  await side.stop();
});

describe('an uncontended acquire + release', () => {
  it('costs 6 server commands, back to back or 2 ms apart, and leaves the last token in the fence key', async () => {
    const service = await serviceOn(side.url);
    const name = 'cost';
    await cycle(service, name); // the first grant finds no key: it looks at the queue and rewrites its grant
    for (const gap of [0, 2]) {
      const rounds = gap === 0 ? 200 : 20;
      await admin.sendCommand(['CONFIG', 'RESETSTAT']);
      let last = 0n;
      for (let i = 0; i < rounds; i++) {
        last = await cycle(service, name);
        if (gap > 0) await sleep(gap);
      }
      const { calls, total } = await lockCommands();
      // Acquire: EVALSHA, TIME, SET (the fence key, reading the last token), SET (the grant, reading the tombstone).
      // Release: EVALSHA, SET (the tombstone, reading the grant). Each SET reads what it replaced, and the script
      // puts right what it should not have written, which an uncontended cycle never needs.
      expect(calls, `${gap} ms apart`).toEqual({ evalsha: 2 * rounds, time: rounds, set: 3 * rounds });
      expect(total / rounds).toBe(6);
      expect(BigInt((await admin.get(lockKeys('dlock:', name).fence)) as string)).toBe(last);
    }
  });
});

describe('what a write made first puts back', () => {
  it('a refused acquire and a stale release leave the grant as it was; a release of a missing key leaves it missing', async () => {
    const service = await serviceOn(side.url);
    const name = 'put-back';
    const { lock, fence } = lockKeys('dlock:', name);
    const stale = (await take(service, name, 5_000)) as Lease;
    expect(await service.release(stale)).toBe(true);
    const holder = (await take(service, name, 5_000)) as Lease;
    const value = await lockValue(name);
    const expiry = Number(await admin.sendCommand(['PEXPIRETIME', lock]));
    // After the flags, the payload: 0xFF, the owner id, 0xFF (no metadata); bytes a UTF-8 reply shows as U+FFFD.
    expect(value).toMatch(
      new RegExp(`^${holder.ownershipToken} ${holder.fencingToken} ${expiry} - \uFFFDtest\uFFFD$`),
    );
    expect(await take(service, name, 60_000)).toBeNull();
    expect(await service.release(stale)).toBe(false);
    expect(await lockValue(name)).toBe(value);
    expect(Number(await admin.sendCommand(['PEXPIRETIME', lock]))).toBe(expiry);
    // The refused acquire's own clock reading is in the fence key now, above the holder's token, kept for the
    // longest lease it saw plus the retention.
    expect(BigInt((await admin.get(fence)) as string)).toBeGreaterThan(holder.fencingToken);
    expect(await service.release(holder)).toBe(true);
    expect(await lockValue(name)).toBe(`~ ${holder.fencingToken} -`);
    await admin.del(lock);
    expect(await service.release(holder)).toBe(false);
    expect(await lockGone(name)).toBe(true);
  });
});

describe('fencing tokens', () => {
  it('increase across release, expiry, FLUSHALL and an expired tombstone', async () => {
    const service = await serviceOn(side.url);
    const short = await serviceOn(side.url, { fenceRetentionMs: 1_000 });
    const name = 'transitions';
    const { lock, fence } = lockKeys('dlock:', name);
    const tokens: bigint[] = [await cycle(service, name)];
    // Release → acquire: the next grant counts on from the tombstone.
    tokens.push(await cycle(service, name));
    expect(await lockValue(name)).toMatch(new RegExp(`^~ ${tokens.at(-1)} `));
    // Expiry → acquire: the lease ran out unreleased, the lock key is gone.
    const expiring = await take(service, name, 200);
    tokens.push((expiring as Lease).fencingToken);
    expect(await eventually(() => lockGone(name), 2_000)).toBe(true);
    tokens.push(await cycle(service, name));
    // Restart empty (FLUSHALL): from the server clock. (A service with a retention of 1 s and leases of 500 ms: the
    // tombstone lives 1 s after the release, the fence key 1.5 s after the grant.)
    await admin.sendCommand(['FLUSHALL']);
    tokens.push(await cycle(short, name, 500));
    // The tombstone ran out while the fence key still holds the last token.
    expect(await eventually(() => lockGone(name), 3_000)).toBe(true);
    expect(await admin.exists(fence)).toBe(1);
    tokens.push(await cycle(short, name, 500));
    // And with both gone: the clock again.
    expect(await eventually(async () => (await admin.exists([lock, fence])) === 0, 4_000)).toBe(true);
    tokens.push(await cycle(short, name, 500));
    for (let i = 1; i < tokens.length; i++) {
      expect(tokens[i], `token ${i}`).toBeGreaterThan(tokens[i - 1] as bigint);
    }
  });

  it('follow the server clock: a lock key rolled back to an older tombstone does not repeat a token', async () => {
    const service = await serviceOn(side.url);
    const name = 'rolled-back';
    const { lock, fence } = lockKeys('dlock:', name);
    const before = await serverMicros();
    const first = await cycle(service, name);
    expect(first).toBeGreaterThanOrEqual(before);
    expect(first).toBeLessThanOrEqual(await serverMicros());
    // What a replica promoted after its primary died may hold: the state before the primary's latest grant.
    const older = await Promise.all(
      [lock, fence].map(async (key) => [await admin.get(key), await admin.pTTL(key)]),
    );
    const lost = await cycle(service, name);
    for (const [i, key] of [lock, fence].entries()) {
      const [value, ttl] = older[i] as [string, number];
      await admin.set(key, value, { PX: ttl });
    }
    expect(await lockValue(name)).toMatch(new RegExp(`^~ ${first} `));
    expect(await cycle(service, name)).toBeGreaterThan(lost);
  });

  it('come from the clock after a lease that ran out unreleased', async () => {
    // The fence key holds the lease's own token, the clock reading of its grant: the clock has passed it by the
    // time the lease runs out.
    const service = await serviceOn(side.url);
    const name = 'clock-after-expiry';
    await cycle(service, name);
    const short = (await take(service, name, 100)) as Lease;
    expect(await eventually(() => lockGone(name), 2_000)).toBe(true);
    const before = await serverMicros();
    const next = await cycle(service, name);
    expect(next).toBeGreaterThan(short.fencingToken);
    expect(next).toBeGreaterThanOrEqual(before);
    expect(next).toBeLessThanOrEqual(await serverMicros());
  });

  it('increase after a lease ran out unreleased, with the counter ahead of the server clock', async () => {
    // As after the server clock stepped back: the counter is an hour ahead of it, so only the counter can tell
    // the next token. Every grant leaves its token in the fence key.
    const service = await serviceOn(side.url);
    const name = 'ahead-expiry';
    const ahead = BigInt(Date.now()) * 1_000n + 3_600_000_000n;
    await admin.set(lockKeys('dlock:', name).fence, ahead.toString());
    expect(await cycle(service, name)).toBe(ahead + 1n);
    const expiring = (await take(service, name, 200)) as Lease;
    expect(expiring.fencingToken).toBe(ahead + 2n);
    expect(await eventually(() => lockGone(name), 2_000)).toBe(true);
    expect(await cycle(service, name)).toBeGreaterThan(ahead + 2n);
  });

  it('increase after the tombstone ran out, with the counter ahead of the server clock', async () => {
    const service = await serviceOn(side.url, { fenceRetentionMs: 1_000 });
    const name = 'ahead-tombstone';
    const ahead = BigInt(Date.now()) * 1_000n + 3_600_000_000n;
    await admin.set(lockKeys('dlock:', name).fence, ahead.toString());
    const tokens = [await cycle(service, name), await cycle(service, name)];
    expect(tokens).toEqual([ahead + 1n, ahead + 2n]);
    expect(await eventually(() => lockGone(name), 3_000)).toBe(true);
    expect(await cycle(service, name)).toBeGreaterThan(ahead + 2n);
  });
});

describe('the queue after the holder’s lease ran out', () => {
  it('goes first: a caller that does not queue is refused, and the head of the queue is handed the lock', async () => {
    const service = await serviceOn(side.url);
    const name = 'expired-holder';
    const keys = lockKeys('dlock:', name);
    const holder = (await take(service, name, 300)) as Lease;
    // A waiter that never looks again by itself (it would race the bystander): its entry, and a process
    // listening on its channel.
    const listener = await connect(side.url);
    cleanups.push(() => disconnect(listener));
    const messages: string[] = [];
    await listener.subscribe('test:wake', (message) => messages.push(message));
    const waiter = 'queued-waiter-token-00000000';
    await admin.sendCommand(['RPUSH', keys.queue, waiter]);
    await admin.sendCommand(['HSET', keys.waiters, waiter, `${Date.now() + 10_000} 10000 test:wake`]);
    expect(await eventually(() => lockGone(name), 2_000)).toBe(true);
    expect(await take(service, name)).toBeNull();
    expect(await lockValue(name)).toMatch(new RegExp(`^${waiter} `));
    expect(await eventually(() => messages.length === 1, 2_000)).toBe(true);
    const [owner, fence] = (messages[0] as string).split(' ');
    expect(owner).toBe(waiter);
    expect(BigInt(fence as string)).toBeGreaterThan(holder.fencingToken);
    expect(await admin.lLen(keys.queue)).toBe(0);
  });

  it('is not overtaken by a caller trying all along, while a waiter of another process waits for its turn', async () => {
    const [a, b, c] = await Promise.all([serviceOn(side.url), serviceOn(side.url), serviceOn(side.url)]);
    const name = 'expired-holder-live';
    const holder = (await take(a, name, 300)) as Lease;
    const waiting = take(b, name, 10_000, 5_000);
    waiting.catch(() => {});
    expect(
      await eventually(async () => (await admin.lLen(lockKeys('dlock:', name).queue)) === 1, 2_000),
    ).toBe(true);
    // The waiter marked the holder: its release, or the acquire after its expiry, must look at the queue.
    expect(await lockValue(name)).toMatch(/^\S+ \d+ \d+ qw? /);
    let refused = 0;
    let won = false;
    let settled = false;
    void waiting.finally(() => {
      settled = true;
    });
    while (!settled) {
      if (await take(c, name)) won = true;
      else refused += 1;
    }
    const handed = (await waiting) as Lease;
    expect(won).toBe(false);
    expect(refused).toBeGreaterThan(0);
    expect(handed.fencingToken).toBeGreaterThan(holder.fencingToken);
  });
});

describe('watchers', () => {
  it('are told of a release, marking the name for it; a notice that reached nobody unmarks it', async () => {
    const [holder, watcher] = await Promise.all([serviceOn(side.url), serviceOn(side.url)]);
    const name = 'watched';
    await cycle(holder, name);
    // Nobody watched: the first release found nobody listening and unmarked the name.
    expect(await lockValue(name)).toMatch(/ -$/);
    let notices = 0;
    const unwatch = watcher.watch(name, () => {
      notices += 1;
    });
    expect(await eventually(async () => / w$/.test((await lockValue(name)) ?? ''), 2_000)).toBe(true);
    await cycle(holder, name);
    expect(await eventually(() => notices === 1, 2_000)).toBe(true);
    unwatch();
    await sleep(50);
    await admin.sendCommand(['CONFIG', 'RESETSTAT']);
    await cycle(holder, name); // publishes to nobody, and unmarks
    await cycle(holder, name); // publishes nothing
    expect((await lockCommands()).calls['publish']).toBe(1);
    expect(await lockValue(name)).toMatch(/ -$/);
    expect(notices).toBe(1);
  });

  it('mark the name again once their subscriber is back, after a release that nobody heard', async () => {
    const proxy = await startTcpProxy({ targetPort: side.port });
    cleanups.push(() => proxy.close());
    const holder = await serviceOn(side.url);
    const watcher = await serviceOn(side.url, { subscriberUrl: `redis://127.0.0.1:${proxy.port}` });
    const name = 'watched-reconnect';
    let notices = 0;
    watcher.watch(name, () => {
      notices += 1;
    });
    await cycle(holder, name);
    // The release's notice, or the wake a watch gives once its subscription is in place, or both (when the release
    // came after it): at least one.
    expect(await eventually(() => notices >= 1, 2_000)).toBe(true);
    // The watcher's subscriber is cut off: the next release publishes to nobody and unmarks the name.
    proxy.mode = 'refuse';
    proxy.resetAll();
    expect(
      await eventually(async () => {
        const reply = (await admin.sendCommand([
          'PUBSUB',
          'NUMSUB',
          lockKeys('dlock:', name).released,
        ])) as unknown[];
        return Number(reply[1]) === 0;
      }, 2_000),
    ).toBe(true);
    await cycle(holder, name);
    expect(await lockValue(name)).toMatch(/ -$/);
    proxy.mode = 'pass';
    expect(await eventually(async () => / w$/.test((await lockValue(name)) ?? ''), 5_000)).toBe(true);
    const heard = notices;
    await cycle(holder, name);
    expect(await eventually(() => notices === heard + 1, 2_000)).toBe(true);
  });
});
