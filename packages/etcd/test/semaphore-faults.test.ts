import { type ChildProcess, fork } from 'node:child_process';
import { performance } from 'node:perf_hooks';
import { fileURLToPath } from 'node:url';
import { LockClient, TransportError } from '@dlock/core';
import { EtcdLockService } from '@dlock/etcd';
import { ETCD_ENDPOINT, rejection, startTcpProxy } from '@dlock/test-utils';
import { Etcd3 } from 'etcd3';
import { afterAll, afterEach, describe, expect, it } from 'vitest';
import type { EtcdClientLike } from '../src/client-like.js';
import { lockName, sleep, TEST_PREFIX, waitUntil } from './helpers.js';
import { semaphoreKeys } from './semaphore-helpers.js';

// Processes frozen and killed while holding permits, and an acquire whose answer is lost. etcd leases are whole
// seconds, at least 2 s; its lessor looks for expired leases every 500 ms.

const TTL_MS = 2_000;
const etcd = new Etcd3({ hosts: ETCD_ENDPOINT });
afterAll(() => etcd.close());

const teardown: (() => Promise<unknown> | unknown)[] = [];
afterEach(async () => {
  for (const fn of teardown.splice(0).reverse()) {
    await Promise.resolve()
      .then(fn)
      .catch(() => {});
  }
});

interface HeldPermit {
  readonly slot: number;
  readonly token: string;
  readonly validUntilNs: string;
}
interface Message {
  readonly type: 'acquired' | 'released' | 'error';
  readonly permits?: readonly HeldPermit[];
  readonly outcomes?: readonly { settled: string; code?: string; reason?: string }[];
  readonly message?: string;
}

/** A child process holding `count` permits of `name`. */
function holderProcess(name: string, session: boolean, permits: number, count: number) {
  const child: ChildProcess = fork(
    fileURLToPath(new URL('./fixtures/permit-holder.mjs', import.meta.url)),
    [
      ETCD_ENDPOINT,
      TEST_PREFIX,
      name,
      session ? 'session' : 'per-lock',
      String(TTL_MS),
      String(permits),
      String(count),
    ],
    { execArgv: [], stdio: ['ignore', 'inherit', 'inherit', 'ipc'] },
  );
  const messages: Message[] = [];
  child.on('message', (m: Message) => messages.push(m));
  const exited = new Promise((resolve) => child.once('exit', resolve));
  teardown.push(async () => {
    if (child.exitCode !== null || child.signalCode !== null) return;
    child.kill('SIGCONT');
    child.send('exit', () => {});
    await Promise.race([exited, sleep(3_000)]);
    if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
  });
  const next = (type: Message['type'], ms: number): Promise<Message> =>
    new Promise((resolve, reject) => {
      const found = messages.find((m) => m.type === type || m.type === 'error');
      if (found) return found.type === 'error' ? reject(new Error(found.message)) : resolve(found);
      const timer = setTimeout(() => reject(new Error(`no "${type}" from the holder within ${ms} ms`)), ms);
      child.on('message', (m: Message) => {
        if (m.type !== type && m.type !== 'error') return;
        clearTimeout(timer);
        if (m.type === 'error') reject(new Error(m.message));
        else resolve(m);
      });
    });
  return { child, next };
}

/** `broken`: the service's connection ends broken, so its close (a bounded revoke through it) is not waited for. */
function localClient(
  session: boolean,
  client: EtcdClientLike = etcd,
  operationTimeoutMs?: number,
  broken = false,
) {
  const service = new EtcdLockService({ client, prefix: TEST_PREFIX, session });
  const locks = new LockClient(service, operationTimeoutMs === undefined ? {} : { operationTimeoutMs });
  const close = async (): Promise<void> => {
    await locks.close();
    await service.close();
  };
  teardown.push(() => (broken ? void close().catch(() => {}) : close()));
  return locks;
}

