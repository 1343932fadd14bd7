import { LockClient, TransportError } from '@dlock/core';
import { startTcpProxy, type TcpProxy } from '@dlock/test-utils';
import { Redis as IORedis } from 'ioredis';
import { Redis as IORedis6 } from 'ioredis6';
import { afterEach, describe, expect, it } from 'vitest';
import { lockKeys, RedisLockService } from '../src/index.js';
import { connect, eventually, type Redis, sleep } from './helpers.js';

// ioredis connections that drop, on the real server behind a proxy: what ioredis does with the commands and
// subscriptions in flight must not outlive what the service told its callers.
const cleanups: (() => Promise<void>)[] = [];

afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup().catch(() => {});
});

async function setUp(Make: typeof IORedis | typeof IORedis6) {
  const admin: Redis = await connect('redis://127.0.0.1:6379');
  const proxy: TcpProxy = await startTcpProxy({ targetPort: 6379 });
  const client = new (Make as typeof IORedis)(`redis://127.0.0.1:${proxy.port}`, {
    maxRetriesPerRequest: null,
    retryStrategy: () => 50,
    lazyConnect: true,
  });
  client.on('error', () => {});
  await client.connect();
  const service = new RedisLockService({ client, requestTimeoutMs: 300 });
  const locks = new LockClient(service, { operationTimeoutMs: 300 });
  cleanups.push(async () => {
    await locks.close();
    await service.close();
    client.disconnect();
    await proxy.close();
    admin.destroy();
  });
  return { admin, proxy, client, locks };
}

for (const [label, Make] of [
  ['ioredis 5', IORedis],
  ['ioredis 6', IORedis6],
] as const) {
  describe(label, () => {
    // ioredis keeps a command whose connection closed before the reply (`autoResendUnfulfilledCommands`) and one
    // sent while it connects (the offline queue), and writes it once connected again: with
    // `maxRetriesPerRequest: null`, however long that takes. The service answers such a call as unknown at once and
    // undoes what it may have done until TTL + wait has passed; a copy sent after that must not run.
    it('an acquire cut off before its reply never runs later: no grant to nobody once the server is back', async () => {
      const { admin, proxy, client, locks } = await setUp(Make);
      const name = `ioredis-late-acquire-${label}-${Date.now()}`;
      // The scripts are cached on the server, so that a copy sent later would run as it is.
      await (await locks.tryAcquire(`${name}-warm`, { ttlMs: 1_000 }))?.release();
      proxy.mode = 'blackhole';
      const attempt = locks.tryAcquire(name, { ttlMs: 500 }).catch((e: unknown) => e);
      await sleep(50);
      proxy.mode = 'refuse';
      proxy.resetAll();
      expect(await attempt).toBeInstanceOf(TransportError);
      // Longer than TTL + wait: the owner-checked clean-up has given up by the time the server is back.
      await sleep(1_500);
      proxy.mode = 'pass';
      await new Promise((resolve) => client.once('ready', resolve));
      // Whatever ioredis sends again on reconnect is written before this command and answered before it.
      await client.ping();
      expect(await admin.get(lockKeys('dlock:', name).lock)).toBeNull();
      const next = await locks.tryAcquire(name, { ttlMs: 1_000 });
      expect(next?.isHeld()).toBe(true);
      await next?.release();
    });

    it('a subscriber passed in while connecting, whose connection drops in the handshake, is subscribed again', async () => {
      const admin: Redis = await connect('redis://127.0.0.1:6379');
      const proxy = await startTcpProxy({ targetPort: 6379 });
      const client = new (Make as typeof IORedis)('redis://127.0.0.1:6379', { lazyConnect: true });
      client.on('error', () => {});
      await client.connect();
      proxy.mode = 'blackhole';
      const subscriber = new (Make as typeof IORedis)(`redis://127.0.0.1:${proxy.port}`, {
        retryStrategy: () => 50,
      });
      subscriber.on('error', () => {});
      // Listened to from the start: the proxy accepts at once, so 'connect' may come before the holder's acquire ends.
      const inHandshake = new Promise((resolve) => subscriber.once('connect', resolve));
      const keyPrefix = `dlock-drop-${label.replace(' ', '')}-${Date.now()}:`;
      const holderService = new RedisLockService({ client, keyPrefix });
      const service = new RedisLockService({ client, subscriber, keyPrefix, requestTimeoutMs: 300 });
      const holder = new LockClient(holderService);
      const locks = new LockClient(service);
      cleanups.push(async () => {
        await locks.close();
        await holder.close();
        await service.close();
        await holderService.close();
        client.disconnect();
        subscriber.disconnect();
        await proxy.close();
        admin.destroy();
      });
      const name = 'drop-in-handshake';
      const queue = lockKeys(keyPrefix, name).queue;
      const held = await holder.acquire(name, { ttlMs: 30_000 });
      // The first waiting acquire subscribes the service's wake channel: ioredis writes the SUBSCRIBE during its
      // handshake (which the proxy holds up), then the connection drops.
      await inHandshake;
      const first = locks.acquire(name, { ttlMs: 1_000, waitMs: 500 }).catch((e: unknown) => e);
      await sleep(100);
      proxy.resetAll();
      proxy.mode = 'pass';
      await new Promise((resolve) => subscriber.once('ready', resolve));
      await first;
      // Waiters queue again (in Redis, in arrival order) once the service has subscribed on the new connection.
      const queues = await eventually(async () => {
        const waiting = locks.acquire(name, { ttlMs: 1_000, waitMs: 300 }).catch(() => undefined);
        await sleep(150);
        const length = await admin.lLen(queue);
        await waiting;
        return length === 1;
      }, 5_000);
      expect(queues).toBe(true);
      await held.release();
    });
  });
}
