import { MAX_NAME_BYTES } from '@dlock/core';
import { EtcdLockService } from '@dlock/etcd';
import { ETCD_ENDPOINT } from '@dlock/test-utils';
import { Etcd3 } from 'etcd3';
import { afterAll, describe, expect, it } from 'vitest';
import { countingClient, lockName, TEST_PREFIX } from './helpers.js';

// Names and metadata handed to the service directly (no LockClient in front) are its input: what core would refuse
// is an InvalidArgumentError before any request. Sent, a lone surrogate became U+FFFD in the key, so 'a\ud800' was
// the lock 'a\ufffd'; an empty or over-long name was granted under a key no client can name.

const etcd = new Etcd3({ hosts: ETCD_ENDPOINT });
const { client, counts } = countingClient(etcd);
const service = new EtcdLockService({ client, keyPrefix: TEST_PREFIX });
const signal = new AbortController().signal;
const invalid = (field: string) => ({ code: 'INVALID_ARGUMENT', field });
const sent = (): number => counts.enqueue + counts.recheck + counts.remove + counts.grant;

/** What a synchronous watch call threw (undefined if it returned: then the watch is ended at once). */
function thrownBy(subscribe: () => () => void): unknown {
  try {
    subscribe()();
    return undefined;
  } catch (error) {
    return error;
  }
}

afterAll(async () => {
  await service.close();
  etcd.close();
});

describe('names core would refuse are refused by the service before any request', () => {
  const names = {
    empty: '',
    'a lone surrogate': 'a\ud800',
    [`over ${MAX_NAME_BYTES} UTF-8 bytes`]: 'x'.repeat(MAX_NAME_BYTES + 1),
  };
  for (const [label, name] of Object.entries(names)) {
    it(`${label}: every call that takes a name rejects with INVALID_ARGUMENT`, async () => {
      const before = sent();
      const request = { name, ownerId: 'owner', ttlMs: 10_000, waitMs: 0, signal };
      await expect.soft(service.acquire(request)).rejects.toMatchObject(invalid('request.name'));
      await expect
        .soft(service.acquirePermit({ ...request, permits: 2 }))
        .rejects.toMatchObject(invalid('request.name'));
      await expect.soft(service.availablePermits(name, 2)).rejects.toMatchObject(invalid('name'));
      await expect.soft(service.inspectPermits(name, 2)).rejects.toMatchObject(invalid('name'));
      await expect.soft(service.inspect(name)).rejects.toMatchObject(invalid('name'));
      expect.soft(thrownBy(() => service.watch(name, () => {}))).toMatchObject(invalid('name'));
      expect.soft(thrownBy(() => service.watchChanges(name, () => {}))).toMatchObject(invalid('name'));
      expect(sent()).toBe(before);
    });
  }

  it('a lone surrogate is not read as U+FFFD: the lock held as a\\ufffd is not what a\\ud800 answers about', async () => {
    const base = lockName('surrogate');
    const held = await service.acquire({
      name: `${base}\ufffd`,
      ownerId: 'holder',
      ttlMs: 10_000,
      waitMs: 0,
      signal,
    });
    if (!held.acquired) throw new Error('the lock was not granted');
    try {
      const name = `${base}\ud800`;
      await expect
        .soft(service.acquire({ name, ownerId: 'other', ttlMs: 10_000, waitMs: 0, signal }))
        .rejects.toMatchObject(invalid('request.name'));
      await expect.soft(service.inspect(name)).rejects.toMatchObject(invalid('name'));
    } finally {
      expect(
        await service.release({
          name: `${base}\ufffd`,
          ownerId: 'holder',
          ownershipToken: held.grant.ownershipToken,
          fencingToken: held.grant.fencingToken,
        }),
      ).toBe(true);
    }
  });
});

describe('metadata core would refuse is refused by the service before any request', () => {
  const values = {
    'over 1,024 UTF-8 bytes': 'é'.repeat(513),
    'a lone surrogate': 'a\ud800',
    "over etcd's 1.5 MiB request limit": 'm'.repeat(2_000_000),
  };
  for (const [label, metadata] of Object.entries(values)) {
    it(`${label}: acquire and acquirePermit reject with INVALID_ARGUMENT`, async () => {
      const name = lockName('metadata');
      const before = sent();
      const request = { name, ownerId: 'owner', ttlMs: 10_000, waitMs: 0, signal, metadata };
      await expect.soft(service.acquire(request)).rejects.toMatchObject(invalid('request.metadata'));
      await expect
        .soft(service.acquirePermit({ ...request, permits: 2 }))
        .rejects.toMatchObject(invalid('request.metadata'));
      expect(sent()).toBe(before);
      expect((await service.inspect(name)).held).toBe(false);
    });
  }

  it('updateMetadata rejects such metadata with INVALID_ARGUMENT and keeps what the grant had', async () => {
    const name = lockName('update');
    const granted = await service.acquire({
      name,
      ownerId: 'owner',
      ttlMs: 10_000,
      waitMs: 0,
      signal,
      metadata: 'before',
    });
    if (!granted.acquired) throw new Error('the lock was not granted');
    const { ownershipToken, fencingToken } = granted.grant;
    const lease = { name, ownerId: 'owner', ownershipToken, fencingToken };
    try {
      for (const metadata of Object.values(values)) {
        await expect.soft(service.updateMetadata(lease, metadata)).rejects.toMatchObject(invalid('metadata'));
      }
      expect((await service.inspect(name)).metadata).toBe('before');
    } finally {
      expect(await service.release(lease)).toBe(true);
    }
  });
});
