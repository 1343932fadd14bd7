import { MAX_NAME_BYTES } from '@dlock/core';
import { PostgresLockService } from '@dlock/postgres';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { newPool, uniqueName, usePrivateSchema } from './helpers.js';

// Names and metadata handed to the service directly (no LockClient in front) are its input: what core would refuse
// is an InvalidArgumentError before any statement, as a NUL character already was. Sent, a lone surrogate became
// U+FFFD on the wire, so 'a\ud800' was the lock 'a\ufffd'; an empty or over-long name was granted under a row no
// client can name, and a name past PostgreSQL's index-row limit failed as if the server were unreachable.

const pool = newPool(4);
const tables = usePrivateSchema(pool);
let service: PostgresLockService;
const signal = new AbortController().signal;
const invalid = (field: string) => ({ code: 'INVALID_ARGUMENT', field });

/** Text PostgreSQL cannot compress much, so a long value keeps its length in an index row. */
function incompressible(length: number): string {
  let x = 1;
  let text = '';
  for (let i = 0; i < length; i++) {
    x = (x * 48_271) % 2_147_483_647;
    text += String.fromCharCode(33 + (x % 94));
  }
  return text;
}

/** What a synchronous watch call threw (undefined if it returned: then the watch is ended at once). */
function thrownBy(subscribe: () => () => void): unknown {
  try {
    subscribe()();
    return undefined;
  } catch (error) {
    return error;
  }
}

beforeAll(() => {
  service = new PostgresLockService({ pool, schema: tables.name, listen: false });
});

// Registered after usePrivateSchema's, so it runs before the pool is ended.
afterAll(async () => {
  await service.close();
});

describe('names core would refuse are refused by the service before any statement', () => {
  const names = {
    empty: '',
    'a lone surrogate': 'a\ud800',
    [`over ${MAX_NAME_BYTES} UTF-8 bytes`]: 'x'.repeat(MAX_NAME_BYTES + 1),
    "over PostgreSQL's index-row limit": incompressible(10_000),
  };
  for (const [label, name] of Object.entries(names)) {
    it(`${label}: every call that takes a name rejects with INVALID_ARGUMENT`, async () => {
      const before = service.statements;
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
      expect(service.statements).toBe(before);
    });
  }

  it('a lone surrogate is not read as U+FFFD: the lock held as a\\ufffd is not what a\\ud800 answers about', async () => {
    const base = uniqueName('surrogate');
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

describe('metadata core would refuse is refused by the service before any statement', () => {
  const values = {
    'over 1,024 UTF-8 bytes': 'é'.repeat(513),
    'a lone surrogate': 'a\ud800',
    'over 1 MB': 'm'.repeat(1_100_000),
  };
  for (const [label, metadata] of Object.entries(values)) {
    it(`${label}: acquire and acquirePermit reject with INVALID_ARGUMENT`, async () => {
      const name = uniqueName('metadata');
      const before = service.statements;
      const request = { name, ownerId: 'owner', ttlMs: 10_000, waitMs: 0, signal, metadata };
      await expect.soft(service.acquire(request)).rejects.toMatchObject(invalid('request.metadata'));
      await expect
        .soft(service.acquirePermit({ ...request, permits: 2 }))
        .rejects.toMatchObject(invalid('request.metadata'));
      expect(service.statements).toBe(before);
      expect((await service.inspect(name)).held).toBe(false);
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
        await expect.soft(service.updateMetadata(lease, metadata)).rejects.toMatchObject(invalid('metadata'));
      }
      expect((await service.inspect(name)).metadata).toBe('before');
    } finally {
      expect(await service.release(lease)).toBe(true);
    }
  });
});
