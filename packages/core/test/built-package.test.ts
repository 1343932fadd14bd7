import { runBuiltPackage } from '@dlock/test-utils';
import { describe, expect, it } from 'vitest';

// These run the BUILT package in a child process (Node resolves '@dlock/core' to this package's own exports map),
// so they check the published entry point, its types-free runtime, and real timer behaviour.
const run = (script: string) => runBuiltPackage(new URL('..', import.meta.url), script);

describe('the built package in a real process', () => {
  it('an idle client holding a renewed lock does not keep the process alive', async () => {
    const result = await run(`
      import { LockClient, MemoryLockService } from '@dlock/core';
      const client = new LockClient(new MemoryLockService());
      const handle = await client.acquire('job', { ttlMs: 60_000 });
      console.log('held', handle.fencingToken.toString(), handle.isHeld());
    `);
    expect(result.stderr).toBe('');
    expect(result.stdout.trim()).toBe('held 1 true');
    expect(result.code).toBe(0);
    expect(result.ms).toBeLessThan(5_000);
  });

  it('a pending acquire wait keeps the process alive until it settles', async () => {
    const result = await run(`
      import { LockClient, MemoryLockService } from '@dlock/core';
      const service = new MemoryLockService();
      await new LockClient(service).acquire('job', { ttlMs: 60_000 });
      try {
        await new LockClient(service).acquire('job', { ttlMs: 1_000, waitMs: 300 });
      } catch (error) {
        console.log(error.code);
      }
    `);
    expect(result.stdout.trim()).toBe('ACQUIRE_TIMEOUT');
    expect(result.code).toBe(0);
  });
});
