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
  startZooKeeperServer,
  type TcpProxy,
  uniqueName,
  type ZooKeeperServer,
} from '@dlock/test-utils';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type ZooKeeperClientLike, ZooKeeperLockService } from '../src/index.js';
import { permitQueuePath, permitSlotsPath, semaphorePath } from '../src/keys.js';
import { childrenOf, connectedClient, statOf, waitFor } from './helpers.js';

// Issue 15's soak: N = 3 permits, 12 workers in 4 processes (the built package, fixtures/semaphore-soak-backend.mjs)
// for 20 s on a private ZooKeeper (tickTime 200, so 2 s sessions) reached through a TCP proxy, while a holding
// process is frozen past its session, the server is paused (1 s, then 3 s: every session expires) and every
// connection is reset each 1.5 s. The history of holds is judged by @dlock/test-utils' checker over open validity
// windows.
const FACTORY = fileURLToPath(new URL('./fixtures/semaphore-soak-backend.mjs', import.meta.url));
const ROOT = '/dlock-test/semaphore-soak';
const PERMITS = 3;
/** A permit's lease is its session. */
const SESSION_MS = 2_000;

let server: ZooKeeperServer;
let raw: ZooKeeperClientLike;
beforeAll(async () => {
  server = await startZooKeeperServer({ tickTimeMs: 200 });
  raw = await connectedClient(server.connectString, 10_000);
}, 60_000);
afterAll(async () => {
  raw?.close();
  await server?.stop();
});

describe('semaphore soak (ZooKeeper)', () => {
  it('never has more than N open windows, nor two on one slot, and every slot’s tokens rise', {
    timeout: 40_000,
  }, async () => {
    let proxy: TcpProxy | undefined;
    try {
      proxy = await startTcpProxy({ targetPort: server.clientPort });
      const reset = proxy.resetAll.bind(proxy);
      const name = uniqueName('soak');
      const slotsPath = permitSlotsPath(semaphorePath(ROOT, name), PERMITS);
      const result = await runSemaphoreSoak({
        factory: FACTORY,
        config: {
          connectionString: `127.0.0.1:${proxy.port}`,
          keyPrefix: ROOT,
          sessionTimeoutMs: SESSION_MS,
        },
        name,
        permits: PERMITS,
        ttlMs: SESSION_MS,
        processes: 4,
        workersPerProcess: 3,
        durationMs: 20_000,
        faults: {
          backend: { pause: () => server.process.pause(), resume: () => server.process.resume() },
          resetConnections: reset,
        },
        // A slot node's czxid is its holder's fencing token.
        audit: async () => {
          const slots = await childrenOf(raw, slotsPath);
          const stats = await Promise.all(slots.map((slot) => statOf(raw, `${slotsPath}/${slot}`)));
          return slots.flatMap((slot, i) => {
            const stat = stats[i];
            return stat
              ? [{ slot: Number(slot), token: BigInt(`0x${stat.czxid.toString('hex')}`).toString() }]
              : [];
          });
        },
      });
      console.log(`ZooKeeper semaphore soak\n${formatSoakResult(result)}`);
      expect(result.report.violations.map(describeViolation)).toEqual([]);
      expect(result.report.maxOpen).toBeLessThanOrEqual(PERMITS);
      // A grant nobody took is given back within the client's operation timeout (5 s by default) and a bit.
      expect(orphanPermits(result, 6_000)).toEqual([]);
      expect(result.auditPolls).toBeGreaterThan(50);
      expect(result.processes.map((p) => p.code)).toEqual([0, 0, 0, 0]);
      // Hand-offs take ~100 ms on this server and every freeze or pause idles the slots for a session: ~300 holds.
      expect(result.report.holds).toBeGreaterThan(100);
      expect(result.report.lost).toBeGreaterThan(0);
      expect(result.faults.filter((f) => f.kind === 'freeze-process')).toHaveLength(4);
      expect(result.faults.filter((f) => f.kind === 'pause-backend')).toHaveLength(2);
      const lastFault = Math.max(...result.faults.map((f) => f.to));
      expect(result.records.some((r) => r.start > lastFault)).toBe(true);
    } finally {
      server.process.resume();
      await proxy?.close();
    }
  });

  it('gives a killed process’s permits to a waiting process within TTL + 1 s', {
    timeout: 40_000,
  }, async () => {
    const { slots } = await measureKilledPermitsReturn({
      factory: FACTORY,
      config: { connectionString: server.connectString, keyPrefix: ROOT, sessionTimeoutMs: SESSION_MS },
      name: uniqueName('killed'),
      permits: PERMITS,
      ttlMs: SESSION_MS,
      maxMs: SESSION_MS + 3_000,
    });
    console.log(
      `ZooKeeper: permits of a SIGKILLed process back after ${slots.map((s) => s.ms?.toFixed(0)).join(', ')} ms`,
    );
    expect(slots.map((s) => s.slot)).toEqual([0, 1, 2]);
    for (const { ms } of slots) expect(ms).not.toBeNull();
    for (const { ms } of slots) expect(ms).toBeLessThanOrEqual(SESSION_MS + 1_000);
  });

  it('leaves nothing behind after 200 aborted and timed-out waiters', { timeout: 40_000 }, async () => {
    const service = new ZooKeeperLockService({
      connectionString: server.connectString,
      keyPrefix: ROOT,
      sessionTimeoutMs: SESSION_MS,
    });
    const client = new LockClient(service);
    try {
      const name = uniqueName('abandoned');
      const semaphore = semaphorePath(ROOT, name);
      const outcome = await abandonWaiters(client, { name, permits: PERMITS, ttlMs: SESSION_MS, count: 200 });
      expect(outcome).toMatchObject({ granted: 0, otherErrors: {} });
      expect(outcome.aborted + outcome.timedOut).toBe(200);
      const queue = () => childrenOf(raw, permitQueuePath(semaphore, PERMITS));
      const slots = () => childrenOf(raw, permitSlotsPath(semaphore, PERMITS));
      // Whatever a waiter's leave could not do at once is done in the background, within a moment.
      expect(await waitFor(async () => (await queue()).length === 0, 2_000)).toBe(true);
      expect((await slots()).sort()).toEqual(['0', '1', '2']);
      for (const holder of outcome.holders) await holder.release();
      expect(await waitFor(async () => (await slots()).length === 0, 2_000)).toBe(true);
      expect(await queue()).toEqual([]);
      expect(await client.semaphore(name, { permits: PERMITS, ttlMs: SESSION_MS }).available()).toBe(PERMITS);
      console.log(
        `ZooKeeper: 200 abandoned waiters (${outcome.aborted} aborted, ${outcome.timedOut} timed out); left under the semaphore: ${JSON.stringify(await childrenOf(raw, semaphore))}`,
      );
    } finally {
      await client.close();
      await service.close();
    }
  });
});
