import { uniqueName, ZK_CONNECT } from '@dlock/test-utils';
import { afterAll, describe, expect, it } from 'vitest';
import { lockParentPath, ZooKeeperLockService } from '../src/index.js';
import { connectedClient, statOf } from './helpers.js';

// Metadata and names handed to the service directly are its input: past the limit core sets for every backend they
// are an InvalidArgumentError before any request, not a TransportError carrying the ZooKeeper client's size check.

const ROOT = `/dlock-test/service-input-checks/${uniqueName('run')}`;
const service = new ZooKeeperLockService({ connectionString: ZK_CONNECT, keyPrefix: ROOT });
const signal = new AbortController().signal;

afterAll(async () => {
  await service.close();
});

describe('metadata the client would refuse is refused by the service', () => {
  const values = {
    'over 1 MB': 'm'.repeat(1_100_000),
    'over 1,024 UTF-8 bytes': 'é'.repeat(513),
    'a lone surrogate': 'a\ud800',
  };
  for (const [label, metadata] of Object.entries(values)) {
    it(`${label}: acquire and acquirePermit reject with INVALID_ARGUMENT and make no node`, async () => {
      const name = uniqueName('metadata');
      const request = { name, ownerId: 'owner', ttlMs: 10_000, waitMs: 0, signal, metadata };
      await expect(service.acquire(request)).rejects.toMatchObject({
        code: 'INVALID_ARGUMENT',
        field: 'request.metadata',
      });
      await expect(service.acquirePermit({ ...request, permits: 2 })).rejects.toMatchObject({
        code: 'INVALID_ARGUMENT',
        field: 'request.metadata',
      });
      const raw = await connectedClient(ZK_CONNECT);
      try {
        expect(await statOf(raw, lockParentPath(ROOT, name))).toBeNull();
      } finally {
        raw.close();
      }
    });
  }

  it('updateMetadata rejects such metadata with INVALID_ARGUMENT and keeps what the grant had', async () => {
    const name = uniqueName('update');
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
        await expect(service.updateMetadata(lease, metadata)).rejects.toMatchObject({
          code: 'INVALID_ARGUMENT',
          field: 'metadata',
        });
      }
      expect((await service.inspect(name)).metadata).toBe('before');
    } finally {
      expect(await service.release(lease)).toBe(true);
    }
  });
});

describe('watch and watchChanges check the name', () => {
  for (const [label, name] of Object.entries({ empty: '', 'lone surrogate': 'a\ud800' })) {
    it(`${label}: both throw INVALID_ARGUMENT and watch nothing`, () => {
      expect(() => service.watch(name, () => {})).toThrow(
        expect.objectContaining({ code: 'INVALID_ARGUMENT' }),
      );
      expect(() => service.watchChanges(name, () => {})).toThrow(
        expect.objectContaining({ code: 'INVALID_ARGUMENT' }),
      );
    });
  }
});
