import { FakeClock } from '@dlock/testing';
import { describe, expect, it } from 'vitest';
import { ZooKeeperLockService } from '../src/index.js';
import { MIN_SWEEP_INTERVAL_MS, SWEEP_PROBES } from '../src/parent-sweep.js';
import { FakeZooKeeper } from './fake-zookeeper.js';

// The sweep of parents other processes left behind, on a FakeClock and an in-memory client: which parents it
// deletes, when, and how many it looks at per pass. (The same against a real server and a killed process is in
// stale-parents.test.ts.)
const IDLE_MS = 2_000; // one pass every 2 to 3 s
const PASS_MAX_MS = 1.5 * Math.max(IDLE_MS, MIN_SWEEP_INTERVAL_MS);

/** What another process does to the tree, straight on the fake client. */
function create(zk: FakeZooKeeper, path: string, data = '', mode = 0): Promise<void> {
  return new Promise((resolve, reject) =>
    zk.create(path, Buffer.from(data), mode, (error) => (error ? reject(error) : resolve())),
  );
}

function remove(zk: FakeZooKeeper, path: string): Promise<void> {
  return new Promise((resolve, reject) =>
    zk.remove(path, -1, (error) => (error ? reject(error) : resolve())),
  );
}

async function setup() {
  const clock = new FakeClock();
  const zk = new FakeZooKeeper(10_000);
  const service = new ZooKeeperLockService({ client: zk, clock, root: '/locks', idleParentMs: IDLE_MS });
  const signal = new AbortController().signal;
  // Its session opens with its first acquire, and the sweep with it.
  const result = await service.acquire({ name: 'mine', ownerId: 'me', ttlMs: 1_000, waitMs: 0, signal });
  if (!result.acquired) throw new Error('not acquired');
  const passes = (): number => zk.calls.filter((c) => c === 'getChildren /locks').length;
  return { clock, zk, service, passes };
}

describe('the sweep of abandoned lock parents', () => {
  it('deletes an empty parent seen twice, idle in between; leaves parents with children or data, and other names', async () => {
    const { clock, zk, service, passes } = await setup();
    await create(zk, '/locks/dead');
    await create(zk, '/locks/dead/_c_0-', '', 3);
    await remove(zk, zk.children('/locks/dead')[0] as string); // its owner's session expired
    await create(zk, '/locks/busy');
    await create(zk, '/locks/busy/_c_1-', '', 3);
    await create(zk, '/locks/config', 'not a lock');
    await create(zk, '/locks/%zz'); // no lock name encodes to this

    await clock.advance(PASS_MAX_MS);
    expect(passes()).toBe(1);
    expect(zk.has('/locks/dead')).toBe(true); // seen empty once
    await clock.advance(PASS_MAX_MS);
    expect(passes()).toBe(2);
    expect(zk.has('/locks/dead')).toBe(false);

    await clock.advance(10 * PASS_MAX_MS);
    for (const kept of ['/locks/busy', '/locks/config', '/locks/%zz']) expect(zk.has(kept)).toBe(true);
    // Its own lock's parent is its own business (held, then reaped unrenewed, then deleted once idle): never probed.
    expect(zk.calls.filter((c) => c === 'exists /locks/mine')).toEqual([]);
    await service.close();
  });

  it('leaves a parent alone while children come and go, and deletes it once they stop', async () => {
    const { clock, zk, service } = await setup();
    await create(zk, '/locks/churn');
    for (let i = 0; i < 8; i++) {
      await create(zk, '/locks/churn/_c_2-', '', 3);
      await remove(zk, zk.children('/locks/churn')[0] as string);
      await clock.advance(1_000);
      expect(zk.has('/locks/churn')).toBe(true);
    }
    await clock.advance(2 * PASS_MAX_MS);
    expect(zk.has('/locks/churn')).toBe(false);
    await service.close();
  });

  it(`looks at no more than ${SWEEP_PROBES} parents per pass, and gets to all of them`, async () => {
    const { clock, zk, service, passes } = await setup();
    const names = Array.from({ length: SWEEP_PROBES + 50 }, (_, i) => `p${String(i).padStart(3, '0')}`);
    for (const name of names) await create(zk, `/locks/${name}`);
    let seen = zk.calls.length;
    for (let pass = 1; pass <= 4; pass++) {
      await clock.advance(PASS_MAX_MS);
      expect(passes()).toBe(pass);
      const probes = zk.calls.slice(seen).filter((c) => c.startsWith('exists /locks/p'));
      expect(probes.length).toBeLessThanOrEqual(SWEEP_PROBES);
      seen = zk.calls.length;
    }
    expect(names.filter((name) => zk.has(`/locks/${name}`))).toEqual([]);
    await service.close();
  });

  it('never runs for a service without a session, and stops with close()', async () => {
    const clock = new FakeClock();
    const zk = new FakeZooKeeper(10_000);
    const idle = new ZooKeeperLockService({ client: zk, clock, root: '/locks', idleParentMs: IDLE_MS });
    await clock.advance(10 * PASS_MAX_MS);
    expect(zk.calls).toEqual([]);
    await idle.close();

    const { clock: clock2, zk: zk2, service, passes } = await setup();
    await clock2.advance(PASS_MAX_MS);
    expect(passes()).toBe(1);
    await service.close();
    await clock2.advance(10 * PASS_MAX_MS);
    expect(passes()).toBe(1);
    expect(clock2.pendingTimers).toBe(0);
    expect(zk2.calls.at(-1)).not.toBe('getChildren /locks');
  });
});
