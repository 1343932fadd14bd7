import { InvalidArgumentError, LockClient } from '@dlock/core';
import { REDIS_URL, runBuiltPackage } from '@dlock/test-utils';
import { Redis as IORedis, Cluster as IORedisCluster } from 'ioredis';
import { createClient, createClientPool, createCluster } from 'redis';
import { createClient as createClient4 } from 'redis4';
import { createClient as createClient6 } from 'redis6';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { lockKeys, RedisLockService, RedlockService } from '../src/index.js';
import { connect, disconnect, eventually, type Redis, sleep } from './helpers.js';

// Real client objects of other libraries and majors, connected where that is how an application would pass them.
let redis: Redis;
let io: IORedis;
let redis4: ReturnType<typeof createClient4>;

beforeAll(async () => {
  redis = await connect(REDIS_URL);
  io = new IORedis(REDIS_URL, { maxRetriesPerRequest: 1 });
  io.on('error', () => {});
  redis4 = createClient4({ url: REDIS_URL });
  redis4.on('error', () => {});
  await redis4.connect();
});

afterAll(async () => {
  io.disconnect();
  await redis4.disconnect();
  await disconnect(redis);
});

/** What each construction throws (its message), or 'accepted'. */
function construct(make: () => { close(): Promise<void> }): string {
  try {
    void make()
      .close()
      .catch(() => {});
    return 'accepted';
  } catch (error) {
    expect(error).toBeInstanceOf(InvalidArgumentError);
    return (error as InvalidArgumentError).message;
  }
}

describe('clients the services cannot use are refused at construction, saying what was passed', () => {
  it('node-redis 4, a pool, look-alikes and non-clients: refused as client, subscriber and Redlock node', () => {
    const pool = createClientPool({ url: REDIS_URL });
    const foreign: [unknown, string][] = [
      [redis4, 'a node-redis 4 client'],
      [pool, 'a node-redis client pool (createClientPool)'],
      [{ sendCommand: () => Promise.resolve() }, 'an object that is no Redis client this adapter knows'],
      [new (class Lookalike {})(), 'a Lookalike object that is no Redis client this adapter knows'],
      ['redis://127.0.0.1', 'a string'],
      [null, 'null'],
    ];
    for (const [client, described] of foreign) {
      const messages = [
        construct(() => new RedisLockService({ client: client as Redis })),
        construct(() => new RedisLockService({ client: redis, subscriber: client as Redis })),
        construct(() => new RedlockService({ clients: [client as Redis] })),
      ];
      for (const message of messages) {
        expect(message, described).toContain(`got ${described}`);
        expect(message).toContain('node-redis 5 or 6');
        expect(message).toContain('ioredis 5 or 6');
      }
      expect(messages[0]).toMatch(/^options\.client /);
      expect(messages[1]).toMatch(/^options\.subscriber /);
      expect(messages[2]).toMatch(/^options\.clients\[0\] /);
    }
  });

  it('clients that are not connected, a prefixing ioredis, clusters as Redlock nodes, mixed subscribers: refused', () => {
    const lazy = new IORedis(REDIS_URL, { lazyConnect: true });
    const prefixed = new IORedis(REDIS_URL, { lazyConnect: true, keyPrefix: 'app:' });
    const cluster = createCluster({ rootNodes: [{ url: REDIS_URL }] });
    const ioCluster = new IORedisCluster([{ host: '127.0.0.1', port: 6379 }], { lazyConnect: true });
    const cases: [() => { close(): Promise<void> }, RegExp][] = [
      [
        () => new RedisLockService({ client: createClient({ url: REDIS_URL }) }),
        /node-redis 5 or 6 client, but it is not connected/,
      ],
      [
        () => new RedisLockService({ client: createClient6({ url: REDIS_URL }) }),
        /node-redis 5 or 6 client, but it is not connected/,
      ],
      [() => new RedisLockService({ client: lazy }), /ioredis client, but it has not connected yet/],
      [() => new RedisLockService({ client: prefixed }), /keyPrefix/],
      [
        () => new RedisLockService({ client: cluster }),
        /node-redis cluster client \(createCluster\), but it is not connected/,
      ],
      [
        () => new RedlockService({ clients: [cluster] }),
        /^options\.clients\[0\] must be .*not a cluster.*got a node-redis cluster client/,
      ],
      [() => new RedlockService({ clients: [ioCluster] }), /not a cluster.*got an ioredis Cluster client/],
      [
        () => new RedisLockService({ client: redis, subscriber: io }),
        /same kind of client as options\.client \(a node-redis 5 or 6 client\); got an ioredis client/,
      ],
      [
        () => new RedisLockService({ client: io, subscriber: redis }),
        /same kind of client as options\.client \(an ioredis client\)/,
      ],
      [() => new RedisLockService({ client: io, subscriber: io }), /separate connection/],
    ];
    for (const [make, expected] of cases) expect(construct(make)).toMatch(expected);
    lazy.disconnect();
    prefixed.disconnect();
    ioCluster.disconnect();
  });

  it('connected node-redis 5 and 6 clients and ioredis clients are accepted, also in a Redlock mix', () => {
    const six = createClient6({ url: REDIS_URL });
    void six.connect().catch(() => {});
    for (const client of [redis, io, six]) {
      expect(construct(() => new RedisLockService({ client }))).toBe('accepted');
    }
    expect(construct(() => new RedlockService({ clients: [redis, io, six] }))).toBe('accepted');
    six.destroy();
  });
});

