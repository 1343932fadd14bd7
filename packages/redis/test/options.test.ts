import { InvalidArgumentError, LockClient } from '@dlock/core';
import { REDIS_URL, startTcpProxy } from '@dlock/test-utils';
import { Redis as IORedis, Cluster as IORedisCluster } from 'ioredis';
import { createClient, createCluster } from 'redis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type RedisClientLike, RedisLockService, type RedisSubscriberLike } from '../src/index.js';
import { connect, disconnect, type Redis } from './helpers.js';

let client: Redis;
beforeAll(async () => {
  client = await connect(REDIS_URL);
});
afterAll(async () => {
  await disconnect(client);
});

describe('RedisLockService options', () => {
  it('takes every supported client type as it comes from its library (checked by the compiler)', () => {
    const fresh = createClient({ url: REDIS_URL });
    const cluster = createCluster({ rootNodes: [{ url: REDIS_URL }] });
    const io = new IORedis({ lazyConnect: true });
    const ioCluster = new IORedisCluster([{ host: '127.0.0.1', port: 6379 }], { lazyConnect: true });
    const clients: RedisClientLike[] = [fresh, cluster, io, ioCluster, fresh.duplicate()];
    const asSubscriber: RedisSubscriberLike = fresh.duplicate();
    for (const each of [...clients, asSubscriber]) expect(typeof each.duplicate).toBe('function');
    io.disconnect();
    ioCluster.disconnect();
  });

  it('refuses bad options before touching Redis', () => {
    const bad: unknown[] = [
      undefined,
      null,
      {},
      { client: {} },
      { client, keyPrefix: 'a{b' },
      { client, keyPrefix: 'x}' },
      { client, keyPrefix: 5 },
      { client, subscriber: client },
      { client, subscriber: {} },
      { client, commandTimeoutMs: 0 },
      { client, commandTimeoutMs: Number.NaN },
      { client, commandTimeoutMs: 2 ** 31 },
      { client, fenceRetentionMs: 999 },
      { client, fenceRetentionMs: 1.5e3 + 0.5 },
      { client: { sendCommand: () => Promise.resolve() } }, // not a node-redis client
      [client], // an array is not an options object
    ];
    for (const options of bad) {
      expect(() => new RedisLockService(options as never), JSON.stringify(options)).toThrow(
        InvalidArgumentError,
      );
    }
  });

  it('refuses misspelt option keys, naming the key and the option probably meant', () => {
    const cases: [Record<string, unknown>, string, string | undefined][] = [
      [{ client, prefix: 'mine:' }, 'options.prefix', 'keyPrefix'],
      [{ client, keyprefix: 'mine:' }, 'options.keyprefix', 'keyPrefix'],
      [{ client, commandTimeout: 100 }, 'options.commandTimeout', 'commandTimeoutMs'],
      [{ client, fenceRetention: 60_000 }, 'options.fenceRetention', 'fenceRetentionMs'],
      [{ client, subscribr: client }, 'options.subscribr', 'subscriber'],
      [{ clients: [client] }, 'options.clients', 'client'],
      [{ client, somethingElse: true }, 'options.somethingElse', undefined],
    ];
    for (const [options, field, meant] of cases) {
      let error: unknown;
      try {
        new RedisLockService(options as never);
      } catch (e) {
        error = e;
      }
      expect(error, field).toBeInstanceOf(InvalidArgumentError);
      expect((error as InvalidArgumentError).field).toBe(field);
      if (meant === undefined) expect((error as Error).message).not.toContain('did you mean');
      else expect((error as Error).message).toContain(`did you mean "${meant}"`);
    }
  });

  it('refuses bad requests before touching Redis', async () => {
    const service = new RedisLockService({ client });
    const request = {
      name: 'n',
      ownerId: 'o',
      ttlMs: 1_000,
      waitMs: 0,
      signal: new AbortController().signal,
    };
    await expect(service.acquire({ ...request, name: '' })).rejects.toThrow(InvalidArgumentError);
    await expect(service.acquire({ ...request, name: 'x'.repeat(1_025) })).rejects.toThrow(
      InvalidArgumentError,
    );
    await expect(service.acquire({ ...request, name: '\uD800' })).rejects.toThrow(InvalidArgumentError);
    await expect(service.acquire({ ...request, ttlMs: 0 })).rejects.toThrow(InvalidArgumentError);
    await expect(service.acquire({ ...request, ttlMs: 1.5 })).rejects.toThrow(InvalidArgumentError);
    await service.close();
  });

  it('keeps locks of services with different prefixes apart', async () => {
    const a = new RedisLockService({ client, keyPrefix: 'dlock-test-a:', fenceRetentionMs: 60_000 });
    const b = new RedisLockService({ client, keyPrefix: 'dlock-test-b:', fenceRetentionMs: 60_000 });
    const name = `prefix-${process.pid}-${Date.now()}`;
    const la = new LockClient(a);
    const lb = new LockClient(b);
    const ha = await la.acquire(name, { ttlMs: 2_000 });
    const hb = await lb.acquire(name, { ttlMs: 2_000 });
    expect(await client.exists(`dlock-test-a:{${name}}:lock`)).toBe(1);
    expect(await client.exists(`dlock-test-b:{${name}}:lock`)).toBe(1);
    await ha.release();
    await hb.release();
    await la.close();
    await lb.close();
    await a.close();
    await b.close();
  });

  it('refuses a client that was never connected, and fails fast while a connected one reconnects', async () => {
    expect(() => new RedisLockService({ client: createClient({ url: REDIS_URL }) })).toThrow(
      /options\.client got a node-redis 5 or 6 client, but it is not connected/,
    );
    const proxy = await startTcpProxy({ targetPort: Number(new URL(REDIS_URL).port || 6379) });
    const offline = await connect(`redis://127.0.0.1:${proxy.port}`);
    const service = new RedisLockService({ client: offline });
    proxy.mode = 'refuse';
    proxy.resetAll();
    await new Promise((resolve) => setTimeout(resolve, 50));
    expect(offline.isOpen && !offline.isReady).toBe(true);
    const started = performance.now();
    await expect(
      service.acquire({
        name: 'offline',
        ownerId: 'o',
        ttlMs: 1_000,
        waitMs: 0,
        signal: new AbortController().signal,
      }),
    ).rejects.toMatchObject({ code: 'TRANSPORT' });
    expect(performance.now() - started).toBeLessThan(500);
    await service.close();
    offline.destroy();
    await proxy.close();
  });

  it('closes the subscriber it made, and only that one', async () => {
    const own = await connect(REDIS_URL);
    const subscriber = await connect(REDIS_URL);
    const mine = new RedisLockService({ client: own });
    const theirs = new RedisLockService({ client: own, subscriber });
    const unwatchA = mine.watch('close-check', () => {});
    const unwatchB = theirs.watch('close-check', () => {});
    await new Promise((resolve) => setTimeout(resolve, 100));
    unwatchA();
    unwatchB();
    await mine.close();
    await theirs.close();
    await mine.close(); // idempotent
    expect(subscriber.isOpen).toBe(true);
    expect(own.isOpen).toBe(true);
    await expect(
      mine.acquire({
        name: 'x',
        ownerId: 'o',
        ttlMs: 1_000,
        waitMs: 0,
        signal: new AbortController().signal,
      }),
    ).rejects.toMatchObject({ code: 'CLIENT_CLOSED' });
    await disconnect(subscriber);
    await disconnect(own);
  });
});
