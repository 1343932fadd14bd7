import { uniqueName, ZK_CONNECT } from '@dlock/test-utils';
import { afterAll, describe, expect, it } from 'vitest';
import { ZooKeeperLockService } from '../src/index.js';
import { waitFor } from './helpers.js';

// The service's watch and watchChanges are public and typed () => void, so an async callback type-checks: the
// promise it rejects, left alone, is an unhandled rejection, on which Node ends the process (LockClient catches its
// own; these are called directly).

const ROOT = `/dlock-test/watch-async-callbacks/${uniqueName('run')}`;
const watcher = new ZooKeeperLockService({ connectionString: ZK_CONNECT, keyPrefix: ROOT });
const holder = new ZooKeeperLockService({ connectionString: ZK_CONNECT, keyPrefix: ROOT });
const signal = new AbortController().signal;

afterAll(async () => {
  await watcher.close();
  await holder.close();
});

describe('watch and watchChanges callbacks that return a rejected promise', () => {
  it('leave no unhandled rejection, and the other callbacks still hear', async () => {
    const escaped: unknown[] = [];
    const onEscaped = (error: unknown): void => {
      escaped.push(error);
    };
    process.prependListener('unhandledRejection', onEscaped);
    try {
      const name = uniqueName('async-watch');
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
      // The change watch tells its subscribers once its first read is in; the release watch reads the head alike.
      expect(await waitFor(() => changed > 0, 3_000)).toBe(true);
      await new Promise((resolve) => setTimeout(resolve, 200));
      await holder.release({
        name,
        ownerId: 'o',
        ownershipToken: taken.grant.ownershipToken,
        fencingToken: taken.grant.fencingToken,
      });
      expect(await waitFor(() => heard > 0 && changed > 1 && rejected >= 3, 3_000)).toBe(true);
      await new Promise((resolve) => setImmediate(resolve));
      expect(escaped).toEqual([]);
      for (const stop of unwatch) stop();
    } finally {
      process.removeListener('unhandledRejection', onEscaped);
    }
  });
});
