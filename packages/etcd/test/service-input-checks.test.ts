import { EtcdLockService } from '@dlock/etcd';
import { ETCD_ENDPOINT } from '@dlock/test-utils';
import { Etcd3 } from 'etcd3';
import { afterAll, describe, expect, it } from 'vitest';
import { countingClient, lockName, TEST_PREFIX } from './helpers.js';

// The contract suite (contract.test.ts) checks that names and metadata core would refuse are an InvalidArgumentError
// from the service called directly. What is etcd's own: that no request was sent for them, so metadata past etcd's
// 1.5 MiB request limit never reaches the etcd3 client, where its TransportError opened the client's circuit breaker
// and the next unrelated lease grant failed ('circuit breaker is open').

const etcd = new Etcd3({ hosts: ETCD_ENDPOINT });
const { client, counts } = countingClient(etcd);
const service = new EtcdLockService({ client, keyPrefix: TEST_PREFIX });
const signal = new AbortController().signal;
const sent = (): number => counts.enqueue + counts.recheck + counts.remove + counts.grant;

afterAll(async () => {
  await service.close();
  etcd.close();
});

describe('refused input sends no request', () => {
  it("names core would refuse, and metadata up to past etcd's request limit", async () => {
    const before = sent();
    const ask = (name: string, metadata?: string) => ({
      name,
      ownerId: 'owner',
      ttlMs: 10_000,
      waitMs: 0,
      signal,
      ...(metadata === undefined ? {} : { metadata }),
    });
    const refused = [
      ...['', 'a\ud800', 'x'.repeat(1_025)].flatMap((name) => [
        service.acquire(ask(name)),
        service.acquirePermit({ ...ask(name), permits: 2 }),
        service.availablePermits(name, 2),
        service.inspectPermits(name, 2),
        service.inspect(name),
      ]),
      ...['é'.repeat(513), 'a\ud800', 'm'.repeat(2_000_000)].flatMap((metadata) => [
        service.acquire(ask(lockName('metadata'), metadata)),
        service.acquirePermit({ ...ask(lockName('metadata'), metadata), permits: 2 }),
      ]),
    ];
    const codes = (await Promise.allSettled(refused)).map((r) =>
      r.status === 'rejected' ? (r.reason as { code?: unknown }).code : r.status,
    );
    expect(codes).toEqual(refused.map(() => 'INVALID_ARGUMENT'));
    expect(sent()).toBe(before);
    // The client's breaker stayed closed: a grant goes through.
    const name = lockName('metadata');
    const granted = await service.acquire(ask(name));
    if (!granted.acquired) throw new Error('the lock was not granted');
    const { ownershipToken, fencingToken } = granted.grant;
    expect(await service.release({ name, ownerId: 'owner', ownershipToken, fencingToken })).toBe(true);
  });

  it('owner ids that are empty, over 256 UTF-16 units, not strings or not well-formed Unicode', async () => {
    const before = sent();
    const ask = (ownerId: unknown) => ({
      name: lockName('owner'),
      ownerId: ownerId as string,
      ttlMs: 10_000,
      waitMs: 0,
      signal,
    });
    const owners: unknown[] = ['', 'a\ud800', '\udc00b', 'x'.repeat(257), 5, undefined];
    const direct = owners.flatMap((ownerId) => [
      service.acquire(ask(ownerId)),
      service.acquirePermit({ ...ask(ownerId), permits: 2 }),
    ]);
    const codes = (await Promise.allSettled(direct)).map((r) =>
      r.status === 'rejected' ? (r.reason as { code?: unknown }).code : r.status,
    );
    expect(codes).toEqual(direct.map(() => 'INVALID_ARGUMENT'));
    expect(sent()).toBe(before);
    // The longest allowed, with a character outside the BMP (two units), is stored and reported as it was given.
    const ownerId = `\u{1F512}${'o'.repeat(254)}`;
    const name = lockName('owner');
    const granted = await service.acquire({ ...ask(ownerId), name });
    if (!granted.acquired) throw new Error('the lock was not granted');
    expect((await service.inspect(name)).ownerId).toBe(ownerId);
    const { ownershipToken, fencingToken } = granted.grant;
    expect(await service.release({ name, ownerId, ownershipToken, fencingToken })).toBe(true);
  });
});