for (const session of [false, true]) {
  const mode = session ? 'session mode' : 'a lease per lock';
  describe(`semaphore faults (${mode})`, () => {
    it('a holder frozen past its TTL: a waiter gets its slot with a higher token, its late release is Lost', {
      timeout: 20_000,
    }, async () => {
      const name = lockName('sem-frozen');
      const holder = holderProcess(name, session, 1, 1);
      const acquired = await holder.next('acquired', 10_000);
      const frozen = acquired.permits?.[0];
      holder.child.kill('SIGSTOP');
      const pool = localClient(session).semaphore(name, { permits: 1, ttlMs: TTL_MS });
      // Queued behind the frozen holder: served once etcd expires its lease.
      const permit = await pool.acquire({ waitMs: 10_000 });
      const servedAtNs = process.hrtime.bigint();
      expect(permit.slot).toBe(frozen?.slot);
      expect(permit.fencingToken).toBeGreaterThan(BigInt(frozen?.token ?? '0'));
      // No overlap: the frozen holder's validity window closed before the waiter was served.
      expect(servedAtNs).toBeGreaterThan(BigInt(frozen?.validUntilNs ?? '0'));
      holder.child.kill('SIGCONT');
      holder.child.send('release');
      const released = await holder.next('released', 5_000);
      expect(released.outcomes?.[0]).toMatchObject({ settled: 'rejected', code: 'LOCK_LOST' });
      expect(permit.isHeld()).toBe(true);
      await permit.release();
    });

    it("a killed process's permits come back within the TTL + 1.5 s", { timeout: 20_000 }, async () => {
      const name = lockName('sem-killed');
      const holder = holderProcess(name, session, 2, 2);
      await holder.next('acquired', 10_000);
      holder.child.kill('SIGKILL');
      const killedAt = performance.now();
      const pool = localClient(session).semaphore(name, { permits: 2, ttlMs: TTL_MS });
      const permits = await Promise.all([pool.acquire({ waitMs: 10_000 }), pool.acquire({ waitMs: 10_000 })]);
      const tookMs = performance.now() - killedAt;
      expect(tookMs).toBeLessThan(TTL_MS + 1_500);
      expect(permits.map((p) => p.slot).sort()).toEqual([0, 1]);
      await Promise.all(permits.map((p) => p.release()));
    });

    it('an acquire whose reply is lost leaves no permit behind beyond operationTimeoutMs + 1 s', {
      timeout: 20_000,
    }, async () => {
      const OPERATION_TIMEOUT_MS = 1_000;
      // A proxy of its own: grpc-js shares connections between clients of one address, and this one ends broken.
      const proxy = await startTcpProxy({ targetPort: Number(new URL(ETCD_ENDPOINT).port) });
      teardown.push(() => proxy.close());
      const proxied = new Etcd3({ hosts: `http://127.0.0.1:${proxy.port}` });
      teardown.push(() => proxied.close());
      let armed = false;
      const faulty: EtcdClientLike = {
        kv: {
          txn: (request, options) => {
            // From the moment an enqueue (a nested transaction with the puts) is sent, every reply is swallowed.
            if (armed && request.success?.some((op) => op.request_txn)) proxy.dropReplies(true);
            return proxied.kv.txn(request, options);
          },
        },
        leaseClient: proxied.leaseClient,
        watchClient: proxied.watchClient,
      };
      const name = lockName('sem-lost-reply');
      const stray = localClient(session, faulty, OPERATION_TIMEOUT_MS, true).semaphore(name, {
        permits: 1,
        ttlMs: 10_000,
      });
      const contender = localClient(session).semaphore(name, { permits: 1, ttlMs: TTL_MS });
      // Warm up: the connection, and in session mode the session lease, exist before replies are dropped.
      await (await stray.acquire()).release();
      armed = true;
      const startedAt = performance.now();
      const lost = rejection(stray.acquire());
      // The write landed: etcd holds the slot (the reply that would say so is lost).
      expect(
        await waitUntil(
          async () => Object.keys(await semaphoreKeys(etcd, TEST_PREFIX, name)).length === 1,
          2_000,
        ),
      ).toBe(true);
      const next = contender.acquire({ waitMs: 15_000 });
      expect(await lost).toBeInstanceOf(TransportError);
      const permit = await next;
      expect(performance.now() - startedAt).toBeLessThan(OPERATION_TIMEOUT_MS + 1_000 + 750);
      expect(permit.isHeld()).toBe(true);
      await permit.release();
    });
  });
}
