import { createRequire } from 'node:module';
import { fileURLToPath } from 'node:url';
import { LockClient } from '@dlock/core';
import {
  abandonWaiters,
  describeViolation,
  type EtcdCluster,
  formatSoakResult,
  measureKilledPermitsReturn,
  orphanPermits,
  runSemaphoreSoak,
  startEtcdCluster,
  startTcpProxy,
  type TcpProxy,
  uniqueName,
} from '@dlock/test-utils';
import { Etcd3 } from 'etcd3';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { EtcdLockService } from '../src/index.js';
import { escapeName } from '../src/keys.js';
import { waitUntil } from './helpers.js';
import { queuedKeys, semaphoreKeys } from './semaphore-helpers.js';

// Issue 15's soak: N = 3 permits, 12 workers in 4 processes (the built package, fixtures/semaphore-soak-backend.mjs;
// two in session mode, two with a lease per permit) for 20 s on a private one-member etcd reached through a TCP
// proxy, while a holding process is frozen past its TTL, etcd is paused (1 s, then 3 s) and every connection is
// reset each 1.5 s. The history of holds is judged by @dlock/test-utils' checker over open validity windows. etcd
// leases are whole seconds, at least 2 s.
// etcd3's own cockatiel, for its no-op policy (not a dependency of this package).
const { noop } = createRequire(createRequire(import.meta.url).resolve('etcd3'))('cockatiel') as {
  noop: NonNullable<
    NonNullable<NonNullable<ConstructorParameters<typeof Etcd3>[0]>['faultHandling']>['global']
  >;
};
const FACTORY = fileURLToPath(new URL('./fixtures/semaphore-soak-backend.mjs', import.meta.url));
const PREFIX = 'soak/';
const PERMITS = 3;
const TTL_MS = 2_000;
const REQUEST_TIMEOUT_MS = 1_000;

let cluster: EtcdCluster;
let etcd: Etcd3;
beforeAll(async () => {
  cluster = await startEtcdCluster({ size: 1 });
  etcd = new Etcd3({ hosts: cluster.endpoints[0] as string });
}, 60_000);
afterAll(async () => {
  etcd?.close();
  await cluster?.stop();
});

const member = () => cluster.members[0] as EtcdCluster['members'][number];

