import { LockClient, type Permit } from '@dlock/core';
import { startTcpProxy, startZooKeeperServer, uniqueName, type ZooKeeperServer } from '@dlock/test-utils';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { type ZooKeeperClientLike, ZooKeeperLockService } from '../src/index.js';
import { semaphorePath } from '../src/keys.js';
import { type Child, forkFixture } from './child.js';
import { childrenOf, connectedClient, statOf, waitFor } from './helpers.js';

// Permit holders that freeze, die, or lose their session. A private server (tickTime 200) allows 2 s sessions, so
// the waits are short. Holders run the BUILT package in child processes (fixtures/permit-holder.mjs).
const ROOT = '/dlock-test/semaphore-faults';
const SESSION_MS = 2_000;
// The server expires a session 2.0 to 2.2 s after it last heard from it: the pause leaves it room.
const PAUSE_MS = 4_000;

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

function holder(name: string, permits: number, count: number): Child {
  const child = forkFixture('permit-holder.mjs', [
    server.connectString,
    ROOT,
    name,
    String(permits),
    String(count),
    String(SESSION_MS),
  ]);
  cleanups.push(() => child.stop());
  return child;
}

function local(connectionString = server.connectString): {
  service: ZooKeeperLockService;
  client: LockClient;
} {
  const service = new ZooKeeperLockService({
    connectionString,
    sessionTimeoutMs: SESSION_MS,
    keyPrefix: ROOT,
  });
  const client = new LockClient(service);
  cleanups.push(
    () => service.close(),
    () => client.close(),
  );
  return { service, client };
}

interface Held {
  readonly slot: number;
  readonly token: string;
}

describe('permit holders that freeze or die', () => {
  it('a holder frozen past its session loses its slot to a waiter with a higher token; its release() then rejects LockLostError', {
    timeout: 30_000,
  }, async () => {
    const name = uniqueName('paused');
    const frozen = holder(name, 1, 1);
    const [held] = (await frozen.next('acquired', 20_000))['permits'] as Held[];
    const { service, client } = local();
    const pool = client.semaphore(name, { permits: 1, ttlMs: SESSION_MS });
    expect(await pool.tryAcquire()).toBeNull(); // and the session is up before the pause starts

    frozen.send({ type: 'pause', ms: PAUSE_MS });
    const pausedAt = Date.now();
    const next = await pool.acquire({ waitMs: 10_000 });
    const takenAt = Date.now();
    const released = await frozen.next('released', PAUSE_MS + 10_000);
    // Served while the holder was still frozen, once the server had expired its session.
    expect(takenAt).toBeLessThan(released['wokeAt'] as number);
    expect(takenAt - pausedAt).toBeGreaterThanOrEqual(SESSION_MS / 2);
    expect(next.slot).toBe(held?.slot);
    expect(next.fencingToken).toBeGreaterThan(BigInt(held?.token ?? '0'));
    expect(released['outcome']).toMatchObject({
      settled: 'rejected',
      error: { code: 'LOCK_LOST', reason: 'expired' },
    });
    expect(released['state']).toBe('lost');
    expect(released['lost']).toEqual(['expired']);
    // The waiter keeps the slot: the holder's release deleted nothing.
    expect(next.isHeld()).toBe(true);
    expect(await next.renew()).toBe(true);
    const slots = `${semaphorePath(ROOT, name)}/slots-1`;
    expect(await childrenOf(raw, slots)).toEqual(['0']);
    expect((await statOf(raw, `${slots}/0`))?.ephemeralOwner.toString('hex')).toBe(service.session?.id);
    await next.release();
  });

  it("a killed process's permits go to the waiters within the session timeout", {
    timeout: 30_000,
  }, async () => {
    const name = uniqueName('killed');
    const doomed = holder(name, 3, 2);
    const held = (await doomed.next('acquired', 20_000))['permits'] as Held[];
    const { client } = local();
    const pool = client.semaphore(name, { permits: 3, ttlMs: SESSION_MS });
    const spare = await pool.acquire();
    const waiters = [pool.acquire({ waitMs: 10_000 }), pool.acquire({ waitMs: 10_000 })];
    const queue = `${semaphorePath(ROOT, name)}/queue-3`;
    expect(await waitFor(async () => (await childrenOf(raw, queue)).length === 2, 5_000)).toBe(true);
    doomed.process.kill('SIGKILL');
    const killedAt = Date.now();
    const permits = await Promise.all(waiters);
    const returnedMs = Date.now() - killedAt;
    // The server expires the session at most a timeout after it last heard from the process, checked per tick.
    expect(returnedMs).toBeLessThan(SESSION_MS + 500);
    expect(permits.map((p) => p.slot).sort()).toEqual(held.map((h) => h.slot).sort());
    for (const permit of permits) {
      const before = held.find((h) => h.slot === permit.slot);
      expect(permit.fencingToken).toBeGreaterThan(BigInt(before?.token ?? '0'));
    }
    await Promise.all([spare, ...permits].map((p) => p.release()));
  });
});

describe('a session that ends under held permits', () => {
  it('reports every permit through watchLeases and loses the handles; the slots are free for others', {
    timeout: 30_000,
  }, async () => {
    const proxy = await startTcpProxy({ targetPort: Number(server.connectString.split(':')[1]) });
    cleanups.push(() => proxy.close());
    const { service, client } = local(`127.0.0.1:${proxy.port}`);
    const reported: string[] = [];
    service.watchLeases((tokens) => reported.push(...tokens));
    const name = uniqueName('expired');
    const pool = client.semaphore(name, { permits: 2, ttlMs: SESSION_MS });
    const lost: string[] = [];
    const permits: Permit[] = [];
    for (let i = 0; i < 2; i++) {
      permits.push(await pool.acquire({ onLost: (_p, reason) => lost.push(reason) }));
    }
    const session = service.session?.id;
    proxy.mode = 'blackhole';
    expect(await waitFor(() => permits.every((p) => p.state === 'lost'), SESSION_MS + 3_000)).toBe(true);
    expect(new Set(reported).size).toBe(2);
    expect(lost).toHaveLength(2);
    proxy.mode = 'pass';
    // The server expired the session, and with it the slot nodes: another process takes both slots.
    const other = local().client.semaphore(name, { permits: 2, ttlMs: SESSION_MS });
    const again = [await other.acquire({ waitMs: 5_000 }), await other.acquire({ waitMs: 5_000 })];
    for (const permit of again) {
      const before = permits.find((p) => p.slot === permit.slot) as Permit;
      expect(permit.fencingToken).toBeGreaterThan(before.fencingToken);
    }
    expect(service.session?.id).not.toBe(session);
    await Promise.all(again.map((p) => p.release()));
  });
});
