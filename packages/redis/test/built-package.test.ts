import { REDIS_URL, runBuiltPackage } from '@dlock/test-utils';
import { describe, expect, it } from 'vitest';

// The BUILT package in a child process: the process must exit by itself once the services and the caller's client
// are closed, including after a queued wait (the service's own subscriber connection and deadline timer).
const run = (script: string) =>
  runBuiltPackage(new URL('..', import.meta.url), script, { timeoutMs: 15_000, env: { REDIS: REDIS_URL } });

describe('the built package in a real process', () => {
  it('single node and Redlock: acquire, wait in the queue, release, exit on their own after close()', async () => {
    const result = await run(`
      import { LockClient } from '@dlock/core';
      import { RedisLockService, RedlockService } from '@dlock/redis';
      import { createClient } from 'redis';
      const redis = await createClient({ url: process.env.REDIS }).connect();
      const single = new RedisLockService({ client: redis });
      const redlock = new RedlockService({ clients: [redis] });
      const out = [];
      for (const service of [single, redlock]) {
        const locks = new LockClient(service);
        const name = 'built:' + process.pid + ':' + out.length;
        const first = await locks.acquire(name, { ttlMs: 2_000 });
        const queued = locks.acquire(name, { ttlMs: 2_000, waitMs: 3_000 });
        setTimeout(() => void first.release(), 50);
        const second = await queued;
        out.push(second.fencingToken > first.fencingToken);
        await second.release();
        await locks.close();
        await service.close();
      }
      console.log(out.join(' '));
      redis.destroy();
    `);
    expect(result.stderr).toBe('');
    expect(result.stdout.trim()).toBe('true true');
    expect(result.code).toBe(0);
    expect(result.ms).toBeLessThan(8_000);
  });
});