describe('the subscriber path', () => {
  it.each(['node-redis', 'ioredis'])(
    'ignores malformed messages on the wake-up and release channels; hand-offs still work (%s)',
    async (family) => {
      const client = family === 'ioredis' ? io : redis;
      const service = new RedisLockService({ client, keyPrefix: 'dlock-foreign:' });
      const redlock = new RedlockService({ clients: [client], keyPrefix: 'dlock-foreign-rl:' });
      const locks = new LockClient(service);
      const quorum = new LockClient(redlock);
      const name = `malformed-${family}-${process.pid}`;
      try {
        const first = await locks.acquire(name, { ttlMs: 5_000 });
        const waiting = locks.acquire(name, { ttlMs: 5_000, waitMs: 5_000 });
        const firstQ = await quorum.acquire(name, { ttlMs: 5_000 });
        const waitingQ = quorum.acquire(name, { ttlMs: 5_000, waitMs: 5_000 });
        let channels: string[] = [];
        expect(
          await eventually(async () => {
            channels = (await redis.sendCommand(['PUBSUB', 'CHANNELS', 'dlock-foreign*'])) as string[];
            return channels.length >= 2;
          }, 2_000),
        ).toBe(true);
        const garbage = [
          '',
          ' ',
          'x',
          'a b c',
          `${first.fencingToken}`,
          'owner 12x',
          'owner 1 2',
          '\u0000\uffff',
        ];
        for (const channel of channels) {
          for (const message of garbage) await redis.publish(channel, message);
          await redis.sendCommand(['PUBLISH', channel, Buffer.from([0xff, 0xfe, 0x00]) as unknown as string]);
        }
        await sleep(100);
        await first.release();
        await firstQ.release();
        const [second, secondQ] = await Promise.all([waiting, waitingQ]);
        expect(second.fencingToken).toBeGreaterThan(first.fencingToken);
        expect(secondQ.fencingToken).toBeGreaterThan(firstQ.fencingToken);
        await second.release();
        await secondQ.release();
        // Free: a release leaves a tombstone ("~ <last token> ...") that keeps the name's counter.
        expect(await redis.get(lockKeys('dlock-foreign:', name).lock)).toMatch(/^~ /);
      } finally {
        await Promise.all([locks.close(), quorum.close()]);
        await Promise.all([service.close(), redlock.close()]);
      }
    },
  );
});

describe('a process given foreign clients', () => {
  it('does not die: every use is refused with an error it can catch, and it exits by itself', async () => {
    const result = await runBuiltPackage(
      new URL('..', import.meta.url),
      `
      import { LockClient } from '@dlock/core';
      import { RedisLockService, RedlockService } from '@dlock/redis';
      import { createClient } from 'redis';
      import { createClient as createClient4 } from 'redis4';
      import { createClient as createClient6 } from 'redis6';
      import { Redis as IORedis } from 'ioredis';
      const url = process.env.REDIS;
      const redis = await createClient({ url }).on('error', () => {}).connect();
      const redis6 = await createClient6({ url }).on('error', () => {}).connect();
      const io = new IORedis(url, { maxRetriesPerRequest: 1 }).on('error', () => {});
      const ioSub = new IORedis(url, { maxRetriesPerRequest: 1 }).on('error', () => {});
      const redis4 = await createClient4({ url }).on('error', () => {}).connect();
      const out = [];
      const uses = [
        ['ioredis', () => new RedisLockService({ client: io })],
        ['ioredis-own-subscriber', () => new RedisLockService({ client: io, subscriber: ioSub })],
        ['ioredis-mixed-subscriber', () => new RedisLockService({ client: redis, subscriber: io })],
        ['ioredis-redlock', () => new RedlockService({ clients: [io] })],
        ['redis4', () => new RedisLockService({ client: redis4 })],
        ['redis4-subscriber', () => new RedisLockService({ client: redis, subscriber: redis4 })],
        ['redis4-redlock', () => new RedlockService({ clients: [redis4] })],
        ['redis6', () => new RedisLockService({ client: redis6 })],
        ['redis6-redlock', () => new RedlockService({ clients: [redis6] })],
      ];
      for (const [label, make] of uses) {
        let service;
        try {
          service = make();
        } catch (error) {
          out.push(label + ':' + error.code);
          continue;
        }
        // Accepted: used as an application would, a wait in the queue included, then closed.
        const locks = new LockClient(service);
        const name = 'foreign:' + process.pid + ':' + label;
        try {
          const first = await locks.acquire(name, { ttlMs: 2_000 });
          const queued = locks.acquire(name, { ttlMs: 2_000, waitMs: 1_000 });
          setTimeout(() => void first.release().catch(() => {}), 50);
          await (await queued).release();
          out.push(label + ':used');
        } catch (error) {
          out.push(label + ':' + (error.code ?? error.message));
        }
        await locks.close();
        try {
          await service.close();
        } catch (error) {
          out.push(label + ':close:' + error.message);
        }
      }
      console.log(out.join(' '));
      io.disconnect();
      ioSub.disconnect();
      await redis4.disconnect();
      redis.destroy();
      redis6.destroy();
    `,
      { timeoutMs: 15_000, env: { REDIS: REDIS_URL } },
    );
    expect(result.stderr).toBe('');
    expect(result.stdout.trim().split(' ')).toEqual([
      'ioredis:used',
      'ioredis-own-subscriber:used',
      'ioredis-mixed-subscriber:INVALID_ARGUMENT',
      'ioredis-redlock:used',
      'redis4:INVALID_ARGUMENT',
      'redis4-subscriber:INVALID_ARGUMENT',
      'redis4-redlock:INVALID_ARGUMENT',
      'redis6:used',
      'redis6-redlock:used',
    ]);
    expect(result.code).toBe(0);
  });
});
