import { REDIS_URL, uniqueName } from '@dlock/test-utils';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { RedisLockService } from '../src/index.js';
import { connect, disconnect, eventually, type Redis } from './helpers.js';

// The service's watch and watchChanges are public and typed () => void, so an async callback type-checks: the
// promise it rejects, left alone, is an unhandled rejection, on which Node ends the process (LockClient catches its
// own; these are called directly).

let clients: Redis[] = [];
beforeAll(async () => {
  clients = await Promise.all([connect(REDIS_URL), connect(REDIS_URL), connect(REDIS_URL)]);
});
afterAll(async () => {
  await Promise.all(clients.map((client) => disconnect(client)));
});

describe('watch and watchChanges callbacks that return a rejected promise', () => {
  it('leave no unhandled rejection, and the other callbacks still hear', async () => {
    const [client, subscriber, holderClient] = clients as [Redis, Redis, Redis];
    const watcher = new RedisLockService({ client, subscriber });
    const holder = new RedisLockService({ client: holderClient });
    const escaped: unknown[] = [];
    const onEscaped = (error: unknown): void => {
      escaped.push(error);
    };
    process.prependListener('unhandledRejection', onEscaped);
    try {
      const name = uniqueName('async-watch');
      const signal = new AbortController().signal;
      const taken = await holder.acquire({ name, ownerId: 'o', ttlMs: 10_000, waitMs: 0, signal });
      if (!taken.acquired) throw new Error('not acquired');
      let rejected = 0;
      let heard = 0;
      let changed = 0;
      const unwatch = [
        watcher.watch(name, async () => {
          rejected += 1;
          throw new Error('async watch callback broke');
        }),
        watcher.watchChanges(name, async () => {
          rejected += 1;
          throw new Error('async change callback broke');
        }),
        watcher.watch(name, () => {
          heard += 1;
        }),
        watcher.watchChanges(name, () => {
          changed += 1;
        }),
      ];
      // watchChanges tells its subscribers once when its subscription is in place (and marked): then it hears.
      expect(await eventually(() => changed > 0, 3_000)).toBe(true);
      expect(
        await holder.release({
          name,
          ownerId: 'o',
          ownershipToken: taken.grant.ownershipToken,
          fencingToken: taken.grant.fencingToken,
        }),
      ).toBe(true);
      expect(await eventually(() => heard > 0 && changed > 1 && rejected >= 3, 3_000)).toBe(true);
      await new Promise((resolve) => setImmediate(resolve));
      expect(escaped).toEqual([]);
      for (const stop of unwatch) stop();
    } finally {
      process.removeListener('unhandledRejection', onEscaped);
      await watcher.close();
      await holder.close();
    }
  });
});