describe('semaphore soak (etcd)', () => {
  it('never has more than N open windows, nor two on one slot, and every slot’s tokens rise', {
    timeout: 40_000,
  }, async () => {
    let proxy: TcpProxy | undefined;
    try {
      proxy = await startTcpProxy({ targetPort: member().clientPort });
      const endpoint = `http://127.0.0.1:${proxy.port}`;
      const reset = proxy.resetAll.bind(proxy);
      const name = uniqueName('soak');
      const result = await runSemaphoreSoak({
        factory: FACTORY,
        // Both lease modes, each with etcd3's default circuit breaker (shut 5 s after 3 failures in a row) and
        // without it: behind the breaker a process sits out most of the run, which tests little.
        config: (i) => ({
          endpoint,
          keyPrefix: PREFIX,
          session: i % 2 === 0,
          requestTimeoutMs: REQUEST_TIMEOUT_MS,
          breaker: i < 2,
        }),
        name,
        permits: PERMITS,
        ttlMs: TTL_MS,
        processes: 4,
        workersPerProcess: 3,
        durationMs: 20_000,
        faults: {
          backend: { pause: () => member().process.pause(), resume: () => member().process.resume() },
          resetConnections: reset,
        },
        // A slot key's create revision is its holder's fencing token.
        audit: async () => {
          const kvs = (
            await etcd
              .getAll()
              .prefix(`${PREFIX}%sem/${escapeName(name)}/`)
              .exec()
          ).kvs;
          return kvs.flatMap((kv) => {
            const slot = /\/s\/(\d+)$/.exec(kv.key.toString())?.[1];
            return slot === undefined ? [] : [{ slot: Number(slot), token: String(kv.create_revision) }];
          });
        },
      });
      console.log(`etcd semaphore soak\n${formatSoakResult(result)}`);
      expect(result.report.violations.map(describeViolation)).toEqual([]);
      expect(result.report.maxOpen).toBeLessThanOrEqual(PERMITS);
      // A grant nobody took is given back within the client's operation timeout (5 s by default) and a bit.
      expect(orphanPermits(result, 6_000)).toEqual([]);
      expect(result.auditPolls).toBeGreaterThan(50);
      expect(result.processes.map((p) => p.code)).toEqual([0, 0, 0, 0]);
      // Every worker of every process was granted a permit at least once: a client that hangs, or a queue that passes
      // a waiter over for the whole run, leaves one with none. No count of holds is asserted, since load only makes
      // them fewer (110-160 on an idle machine, 44 under load, 73 with 8 busy loops on 2 cores, each worker still
      // 2 or more); the last check below asks for a grant after the last fault.
      const workers = new Set(result.records.map((r) => `${r.process}/${r.worker}`));
      expect([...workers].sort()).toEqual(
        ['p0', 'p1', 'p2', 'p3'].flatMap((p) => [0, 1, 2].map((w) => `${p}/${w}`)),
      );
      expect(result.report.lost).toBeGreaterThan(0);
      expect(result.faults.filter((f) => f.kind === 'freeze-process')).toHaveLength(4);
      expect(result.faults.filter((f) => f.kind === 'pause-backend')).toHaveLength(2);
      const lastFault = Math.max(...result.faults.map((f) => f.to));
      expect(result.records.some((r) => r.start > lastFault)).toBe(true);
    } finally {
      member().process.resume();
      await proxy?.close();
    }
  });

  for (const session of [false, true]) {
    it(`gives a killed process’s permits to a waiting process within TTL + 1 s (${session ? 'session mode' : 'a lease per permit'})`, {
      timeout: 40_000,
    }, async () => {
      const { slots } = await measureKilledPermitsReturn({
        factory: FACTORY,
        config: {
          endpoint: member().endpoint,
          keyPrefix: PREFIX,
          session,
          requestTimeoutMs: REQUEST_TIMEOUT_MS,
        },
        name: uniqueName('killed'),
        permits: PERMITS,
        ttlMs: TTL_MS,
        maxMs: TTL_MS + 3_000,
      });
      console.log(
        `etcd (${session ? 'session' : 'per permit'}): permits of a SIGKILLed process back after ${slots.map((s) => s.ms?.toFixed(0)).join(', ')} ms`,
      );
      expect(slots.map((s) => s.slot)).toEqual([0, 1, 2]);
      for (const { ms } of slots) expect(ms).not.toBeNull();
      for (const { ms } of slots) expect(ms).toBeLessThanOrEqual(TTL_MS + 1_000);
    });
  }

  it('leaves nothing behind after 200 aborted and timed-out waiters', { timeout: 40_000 }, async () => {
    // A client of its own without etcd3's circuit breaker (as the soak's breaker: false processes): under load a few
    // unanswered tries would shut it for 5 s, failing the holders' acquires and releases and this test's reads.
    const serviceClient = new Etcd3({
      hosts: member().endpoint,
      faultHandling: { host: () => noop, global: noop },
    });
    const service = new EtcdLockService({
      client: serviceClient,
      keyPrefix: PREFIX,
      requestTimeoutMs: REQUEST_TIMEOUT_MS,
    });
    const client = new LockClient(service);
    try {
      const name = uniqueName('abandoned');
      const outcome = await abandonWaiters(client, { name, permits: PERMITS, ttlMs: TTL_MS, count: 200 });
      // The even half aborts within 100 ms of a 10 s budget, so each settles with its signal's reason whatever etcd
      // does. The odd half (5-150 ms budgets) times out, or, when its last try got no answer within
      // requestTimeoutMs, rejects with TransportError, as core documents: under heavy load 3 to 100 of 100 did, each
      // "etcd acquire did not answer within 1000 ms" (or etcd3's circuit breaker, open after such failures), with
      // the holders' renewals unanswered too. Nothing else may come out. A holder whose renewals went unanswered
      // for its TTL lost its permit (its signal says so), and a waiter may then have been granted it.
      const { TRANSPORT: transport = 0, ...unexpected } = outcome.otherErrors;
      expect(unexpected).toEqual({});
      const kept = outcome.holders.every((holder) => !holder.signal.aborted);
      if (kept) expect(outcome.granted).toBe(0);
      expect(outcome.aborted).toBeGreaterThanOrEqual(100 - outcome.granted);
      expect(outcome.timedOut + transport).toBeGreaterThanOrEqual(100 - outcome.granted);
      const held = async () =>
        Object.keys(await semaphoreKeys(etcd, PREFIX, name)).filter((k) => /\/s\/\d+$/.test(k));
      // Whatever a waiter's leave could not do at once is done in the background, within a moment.
      const queueEmpty = async () => (await queuedKeys(etcd, PREFIX, name)).length === 0;
      expect(await waitUntil(queueEmpty, 2_000)).toBe(true);
      // Holders still valid after the read were valid during it (a loss shows by the client's clock first).
      const slotKeys = await held();
      if (outcome.holders.every((holder) => !holder.signal.aborted)) expect(slotKeys).toHaveLength(PERMITS);
      // A release is told the holder's loss, or, unanswered, TransportError.
      for (const holder of outcome.holders) {
        await holder.release().catch((error: unknown) => {
          const code = (error as { code?: unknown }).code;
          if (!holder.signal.aborted && code !== 'TRANSPORT') throw error;
        });
      }
      // A key a release did not delete goes with its lease: within the TTL and the lessor's 500 ms.
      expect(await waitUntil(async () => (await held()).length === 0, TTL_MS + 1_000)).toBe(true);
      expect(await semaphoreKeys(etcd, PREFIX, name)).toEqual({});
      expect(await client.semaphore(name, { permits: PERMITS, ttlMs: TTL_MS }).available()).toBe(PERMITS);
      console.log(
        `etcd: 200 abandoned waiters (${outcome.aborted} aborted, ${outcome.timedOut} timed out, ${transport} unanswered, ${outcome.granted} granted; holders kept: ${kept}); no key left`,
      );
    } finally {
      await client.close();
      await service.close();
      serviceClient.close();
    }
  });
});
