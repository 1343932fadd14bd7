import { LockClient } from '@dlock/core';
import { REDIS_URL } from '@dlock/test-utils';
import { describe, expect, it } from 'vitest';
import { connect, disconnect } from './helpers.js';

// Imports the package by name, so this runs the built dist through its exports map, as users get it.
const built = await import('@dlock/redis');

describe('the built package', () => {
  it('exports the service, the key mapping and the token helper, and takes a lock end to end', async () => {
    expect(built.lockKeys('dlock:', '{x}').lock).toBe('dlock:{%7Bx%7D}:lock');
    expect(built.newOwnershipToken()).toHaveLength(27);
    const client = await connect(REDIS_URL);
    const service = new built.RedisLockService({
      client,
      keyPrefix: 'dlock-test:',
      fenceRetentionMs: 60_000,
    });
    const locks = new LockClient(service);
    const handle = await locks.acquire(`dist-${process.pid}`, { ttlMs: 2_000 });
    expect(handle.fencingToken).toBeGreaterThan(0n);
    await handle.release();
    await locks.close();
    await service.close();
    await disconnect(client);
  });
});
