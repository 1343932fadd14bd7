import { type RedisServer, startRedisServer } from '@dlock/test-utils';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { RedlockService } from '../src/redlock/index.js';
import { connect, disconnect, eventually, type Redis, sleep } from './helpers.js';

// RedlockService.watch is public and typed () => void, so an async callback type-checks: the promise it rejects,
// left alone, is an unhandled rejection, on which Node ends the process (LockClient catches its own; this one is
// called directly).

const servers: RedisServer[] = [];
const clients: Redis[] = [];

beforeAll(async () => {
  servers.push(...(await Promise.all([0, 1, 2].map(() => startRedisServer()))));
  clients.push(...(await Promise.all(servers.map((s) => connect(s.url)))));
}, 30_000);

afterAll(async () => {
  await Promise.all(clients.map((c) => disconnect(c)));
  await Promise.all(servers.map((s) => s.process.stop()));
});

describe('a Redlock watch callback that returns a rejected promise', () => {
  it('leaves no unhandled rejection, and the other callbacks still hear', async () => {
    const watcher = new RedlockService({ clients });
    const holder = new RedlockService({ clients });
    const escaped: unknown[] = [];
    const onEscaped = (error: unknown): void => {
      escaped.push(error);
    };
    process.prependListener('unhandledRejection', onEscaped);
    try {
      const name = `async-watch:${process.pid}`;
      const signal = new AbortController().signal;
      const taken = await holder.acquire({ name, ownerId: 'o', ttlMs: 10_000, waitMs: 0, signal });
      if (!taken.acquired) throw new Error('not acquired');
      let rejected = 0;
      let heard = 0;
      const unwatch = [
        watcher.watch(name, async () => {
          rejected += 1;
          throw new Error('async watch callback broke');
        }),
        watcher.watch(name, () => {
          heard += 1;
        }),
      ];
      // The subscriptions go out to every node in the background.
      await sleep(300);
      expect(
        await holder.release({
          name,
          ownerId: 'o',
          ownershipToken: taken.grant.ownershipToken,
          fencingToken: taken.grant.fencingToken,
        }),
      ).toBe(true);
      expect(await eventually(() => heard > 0 && rejected > 0, 3_000)).toBe(true);
      await sleep(100);
      expect(escaped).toEqual([]);
      for (const stop of unwatch) stop();
    } finally {
      process.removeListener('unhandledRejection', onEscaped);
      await watcher.close();
      await holder.close();
    }
  });
});
