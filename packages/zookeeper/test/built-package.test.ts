import { runBuiltPackage, ZK_CONNECT } from '@dlock/test-utils';
import { describe, expect, it } from 'vitest';

// The BUILT package in a child process: Node resolves '@dlock/zookeeper' through its own exports map, and the
// process must exit by itself once everything is closed (no stray timer or socket keeps it alive).
const run = (script: string) =>
  runBuiltPackage(new URL('..', import.meta.url), script, { timeoutMs: 15_000, env: { ZK: ZK_CONNECT } });

describe('the built package in a real process', () => {
  it('acquires, releases and exits on its own after close()', async () => {
    const result = await run(`
      import { LockClient } from '@dlock/core';
      import { ZooKeeperLockService } from '@dlock/zookeeper';
      const service = new ZooKeeperLockService({ connectionString: process.env.ZK, root: '/dlock-test/built' });
      const locks = new LockClient(service);
      const lock = await locks.acquire('built:' + process.pid, { ttlMs: 10_000, waitMs: 1_000 });
      console.log('held', typeof lock.fencingToken, lock.fencingToken > 0n, lock.isHeld());
      await lock.release();
      await locks.close();
      await service.close();
    `);
    expect(result.stderr).toBe('');
    expect(result.stdout.trim()).toBe('held bigint true true');
    expect(result.code).toBe(0);
    expect(result.ms).toBeLessThan(8_000);
  });

  it('a service that was never used holds no connection', async () => {
    const result = await run(`
      import { ZooKeeperLockService } from '@dlock/zookeeper';
      new ZooKeeperLockService({ connectionString: process.env.ZK });
      console.log('made');
    `);
    expect(result.stdout.trim()).toBe('made');
    expect(result.code).toBe(0);
    expect(result.ms).toBeLessThan(5_000);
  });
});
