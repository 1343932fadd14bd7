import { LockClient } from '@dlock/core';
import { startZooKeeperServer, uniqueName, type ZooKeeperServer } from '@dlock/test-utils';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { lockParentPath, type ZooKeeperClientLike, ZooKeeperLockService } from '../src/index.js';
import { childrenOf, connectedClient, forkHolder, type Holder, statOf } from './helpers.js';

// A holder frozen past its session timeout while a successor takes the lock, which then calls release() the moment
// it wakes. A private server (tickTime 200) allows a 2 s session, so the pause is short.
const ROOT = '/dlock-test/paused';
const SESSION_MS = 2_000;
// The server expires the session 2.0 to 2.2 s after it last heard from the holder: the pause leaves it room.
const PAUSE_MS = 4_500;

let server: ZooKeeperServer;
let raw: ZooKeeperClientLike;
const cleanups: (() => Promise<unknown> | unknown)[] = [];

beforeAll(async () => {
  server = await startZooKeeperServer({ tickTimeMs: 200 });
  raw = await connectedClient(server.connectString, SESSION_MS);
}, 60_000);

afterAll(async () => {
  raw?.close();
  await server?.stop();
});

afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

function startHolder(mode: 'client' | 'service', name: string): Holder {
  const holder = forkHolder(server.connectString, ROOT, name, mode, SESSION_MS);
  cleanups.push(() => holder.stop());
  return holder;
}

/** A successor on its own session; it queues behind the frozen holder and is served when that session expires. */
function successor(): { service: ZooKeeperLockService; client: LockClient } {
  const service = new ZooKeeperLockService({
    connectionString: server.connectString,
    sessionTimeoutMs: SESSION_MS,
    root: ROOT,
  });
  const client = new LockClient(service);
  cleanups.push(
    () => service.close(),
    () => client.close(),
  );
  return { service, client };
}

/**
 * Freezes the holder, lets the successor take the lock while it is frozen, and returns what the holder's release()
 * did when it woke, with the successor's handle and service.
 */
async function pauseWhileSuccessorTakesOver(mode: 'client' | 'service') {
  const name = uniqueName(`paused-${mode}`);
  const holder = startHolder(mode, name);
  const acquired = await holder.next('acquired', 20_000);
  const { service, client } = successor();
  // Warm up the successor's session first, so that its queueing starts well inside the pause.
  await (await client.acquire(uniqueName('warm'), { ttlMs: SESSION_MS })).release();

  holder.child.send({ type: 'pause', ms: PAUSE_MS });
  const pausedAt = Date.now();
  const next = await client.acquire(name, { ttlMs: SESSION_MS, waitMs: 10_000 });
  const takenAt = Date.now();
  const released = await holder.next('released', PAUSE_MS + 10_000);
  return { name, acquired, next, takenAt, pausedAt, released, service };
}

async function expectSuccessorKeepsTheLock(
  name: string,
  next: Awaited<ReturnType<typeof pauseWhileSuccessorTakesOver>>['next'],
  service: ZooKeeperLockService,
): Promise<void> {
  expect(next.isHeld()).toBe(true);
  expect(await next.renew()).toBe(true);
  const parent = lockParentPath(ROOT, name);
  const queue = await childrenOf(raw, parent);
  expect(queue).toHaveLength(1);
  const stat = await statOf(raw, `${parent}/${queue[0]}`);
  expect(stat?.ephemeralOwner.toString('hex')).toBe(service.session?.id);
  await next.release();
}

describe('a holder paused past its session timeout, released on waking', () => {
  it('LockClient: release() rejects with LockLostError (expired), the handle is lost, onLost once; the successor keeps the lock', {
    timeout: 40_000,
  }, async () => {
    const { name, acquired, next, takenAt, pausedAt, released, service } =
      await pauseWhileSuccessorTakesOver('client');
    // The successor was served while the holder was frozen, and is fenced above it.
    expect(takenAt).toBeLessThan(released.wokeAt ?? 0);
    // Only once the server expired the holder's session: it last heard from the holder up to a third of the
    // timeout before the pause (pings), so at least two thirds of it passed.
    expect(takenAt - pausedAt).toBeGreaterThanOrEqual(SESSION_MS / 2);
    expect(next.fencingToken).toBeGreaterThan(BigInt(acquired.token ?? '0'));

    expect(released.outcome).toMatchObject({
      settled: 'rejected',
      error: { code: 'LOCK_LOST', reason: 'expired' },
    });
    expect(released.state).toBe('lost');
    expect(released.lost).toEqual(['expired']);
    await expectSuccessorKeepsTheLock(name, next, service);
  });

  it('the adapter: release(lease) resolves false ("nothing of ours was deleted") instead of a transport error', {
    timeout: 40_000,
  }, async () => {
    const { name, acquired, next, takenAt, released, service } =
      await pauseWhileSuccessorTakesOver('service');
    expect(takenAt).toBeLessThan(released.wokeAt ?? 0);
    expect(next.fencingToken).toBeGreaterThan(BigInt(acquired.token ?? '0'));
    expect(released.outcome).toEqual({ settled: 'resolved', value: false });
    await expectSuccessorKeepsTheLock(name, next, service);
  });
});
