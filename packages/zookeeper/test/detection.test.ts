import { LockClient } from '@dlock/core';
import { FakeClock } from '@dlock/testing';
import { describe, expect, it } from 'vitest';
import { ZooKeeperLockService } from '../src/index.js';
import { FakeZooKeeper } from './fake-zookeeper.js';

// The timing of session-loss detection, on a FakeClock and an in-memory stand-in for the client: no real sleeps.
// (The same behaviour against real servers, paused and blackholed, is in session.test.ts.)
const TIMEOUT = 3_000;
const TICK = 100; // the service ticks every timeout / 20, at most 100 ms

async function setup() {
  const clock = new FakeClock();
  const zk = new FakeZooKeeper(TIMEOUT);
  const service = new ZooKeeperLockService({ client: zk, clock, root: '/locks', idleParentMs: 60_000 });
  const reports: (readonly string[])[] = [];
  service.watchLeases((tokens) => reports.push(tokens));
  const signal = new AbortController().signal;
  const tokens: string[] = [];
  for (const name of ['a', 'b', 'c']) {
    const result = await service.acquire({ name, ownerId: 'me', ttlMs: 1_000, waitMs: 0, signal });
    if (!result.acquired) throw new Error('not acquired');
    tokens.push(result.grant.ownershipToken);
  }
  return { clock, zk, service, reports, tokens, signal };
}

describe('session-loss detection (fake clock)', () => {
  it('a silent server: heartbeat at a third, connection dropped at two thirds, session ended just before the timeout', async () => {
    const { clock, zk, service, reports, tokens } = await setup();
    zk.silent = true;
    const heartbeats = (): number => zk.calls.filter((c) => c === 'exists /locks').length;

    await clock.advance(TIMEOUT / 3 - TICK);
    expect(heartbeats()).toBe(0);
    await clock.advance(2 * TICK);
    expect(heartbeats()).toBe(1);

    await clock.advance(TIMEOUT / 3 - 2 * TICK);
    expect(zk.drops).toBe(0);
    await clock.advance(2 * TICK);
    expect(zk.drops).toBe(1);

    await clock.advance(TIMEOUT / 3 - 3 * TICK);
    expect(reports).toEqual([]);
    expect(service.session).toBeDefined();
    await clock.advance(2 * TICK);
    expect(reports).toHaveLength(1);
    expect([...(reports[0] ?? [])].sort()).toEqual([...tokens].sort());
    expect(service.session).toBeUndefined();

    await clock.advance(10 * TIMEOUT);
    expect(reports).toHaveLength(1);
    // The client still says it is connected under that session, so close() tries to delete its nodes: bounded too.
    const closing = service.close();
    await clock.advance(TIMEOUT / 3 + 2 * TICK);
    await closing;
  });

  it('a server that answers: renewals through LockClient keep every grant, with no report, for many timeouts', async () => {
    const clock = new FakeClock();
    const zk = new FakeZooKeeper(TIMEOUT);
    const service = new ZooKeeperLockService({ client: zk, clock, root: '/locks' });
    const reports: (readonly string[])[] = [];
    service.watchLeases((tokens) => reports.push(tokens));
    const locks = new LockClient(service, { clock });
    const handles = await Promise.all(['a', 'b', 'c'].map((name) => locks.acquire(name, { ttlMs: 1_000 })));
    expect(handles.map((h) => h.ttlMs)).toEqual([TIMEOUT, TIMEOUT, TIMEOUT]);
    await clock.advance(10 * TIMEOUT);
    expect(reports).toEqual([]);
    expect(handles.every((h) => h.isHeld())).toBe(true);
    // Renewed in batches: one multi of checks for the three, about three times per session timeout.
    const multis = zk.calls.filter((c) => c === 'multi 3').length;
    expect(multis).toBeGreaterThanOrEqual(25);
    expect(multis).toBeLessThanOrEqual(40);
    expect(zk.drops).toBe(0);
    await locks.close();
    await service.close();
  });

  it('a grant nobody renews is deleted after one session timeout, and reported', async () => {
    const { clock, zk, service, reports, tokens } = await setup();
    await clock.advance(TIMEOUT - TICK);
    expect(zk.children('/locks/a')).toHaveLength(1);
    await clock.advance(2 * TICK);
    expect(zk.children('/locks/a')).toEqual([]);
    expect(reports.flat().sort()).toEqual([...tokens].sort());
    expect(service.session).toBeDefined();
    await service.close();
  });

  it('a request the server never answers fails at its deadline instead of hanging', async () => {
    const { clock, zk, service, tokens } = await setup();
    zk.silent = true;
    const renewal = service.renew({
      lease: { name: 'a', ownerId: 'me', ownershipToken: tokens[0] as string, fencingToken: 1n },
      ttlMs: TIMEOUT,
    });
    const settled = renewal.then(
      () => 'resolved',
      (error: unknown) => (error as { code?: string }).code,
    );
    await clock.advance(TIMEOUT / 3 + 2 * TICK); // the default bound is a third of the session timeout
    expect(await settled).toBe('TRANSPORT');
    // close() is bounded too: it tries to delete the held nodes, and gives up at the same deadline.
    let closed = false;
    const closing = service.close().then(() => {
      closed = true;
    });
    await clock.advance(TIMEOUT / 3 + 2 * TICK);
    await closing;
    expect(closed).toBe(true);
  });
});
