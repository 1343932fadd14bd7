import { LockClient } from '@dlock/core';
import { PostgresLockService } from '@dlock/postgres';
import { describe, expect, it } from 'vitest';
import { newPool, usePrivateSchema } from './helpers.js';

const pool = newPool(4);
const tables = usePrivateSchema(pool);

describe('names', () => {
  it('stores any name core accepts as it is, and refuses one with a NUL character before any I/O', async () => {
    const service = new PostgresLockService({ pool, schema: tables.name, listen: false });
    const client = new LockClient(service);
    try {
      for (const name of ['a\'b"c:d\\e', 'x'.repeat(1_024), '🔒 ключ']) {
        const held = await client.acquire(name, { ttlMs: 5_000, waitMs: 0 });
        expect((await client.inspect(name)).fencingToken).toBe(held.fencingToken);
        await held.release();
      }
      const statements = service.statements;
      const nul = 'jobs\u0000:42';
      // PostgreSQL text cannot hold it: sent, every statement on the name failed as if the server were unreachable.
      await expect(client.acquire(nul, { ttlMs: 5_000, waitMs: 0 })).rejects.toMatchObject({
        code: 'INVALID_ARGUMENT',
      });
      await expect(client.acquire(nul, { ttlMs: 5_000, waitMs: 1_000 })).rejects.toMatchObject({
        code: 'INVALID_ARGUMENT',
      });
      await expect(client.inspect(nul)).rejects.toMatchObject({ code: 'INVALID_ARGUMENT' });
      const semaphore = client.semaphore(nul, { permits: 2, ttlMs: 5_000 });
      await expect(semaphore.acquire({ waitMs: 0 })).rejects.toMatchObject({ code: 'INVALID_ARGUMENT' });
      await expect(semaphore.available()).rejects.toMatchObject({ code: 'INVALID_ARGUMENT' });
      await expect(semaphore.inspect()).rejects.toMatchObject({ code: 'INVALID_ARGUMENT' });
      expect(service.statements).toBe(statements);
    } finally {
      await client.close();
      await service.close();
    }
  });

  it('refuses metadata or an owner id with a NUL character before any I/O, and a proclaim of one', async () => {
    const service = new PostgresLockService({ pool, schema: tables.name, listen: false });
    const client = new LockClient(service);
    const nulOwner = new LockClient(service, { ownerId: 'host\u0000:1' });
    try {
      const leader = await client.election('nul-election', { ttlMs: 5_000 }).campaign({ waitMs: 0 });
      const statements = service.statements;
      // Sent, each statement failed with the server's encoding error, reported as the service unreachable.
      await expect(
        client.acquire('nul-metadata', { ttlMs: 5_000, waitMs: 0, metadata: 'a\u0000b' }),
      ).rejects.toMatchObject({ code: 'INVALID_ARGUMENT' });
      await expect(
        client
          .semaphore('nul-metadata', { permits: 2, ttlMs: 5_000 })
          .acquire({ waitMs: 0, metadata: '\u0000' }),
      ).rejects.toMatchObject({ code: 'INVALID_ARGUMENT' });
      await expect(nulOwner.acquire('nul-owner', { ttlMs: 5_000, waitMs: 0 })).rejects.toMatchObject({
        code: 'INVALID_ARGUMENT',
      });
      await expect(leader.proclaim('x\u0000')).rejects.toMatchObject({ code: 'INVALID_ARGUMENT' });
      expect(service.statements).toBe(statements);
      // The leadership is not lost for it: a proclaim of a storable value still lands.
      await leader.proclaim('ok');
      expect((await client.inspect('nul-election')).metadata).toBe('ok');
      await leader.resign();
    } finally {
      await nulOwner.close();
      await client.close();
      await service.close();
    }
  });

  it('refuses to watch a name with a NUL character before any I/O', async () => {
    // A service that listens: an observer row would be written for the name, and its insert failed unseen, so the
    // subscriber never heard of another process's release.
    const service = new PostgresLockService({ pool, schema: tables.name });
    const client = new LockClient(service);
    try {
      const statements = service.statements;
      const invalid = expect.objectContaining({ code: 'INVALID_ARGUMENT' });
      expect(() => client.onRelease('jobs\u0000:42', () => {})).toThrow(invalid);
      expect(() => service.watchChanges('jobs\u0000:42', () => {})).toThrow(invalid);
      expect(() => service.watch('jobs\u0000:42', () => {})).toThrow(invalid);
      expect(service.statements).toBe(statements);
    } finally {
      await client.close();
      await service.close();
    }
  });

  it('refuses an owner id core would refuse (empty, a lone surrogate, over 256 code units, not a string), before any I/O', async () => {
    const service = new PostgresLockService({ pool, schema: tables.name, listen: false });
    const client = new LockClient(service, { ownerId: 'é'.repeat(256) });
    const signal = new AbortController().signal;
    const invalid = { code: 'INVALID_ARGUMENT', field: 'request.ownerId' };
    try {
      const statements = service.statements;
      // Core's one owner-id rule (validateOwnerId), as LockClient checks options.ownerId: sent, a lone surrogate was
      // stored as U+FFFD (inspect named an owner id nobody has); any length was stored whole (100,000 characters
      // were), and an empty one too. 257 units and 1,024 one-byte characters passed the name rule (1,024 UTF-8 bytes)
      // the service used before.
      for (const ownerId of [
        '',
        'host\ud800:1',
        'a\udc00',
        'o'.repeat(257),
        'o'.repeat(1_024),
        'é'.repeat(513),
      ]) {
        const request = { name: 'owner-direct', ownerId, ttlMs: 5_000, waitMs: 0, signal };
        await expect.soft(service.acquire(request)).rejects.toMatchObject(invalid);
        await expect.soft(service.acquirePermit({ ...request, permits: 2 })).rejects.toMatchObject(invalid);
      }
      // Not a string at all (a JavaScript caller): the NUL check threw a TypeError.
      const notText: unknown = 42;
      await expect(
        service.acquire({
          name: 'owner-direct',
          ownerId: notText as string,
          ttlMs: 5_000,
          waitMs: 0,
          signal,
        }),
      ).rejects.toMatchObject(invalid);
      expect(service.statements).toBe(statements);
      // The longest owner id a LockClient accepts (256 code units, here 512 UTF-8 bytes) is stored as it is.
      const held = await client.acquire('owner-longest', { ttlMs: 5_000, waitMs: 0 });
      expect((await client.inspect('owner-longest')).ownerId).toBe('é'.repeat(256));
      await held.release();
      const longest = { name: 'owner-longest', ownerId: 'o'.repeat(256), ttlMs: 5_000, waitMs: 0, signal };
      expect((await service.acquirePermit({ ...longest, permits: 2 })).acquired).toBe(true);
    } finally {
      await client.close();
      await service.close();
    }
  });
});
