import { LockClient } from '@dlock/core';
import { uniqueName, ZK_CONNECT } from '@dlock/test-utils';
import { afterEach, describe, expect, it } from 'vitest';
import { lockParentPath, type ZooKeeperClientLike, ZooKeeperLockService } from '../src/index.js';
import { MIN_SWEEP_INTERVAL_MS } from '../src/parent-sweep.js';
import { childrenOf, connectedClient, forkHolder, statOf, waitFor } from './helpers.js';

// A process that dies leaves the parents of its locks behind (it would have deleted them once idle): a surviving
// service with a session open finds them and deletes them.
const ROOT = '/dlock-test/stale';
const SESSION_MS = 4_000; // the shared server's minimum (tickTime 2000)
const IDLE_MS = 300;
const cleanups: (() => Promise<unknown> | unknown)[] = [];

afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

function call(fn: (cb: (error: Error | null | undefined) => void) => void): Promise<void> {
  return new Promise((resolve, reject) => fn((error) => (error ? reject(error) : resolve())));
}

describe('lock parents left by a process that died', () => {
  it('are deleted by a surviving service once idle; a parent in use and a node with data are left alone', {
    timeout: 40_000,
  }, async () => {
    const raw: ZooKeeperClientLike = await connectedClient(ZK_CONNECT);
    cleanups.push(() => raw.close());
    const survivor = new ZooKeeperLockService({
      connectionString: ZK_CONNECT,
      root: ROOT,
      idleParentMs: IDLE_MS,
    });
    const survivorLocks = new LockClient(survivor);
    const busy = new ZooKeeperLockService({ connectionString: ZK_CONNECT, root: ROOT });
    const busyLocks = new LockClient(busy);
    cleanups.push(
      () => survivor.close(),
      () => survivorLocks.close(),
      () => busy.close(),
      () => busyLocks.close(),
    );
    // The survivor's session is open (it sweeps only then); another process holds a lock all along.
    await (await survivorLocks.acquire(uniqueName('warm'), { ttlMs: SESSION_MS })).release();
    const busyName = uniqueName('busy');
    const busyHandle = await busyLocks.acquire(busyName, { ttlMs: SESSION_MS });
    // Not a lock's parent: it has data. Only lock parents, which never do, are deleted.
    const foreign = `${ROOT}/${uniqueName('config')}`;
    await call((cb) => raw.create(foreign, Buffer.from('keep me'), 0, (error) => cb(error)));
    cleanups.push(() => call((cb) => raw.remove(foreign, -1, cb)).catch(() => {}));

    const name = uniqueName('dead');
    const parent = lockParentPath(ROOT, name);
    const holder = forkHolder(ZK_CONNECT, ROOT, name, 'client', SESSION_MS);
    cleanups.push(() => holder.stop());
    await holder.next('acquired', 20_000);
    expect(await childrenOf(raw, parent)).toHaveLength(1);
    holder.child.kill('SIGKILL');

    // The server expires the dead session (4 to 6 s), which deletes its node but not the parent.
    expect(await waitFor(async () => (await childrenOf(raw, parent)).length === 0, 15_000, 50)).toBe(true);
    const emptiedAt = Date.now();
    expect(await waitFor(async () => (await statOf(raw, parent)) === null, 10_000, 50)).toBe(true);
    // Seen empty on one pass and deleted on the next: two passes (each at most 1.5 intervals apart), and slack.
    expect(Date.now() - emptiedAt).toBeLessThan(3 * MIN_SWEEP_INTERVAL_MS + 2_000);

    expect(await statOf(raw, lockParentPath(ROOT, busyName))).not.toBeNull();
    expect(busyHandle.isHeld()).toBe(true);
    expect(await statOf(raw, foreign)).not.toBeNull();
    await busyHandle.release();
  });
});
