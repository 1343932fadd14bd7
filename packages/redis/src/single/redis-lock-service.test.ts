import { InvalidArgumentError, TransportError } from '@dlock/core';
import { FakeClock } from '@dlock/testing';
import { describe, expect, it } from 'vitest';
import type { RedisClientLike, RedisSubscriberLike } from '../client-like.js';
import { DEFAULT_FENCE_RETENTION_MS } from '../options.js';
import { RedisLockService } from './redis-lock-service.js';
import { lockScripts } from './scripts.js';

// Deterministic: the service on a FakeClock, with stand-ins shaped like node-redis clients (no server).

const scripts = lockScripts(DEFAULT_FENCE_RETENTION_MS);
const scriptName = new Map(Object.entries(scripts).map(([name, script]) => [script.sha, name]));

/** An object with the shape of a node-redis 5 client; `answer` plays the server. */
function nodeRedisLike(
  answer: (command: readonly string[]) => Promise<unknown>,
): RedisClientLike & RedisSubscriberLike {
  const like = {
    isOpen: true,
    isReady: true,
    sendCommand: (command: readonly string[]) => answer(command),
    duplicate: () => like,
    connect: async () => like,
    subscribe: async () => {},
    unsubscribe: async () => {},
    on: () => like,
    off: () => like,
    close: async () => {},
    destroy: () => {},
  };
  return like;
}

const request = (waitMs: number) => ({
  name: 'job',
  ownerId: 'test',
  ttlMs: 10_000,
  waitMs,
  signal: new AbortController().signal,
});

describe('RedisLockService on an injected clock', () => {
  it('bounds a request that never answers by requestTimeoutMs of that clock', async () => {
    const clock = new FakeClock();
    const client = nodeRedisLike(() => new Promise(() => {}));
    const service = new RedisLockService({ client, clock, requestTimeoutMs: 300 });
    let outcome: unknown;
    service.acquire(request(0)).catch((error: unknown) => {
      outcome = error;
    });
    await clock.advance(299);
    expect(outcome).toBeUndefined();
    await clock.advance(2);
    expect(outcome).toBeInstanceOf(TransportError);
    expect(String(outcome)).toContain('acquire did not answer within 300 ms');
  });

  it('waits in the queue on that clock: to its deadline, then leaves (one script to queue, one to leave)', async () => {
    const clock = new FakeClock();
    const sent: string[] = [];
    const client = nodeRedisLike(async (command) => {
      const name = scriptName.get(command[1] as string) ?? (command[0] as string);
      sent.push(name);
      // acquire: busy, the holder's lease has 5 s left; leave: nothing was handed to us.
      return name === 'acquire' ? 5_000 : 0;
    });
    const subscriber = nodeRedisLike(async () => 'OK');
    const service = new RedisLockService({ client, subscriber, clock });
    let outcome: unknown;
    void service.acquire(request(1_000)).then((result) => {
      outcome = result;
    });
    await clock.advance(999);
    expect(outcome).toBeUndefined();
    expect(sent).toEqual(['acquire']);
    await clock.advance(2);
    expect(outcome).toEqual({ acquired: false });
    expect(sent).toEqual(['acquire', 'leave']);
    await service.close();
  });
});

describe('RedisLockService options', () => {
  const client = nodeRedisLike(async () => 1);

  it('takes requestTimeoutMs, and commandTimeoutMs as its deprecated name, but not both', () => {
    expect(() => new RedisLockService({ client, requestTimeoutMs: 100 })).not.toThrow();
    expect(() => new RedisLockService({ client, commandTimeoutMs: 100.5 })).not.toThrow();
    for (const bad of [0, 1.5, 2 ** 31, Number.NaN]) {
      expect(() => new RedisLockService({ client, requestTimeoutMs: bad }), String(bad)).toThrow(
        InvalidArgumentError,
      );
    }
    let error: unknown;
    try {
      new RedisLockService({ client, requestTimeoutMs: 100, commandTimeoutMs: 100 });
    } catch (e) {
      error = e;
    }
    expect(error).toBeInstanceOf(InvalidArgumentError);
    expect((error as InvalidArgumentError).field).toBe('options.commandTimeoutMs');
    expect(() => new RedisLockService({ client, clock: {} as never })).toThrow(InvalidArgumentError);
  });

  it('rejects every call after close() with ClientClosedError', async () => {
    const service = new RedisLockService({ client });
    await service.close();
    const lease = { name: 'job', ownerId: 'test', ownershipToken: 't', fencingToken: 1n };
    await expect(service.acquire(request(0))).rejects.toMatchObject({ code: 'CLIENT_CLOSED' });
    await expect(service.renew({ lease, ttlMs: 1_000 })).rejects.toMatchObject({ code: 'CLIENT_CLOSED' });
    await expect(service.renewMany([{ lease, ttlMs: 1_000 }])).rejects.toMatchObject({
      code: 'CLIENT_CLOSED',
    });
    await expect(service.release(lease)).rejects.toMatchObject({ code: 'CLIENT_CLOSED' });
  });
});
