import { fileURLToPath } from 'node:url';
import { LockClient } from '@dlock/core';
import {
  abandonWaiters,
  describeViolation,
  formatSoakResult,
  measureKilledPermitsReturn,
  orphanPermits,
  runSemaphoreSoak,
  startTcpProxy,
  type TcpProxy,
  uniqueName,
} from '@dlock/test-utils';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { RedisLockService, semaphoreKeys, semaphoreSlotKey } from '../src/index.js';
import { connect, disconnect, eventually, type Redis, SideRedis } from './helpers.js';

// Issue 15's soak: N = 3 permits, 12 workers in 4 processes (the built package, fixtures/semaphore-soak-backend.mjs)
// for 20 s on a private redis-server reached through a TCP proxy, while a holding process is frozen past its TTL,
// Redis is paused (shortly, then past the TTL) and every connection is reset each 1.5 s. The history of holds is
// judged by @dlock/test-utils' checker over open validity windows.
const FACTORY = fileURLToPath(new URL('./fixtures/semaphore-soak-backend.mjs', import.meta.url));
const PERMITS = 3;
const TTL_MS = 1_000;
const REQUEST_TIMEOUT_MS = 300;

let side: SideRedis;
let admin: Redis;
beforeAll(async () => {
  side = await SideRedis.start();
  admin = await connect(side.url);
});
afterAll(async () => {
  await disconnect(admin);
  await side.stop();
});

describe('semaphore soak (Redis, single node)', () => {
  it('never has more than N open windows, nor two on one slot, and every slot’s tokens rise', {
    timeout: 40_000,
  }, async () => {
    let proxy: TcpProxy | undefined;
    try {
      proxy = await startTcpProxy({ targetPort: side.port });
      const reset = proxy.resetAll.bind(proxy);
      const name = uniqueName('soak');
      const result = await runSemaphoreSoak({
        factory: FACTORY,
        config: {
          url: `redis://127.0.0.1:${proxy.port}`,
          keyPrefix: 'soak:',
          requestTimeoutMs: REQUEST_TIMEOUT_MS,
        },
        name,
        permits: PERMITS,
        ttlMs: TTL_MS,
        processes: 4,
        workersPerProcess: 3,
        durationMs: 20_000,
        faults: {
          backend: { pause: () => side.pause(), resume: () => side.resume() },
          resetConnections: reset,
        },
        // A slot key's value starts "<who> <fencing token> ".
        audit: async () => {
          const slots = Array.from({ length: PERMITS }, (_, slot) => slot);
          const values = await Promise.all(
            slots.map((slot) => admin.get(semaphoreSlotKey('soak:', name, slot))),
          );
          return slots.flatMap((slot) => {
            const token = values[slot]?.split(' ')[1];
            return token === undefined ? [] : [{ slot, token }];
          });
        },
      });
      console.log(`Redis semaphore soak\n${formatSoakResult(result)}`);
      expect(result.report.violations.map(describeViolation)).toEqual([]);
      expect(result.report.maxOpen).toBeLessThanOrEqual(PERMITS);
      // A grant whose caller gave up is given back within the operation timeout (300 ms here); a slot handed to a
      // waiter frozen meanwhile runs out by its TTL (seen up to ~970 ms). Nothing lives on unclaimed past that.
      expect(orphanPermits(result, TTL_MS + 1_000)).toEqual([]);
      expect(result.auditPolls).toBeGreaterThan(50);
      expect(result.processes.map((p) => p.code)).toEqual([0, 0, 0, 0]);
      expect(result.report.holds).toBeGreaterThan(300);
      // The faults took permits away, and grants went on after the last of them.
      expect(result.report.lost).toBeGreaterThan(0);
      expect(result.faults.filter((f) => f.kind === 'freeze-process')).toHaveLength(4);
      expect(result.faults.filter((f) => f.kind === 'pause-backend')).toHaveLength(2);
      const lastFault = Math.max(...result.faults.map((f) => f.to));
      expect(result.records.some((r) => r.start > lastFault)).toBe(true);
    } finally {
      side.resume();
      await proxy?.close();
    }
  });

  it('gives a killed process’s permits to a waiting process within TTL + 1 s', {
    timeout: 40_000,
  }, async () => {
    const { slots } = await measureKilledPermitsReturn({
      factory: FACTORY,
      config: { url: side.url, keyPrefix: 'soak:', requestTimeoutMs: REQUEST_TIMEOUT_MS },
      name: uniqueName('killed'),
      permits: PERMITS,
      ttlMs: TTL_MS,
      maxMs: TTL_MS + 3_000,
    });
    console.log(
      `Redis: permits of a SIGKILLed process back after ${slots.map((s) => s.ms?.toFixed(0)).join(', ')} ms`,
    );
    expect(slots.map((s) => s.slot)).toEqual([0, 1, 2]);
    for (const { ms } of slots) expect(ms).not.toBeNull();
    for (const { ms } of slots) expect(ms).toBeLessThanOrEqual(TTL_MS + 1_000);
  });

  it('leaves nothing behind after 200 aborted and timed-out waiters', { timeout: 40_000 }, async () => {
    const redis = await connect(side.url);
    const service = new RedisLockService({ client: redis, keyPrefix: 'soak:', requestTimeoutMs: 1_000 });
    const client = new LockClient(service);
    try {
      const name = uniqueName('abandoned');
      const keys = semaphoreKeys('soak:', name);
      const outcome = await abandonWaiters(client, { name, permits: PERMITS, ttlMs: 5_000, count: 200 });
      expect(outcome).toMatchObject({ granted: 0, otherErrors: {} });
      expect(outcome.aborted + outcome.timedOut).toBe(200);
      // Whatever a waiter's leave could not do at once is done in the background, within a moment.
      const queueEmpty = async () =>
        (await admin.lLen(keys.queue)) === 0 && (await admin.hLen(keys.waiters)) === 0;
      expect(await eventually(queueEmpty, 2_000)).toBe(true);
      const liveSlots = async () => {
        const slots = Array.from({ length: PERMITS + 1 }, (_, i) => semaphoreSlotKey('soak:', name, i));
        return (await Promise.all(slots.map((k) => admin.exists(k)))).reduce((a, b) => a + b, 0);
      };
      expect(await liveSlots()).toBe(PERMITS);
      for (const holder of outcome.holders) await holder.release();
      expect(await eventually(async () => (await liveSlots()) === 0, 2_000)).toBe(true);
      expect(await queueEmpty()).toBe(true);
      expect(await client.semaphore(name, { permits: PERMITS, ttlMs: 5_000 }).available()).toBe(PERMITS);
      // What stays: the token source and the slot index, each expiring on its own.
      const left = await admin.keys(`${keys.queue.slice(0, -'queue'.length)}*`);
      const ttls = await Promise.all(left.map(async (k) => `${k} (pttl ${await admin.pTTL(k)})`));
      console.log(
        `Redis: 200 abandoned waiters (${outcome.aborted} aborted, ${outcome.timedOut} timed out); left: ${ttls.join(', ')}`,
      );
      for (const key of left) expect([keys.fence, keys.slots]).toContain(key);
    } finally {
      await client.close();
      await service.close();
      await disconnect(redis);
    }
  });
});
