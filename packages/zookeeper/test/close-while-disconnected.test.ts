import type { EventEmitter } from 'node:events';
import { startTcpProxy, uniqueName, ZK_CONNECT } from '@dlock/test-utils';
import { describe, expect, it } from 'vitest';
import { lockParentPath, type ZooKeeperClientLike, ZooKeeperLockService } from '../src/index.js';
import { semaphorePath } from '../src/keys.js';
import { closeAfterEach } from './close-after-each.js';
import { childrenOf, connectedClient, reconnectedUnder, waitFor } from './helpers.js';

// close() on a service whose caller's client is disconnected at that moment: the server keeps the session (the
// connection comes back well within its timeout), and so the lock's grant and the permit's slot. They must go once
// the client is connected under that session again, or the lock and the permit stay taken for as long as the
// caller's client lives, by a service that is closed.
const ROOT = '/dlock-test/close-disconnected';
const SESSION_MS = 20_000; // long enough that the server keeps the session while the connection is cut
const onClose = closeAfterEach();

const stateListeners = (client: ZooKeeperClientLike): number =>
  (client as unknown as EventEmitter).listenerCount('state');

describe('close() while the caller-owned client is disconnected', () => {
  it('the lock and the permit it held are freed once the client reconnects under the same session', {
    timeout: 40_000,
  }, async () => {
    const proxy = onClose(await startTcpProxy({ targetPort: Number(ZK_CONNECT.split(':')[1]) }));
    const own = onClose(await connectedClient(`127.0.0.1:${proxy.port}`, SESSION_MS));
    const listenersBefore = stateListeners(own);
    const service = onClose(new ZooKeeperLockService({ client: own, root: ROOT }));
    const other = onClose(new ZooKeeperLockService({ connectionString: ZK_CONNECT, root: ROOT }));
    const raw = onClose(await connectedClient(ZK_CONNECT));
    const signal = new AbortController().signal;
    const lock = uniqueName('lock');
    const semaphore = uniqueName('sem');
    const request = { ownerId: 'closed', ttlMs: SESSION_MS, waitMs: 0, signal };

    expect((await service.acquire({ name: lock, ...request })).acquired).toBe(true);
    expect((await service.acquirePermit({ name: semaphore, permits: 1, ...request })).acquired).toBe(true);
    const sessionId = service.session?.id;
    expect(await childrenOf(raw, lockParentPath(ROOT, lock))).toHaveLength(1);
    expect(await other.availablePermits(semaphore, 1)).toBe(0);

    // Cut the connection; the client keeps trying to reconnect and is refused, while the server keeps its session.
    proxy.mode = 'refuse';
    proxy.resetAll();
    expect(await waitFor(() => own.getState().code === 0, 5_000)).toBe(true);

    const startedAt = Date.now();
    await service.close();
    expect(Date.now() - startedAt).toBeLessThan(3_000);
    // Nothing could be deleted: the nodes are still there.
    expect(await childrenOf(raw, lockParentPath(ROOT, lock))).toHaveLength(1);
    expect(await childrenOf(raw, `${semaphorePath(ROOT, semaphore)}/slots-1`)).toHaveLength(1);

    proxy.mode = 'pass';
    expect(await reconnectedUnder(own, sessionId)).toBe(true);

    // Another service takes both within a bound, although the caller's client (and its session) lives on.
    const [lockTaken, permitTaken] = await Promise.all([
      other.acquire({ name: lock, ownerId: 'other', ttlMs: SESSION_MS, waitMs: 5_000, signal }),
      other.acquirePermit({
        name: semaphore,
        permits: 1,
        ownerId: 'other',
        ttlMs: SESSION_MS,
        waitMs: 5_000,
        signal,
      }),
    ]);
    expect([lockTaken.acquired, permitTaken.acquired]).toEqual([true, true]);
    // The closed service stopped following the client once its nodes were gone.
    expect(await waitFor(() => stateListeners(own) === listenersBefore, 2_000)).toBe(true);
    expect(own.getSessionId().toString('hex')).toBe(sessionId);
    if (lockTaken.acquired) await other.release({ name: lock, ownerId: 'other', ...lockTaken.grant });
    if (permitTaken.acquired)
      await other.release({ name: semaphore, ownerId: 'other', ...permitTaken.grant });
  });

  it.each([
    ['after', false],
    ['before', true],
  ] as const)(
    'a client its owner closes while disconnected, %s close(): the service lets go of it',
    {
      timeout: 40_000,
    },
    async (_, closeFirst) => {
      const proxy = onClose(await startTcpProxy({ targetPort: Number(ZK_CONNECT.split(':')[1]) }));
      const own = await connectedClient(`127.0.0.1:${proxy.port}`, SESSION_MS);
      const listenersBefore = stateListeners(own);
      const service = onClose(new ZooKeeperLockService({ client: own, root: ROOT }));
      const signal = new AbortController().signal;
      const lock = uniqueName('lock');
      const request = { name: lock, ownerId: 'closed', ttlMs: SESSION_MS, waitMs: 0, signal };
      expect((await service.acquire(request)).acquired).toBe(true);

      proxy.mode = 'refuse';
      proxy.resetAll();
      expect(await waitFor(() => own.getState().code === 0, 5_000)).toBe(true);
      if (closeFirst) own.close();
      const startedAt = Date.now();
      await service.close();
      expect(Date.now() - startedAt).toBeLessThan(3_000);
      if (!closeFirst) {
        // Still followed for the lock's node, which a reconnect under the session would have to delete.
        expect(stateListeners(own)).toBeGreaterThan(listenersBefore);
        own.close();
      }
      // Closed, the client says nothing (it stays DISCONNECTED): the service must let go of it all the same.
      expect(await waitFor(() => stateListeners(own) === listenersBefore, 2_000)).toBe(true);
      // Every call settles with ClientClosedError; none waits for the closed client.
      const lease = { name: lock, ownerId: 'closed', ownershipToken: 'x', fencingToken: 1n };
      const outcomes = await Promise.all(
        [
          service.acquire(request),
          service.acquirePermit({ ...request, permits: 1 }),
          service.renew({ lease, ttlMs: 1_000 }),
          service.renewMany([{ lease, ttlMs: 1_000 }]),
          service.release(lease),
          service.inspect(lock),
          service.updateMetadata(lease, 'm'),
        ].map((call) =>
          call.then(
            () => 'ok',
            (error: { code?: string }) => error.code,
          ),
        ),
      );
      expect(outcomes).toEqual(Array(outcomes.length).fill('CLIENT_CLOSED'));
      await service.close();
    },
  );
});
