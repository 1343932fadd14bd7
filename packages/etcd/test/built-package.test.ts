import { ETCD_ENDPOINT, runBuiltPackage } from '@dlock/test-utils';
import { describe, expect, it } from 'vitest';

// The BUILT package in a child process: Node resolves '@dlock/etcd' through its own exports map, and the process
// must exit by itself once the service and the caller's client are closed (no keep-alive stream or timer left).
const run = (script: string) =>
  runBuiltPackage(new URL('..', import.meta.url), script, {
    timeoutMs: 15_000,
    env: { ETCD: ETCD_ENDPOINT },
  });

describe('the built package in a real process', () => {
  for (const session of [false, true]) {
    it(`acquires, releases and exits on its own after close() (session: ${session})`, async () => {
      const result = await run(`
        import { LockClient } from '@dlock/core';
        import { EtcdLockService } from '@dlock/etcd';
        import { Etcd3 } from 'etcd3';
        const etcd = new Etcd3({ hosts: process.env.ETCD });
        const service = new EtcdLockService({ client: etcd, session: ${session} });
        const locks = new LockClient(service);
        const lock = await locks.acquire('built:' + process.pid, { ttlMs: 3_000, waitMs: 2_000 });
        console.log('held', typeof lock.fencingToken, lock.fencingToken > 0n, lock.isHeld());
        await lock.release();
        await locks.close();
        await service.close();
        etcd.close();
      `);
      expect(result.stderr).toBe('');
      expect(result.stdout.trim()).toBe('held bigint true true');
      expect(result.code).toBe(0);
      expect(result.ms).toBeLessThan(8_000);
    });
  }
});
