import { randomBytes } from 'node:crypto';
import { type Leader, LockClient, LockReleasedError, type LockService } from '@dlock/core';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { ContractSubject } from './lock-service-contract.js';

/** Tunes {@link electionContract} to what a service offers. */
export interface ElectionContractOptions {
  /** The election's lease in ms. Default 2,000 (etcd's leases are whole seconds, at least 2). */
  readonly ttlMs?: number;
  /** The service queues waiters (candidates are then served in campaign order). Default false. */
  readonly fifo?: boolean;
  /** Per-test timeout for vitest, ms. Default 30_000. */
  readonly testTimeoutMs?: number;
}

const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

/**
 * The behaviour every service that supports elections (`inspect`, `updateMetadata`, metadata stored with a grant)
 * must give to core's `Election`, as a vitest suite run against the real server. Each test makes its own clients.
 */
export function electionContract(
  label: string,
  makeSubject: () => Promise<ContractSubject> | ContractSubject,
  options: ElectionContractOptions = {},
): void {
  const ttlMs = options.ttlMs ?? 2_000;
  const timeout = options.testTimeoutMs ?? 30_000;

  describe(`Election contract: ${label}`, () => {
    let subject: ContractSubject;
    let service: LockService;
    let name: string;
    const clients: LockClient[] = [];
    const client = (): LockClient => {
      const made = new LockClient(service, { operationTimeoutMs: 5_000 });
      clients.push(made);
      return made;
    };

    beforeEach(async () => {
      subject = await makeSubject();
      service = subject.service;
      name = `election-${randomBytes(6).toString('hex')}`;
    });

    afterEach(async () => {
      await Promise.all(clients.splice(0).map((c) => c.close()));
      await subject.close?.();
    });

    it('stores the metadata with the grant and reports it; inspect of a free lock says so', {
      timeout,
    }, async () => {
      expect(typeof service.inspect).toBe('function');
      expect(typeof service.updateMetadata).toBe('function');
      expect((await service.inspect?.(name))?.held).toBe(false);
      const handle = await client().acquire(name, { ttlMs, metadata: 'host-a:4100 ✓' });
      const info = await service.inspect?.(name);
      expect(info?.held).toBe(true);
      expect(info?.fencingToken).toBe(handle.fencingToken);
      expect(info?.metadata).toBe('host-a:4100 ✓');
      await handle.release();
      expect((await service.inspect?.(name))?.held).toBe(false);
    });

    it('updateMetadata is owner-checked and keeps the fencing token', { timeout }, async () => {
      const signal = new AbortController().signal;
      const result = await service.acquire({ name, ownerId: 'o', ttlMs, waitMs: 0, signal, metadata: 'v1' });
      if (!result.acquired) throw new Error('not acquired');
      const lease = {
        name,
        ownerId: 'o',
        ownershipToken: result.grant.ownershipToken,
        fencingToken: result.grant.fencingToken,
      };
      expect(await service.updateMetadata?.(lease, 'v2')).toBe(true);
      expect(await service.inspect?.(name)).toMatchObject({
        held: true,
        metadata: 'v2',
        fencingToken: lease.fencingToken,
      });
      const forged = { ...lease, ownershipToken: `${lease.ownershipToken}x` };
      expect(await service.updateMetadata?.(forged, 'v3')).toBe(false);
      expect((await service.inspect?.(name))?.metadata).toBe('v2');
      expect(await service.release(lease)).toBe(true);
      expect(await service.updateMetadata?.(lease, 'v4')).toBe(false);
    });

    it('one leader; proclaim keeps the epoch; resign hands over to the waiting candidate with a higher epoch', {
      timeout,
    }, async () => {
      const a = client().election(name, { ttlMs });
      const b = client().election(name, { ttlMs });
      const first = await a.campaign({ value: 'host-a' });
      expect(await b.leader()).toEqual({ value: 'host-a', epoch: first.epoch });
      const waiting = b.campaign({ value: 'host-b', waitMs: 10_000 });
      await sleep(200);
      await first.proclaim('host-a:2');
      expect(await b.leader()).toEqual({ value: 'host-a:2', epoch: first.epoch });
      const resignedAt = performance.now();
      await first.resign();
      const second = await waiting;
      // Handed over by the resign, not by the lease running out.
      expect(performance.now() - resignedAt).toBeLessThan(ttlMs);
      expect(second.epoch).toBeGreaterThan(first.epoch);
      expect(await a.leader()).toEqual({ value: 'host-b', epoch: second.epoch });
      await expect(first.proclaim('late')).rejects.toBeInstanceOf(LockReleasedError);
      await second.resign();
      expect(await a.leader()).toBeNull();
    });

    it(`candidates take over ${options.fifo ? 'in campaign order' : 'one at a time'}, epochs rising`, {
      timeout,
    }, async () => {
      const leader = await client().election(name, { ttlMs }).campaign({ value: 'c0' });
      const order: string[] = [];
      const epochs: bigint[] = [leader.epoch];
      const candidates = ['c1', 'c2', 'c3'].map(async (value, i) => {
        await sleep(100 * i); // campaign in this order
        const leadership = await client().election(name, { ttlMs }).campaign({ value, waitMs: 20_000 });
        order.push(value);
        epochs.push(leadership.epoch);
        await sleep(50);
        await leadership.resign();
      });
      await sleep(400);
      await leader.resign();
      await Promise.all(candidates);
      if (options.fifo) expect(order).toEqual(['c1', 'c2', 'c3']);
      else expect([...order].sort()).toEqual(['c1', 'c2', 'c3']);
      for (let i = 1; i < epochs.length; i++)
        expect(epochs[i] as bigint).toBeGreaterThan(epochs[i - 1] as bigint);
    });

    it('observe from another client sees every leader in order, never an older epoch', {
      timeout,
    }, async () => {
      const stop = new AbortController();
      const seen: (Leader | null)[] = [];
      const observing = (async () => {
        for await (const leader of client().election(name, { ttlMs }).observe({ signal: stop.signal })) {
          seen.push(leader);
        }
      })();
      await sleep(300);
      const first = await client().election(name, { ttlMs }).campaign({ value: 'one' });
      await sleep(300);
      await first.proclaim('one+');
      await sleep(300);
      await first.resign();
      const second = await client().election(name, { ttlMs }).campaign({ value: 'two' });
      await sleep(300);
      stop.abort();
      await observing;
      expect(seen[0]).toBeNull();
      expect(seen).toContainEqual({ value: 'one', epoch: first.epoch });
      expect(seen).toContainEqual({ value: 'one+', epoch: first.epoch });
      expect(seen.at(-1)).toEqual({ value: 'two', epoch: second.epoch });
      const epochs = seen.filter((l): l is Leader => l !== null).map((l) => l.epoch);
      for (let i = 1; i < epochs.length; i++)
        expect(epochs[i] as bigint).toBeGreaterThanOrEqual(epochs[i - 1] as bigint);
      await second.resign();
    });
  });
}
