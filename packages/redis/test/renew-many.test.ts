import { type Lease, LockClient, type LockHandle } from '@dlock/core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { RedisLockService } from '../src/index.js';
import { commandCalls, connect, disconnect, type Redis, SideRedis, sleep } from './helpers.js';

// Holding many locks must not cost a round trip per lock: counted on a private server, where every command is ours.
let side: SideRedis;
let admin: Redis;
let client: Redis;
let service: RedisLockService;

beforeAll(async () => {
  side = await SideRedis.start();
  admin = await connect(side.url);
  client = await connect(side.url);
  service = new RedisLockService({ client });
});
afterAll(async () => {
  await service.close();
  await disconnect(client);
  await disconnect(admin);
  await side.stop();
});

const signal = new AbortController().signal;

describe('renewing many leases', () => {
  it('renews 1,000 leases with one script call, and reports each one in order', async () => {
    const leases: Lease[] = [];
    for (let i = 0; i < 1_000; i++) {
      const name = `many-${i}`;
      const result = await service.acquire({ name, ownerId: 'bulk', ttlMs: 5_000, waitMs: 0, signal });
      if (!result.acquired) throw new Error(`could not take ${name}`);
      leases.push({ name, ownerId: 'bulk', ...result.grant });
    }
    // Every 100th lease is forged: those must come back refused, the others renewed.
    const requests = leases.map((lease, i) => ({
      lease: i % 100 === 7 ? { ...lease, ownershipToken: `${lease.ownershipToken}-forged` } : lease,
      ttlMs: 20_000,
    }));
    await admin.sendCommand(['CONFIG', 'RESETSTAT']);
    const results = await service.renewMany(requests);
    const calls = await commandCalls(admin);
    expect(calls['evalsha'] ?? 0).toBe(1);
    // Each renewed grant is written again with its new expiry, which its value states (one TIME for the batch).
    expect(calls['set']).toBe(990);
    expect(calls['time']).toBe(1);
    expect(results.map((r) => r.renewed)).toEqual(requests.map((_, i) => i % 100 !== 7));
    const pttl = Number(await admin.pTTL(`dlock:{many-0}:lock`));
    expect(pttl).toBeGreaterThan(5_000);
    // 2,500 leases: three script calls, sent together.
    const more = [...requests, ...requests, ...requests.slice(0, 500)];
    await admin.sendCommand(['CONFIG', 'RESETSTAT']);
    expect(await service.renewMany(more)).toHaveLength(2_500);
    expect((await commandCalls(admin))['evalsha']).toBe(3);
  });

  it('keeps 1,000 locks of a LockClient alive with a handful of calls per renewal interval', async () => {
    const locks = new LockClient(service);
    try {
      const handles: LockHandle[] = [];
      for (let i = 0; i < 1_000; i++) handles.push(await locks.acquire(`held-${i}`, { ttlMs: 1_500 }));
      await admin.sendCommand(['CONFIG', 'RESETSTAT']);
      await sleep(3_000); // two TTLs: every lease renewed several times
      const calls = await commandCalls(admin);
      for (const handle of handles) expect(handle.isHeld()).toBe(true);
      // ~6 renewal rounds of 1,000 leases; one call per round (a few more if rounds split), not 6,000.
      expect(calls['set'] ?? 0).toBeGreaterThanOrEqual(3_000);
      expect(calls['evalsha'] ?? 0).toBeLessThanOrEqual(30);
    } finally {
      await locks.close();
    }
  });
});
