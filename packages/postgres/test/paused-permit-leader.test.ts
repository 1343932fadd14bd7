import { LockClient } from '@dlock/core';
import { PostgresLockService } from '@dlock/postgres';
import { uniqueName } from '@dlock/test-utils';
import { describe, expect, it } from 'vitest';
import { forkFixture, newPool, PG_URL, usePrivateSchema } from './helpers.js';

// A permit holder and an election leader frozen (SIGSTOP) past their lease, in a child process: the next one is
// served with a higher token, and the frozen one, on waking, is told the truth: not held, its write (proclaim)
// refused, its release or resignation reported as lost, and the successor keeps what it holds.
interface Message {
  readonly type: 'acquired' | 'lost' | 'probed' | 'error';
  readonly token?: string;
  readonly validUntilNs?: string;
  readonly reason?: string;
  readonly isHeld?: boolean;
  readonly write?: string;
  readonly end?: string;
  readonly state?: string;
  readonly message?: string;
}

const TTL_MS = 1_500;
const pool = newPool(5);
const tables = usePrivateSchema(pool, 'dlock_pg_pause2');

const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

describe.each(['permit', 'leader'] as const)('a %s frozen (SIGSTOP) past its lease', (mode) => {
  it('is succeeded with a higher token, and on waking is told it lost: not held, nothing written, nothing released', {
    timeout: 20_000,
  }, async () => {
    const name = uniqueName(`paused-${mode}`);
    const { child, next } = forkFixture<Message>(
      'paused-holder.mjs',
      [PG_URL, tables.name, name, String(TTL_MS), mode],
      'child',
    );
    const service = new PostgresLockService({ pool, schema: tables.name });
    const successor = new LockClient(service);
    try {
      const acquired = await next('acquired', 10_000);
      child.kill('SIGSTOP');
      const frozenAt = performance.now();
      let successorToken: bigint;
      let stillHeld: () => Promise<boolean>;
      let letGo: () => Promise<void>;
      if (mode === 'permit') {
        const permit = await successor
          .semaphore(name, { permits: 1, ttlMs: 10_000 })
          .acquire({ waitMs: 10_000 });
        successorToken = permit.fencingToken;
        if (acquired.validUntilNs !== undefined) {
          expect(process.hrtime.bigint()).toBeGreaterThan(BigInt(acquired.validUntilNs));
        }
        stillHeld = async () =>
          (await service.inspectPermits(name, 1)).held.some((h) => h.fencingToken === permit.fencingToken);
        letGo = () => permit.release();
      } else {
        const leadership = await successor
          .election(name, { ttlMs: 10_000 })
          .campaign({ value: 'successor', waitMs: 10_000 });
        successorToken = leadership.epoch;
        stillHeld = async () =>
          (await successor.election(name, { ttlMs: 10_000 }).leader())?.value === 'successor';
        letGo = () => leadership.resign();
      }
      const waitedMs = performance.now() - frozenAt;
      expect(waitedMs).toBeGreaterThanOrEqual(TTL_MS - 600);
      expect(successorToken).toBeGreaterThan(BigInt(acquired.token ?? '0'));
      child.kill('SIGCONT');
      child.send('probe');
      const probed = await next('probed', 5_000);
      expect(probed).toMatchObject({
        isHeld: false,
        write: mode === 'leader' ? 'LOCK_LOST' : 'none',
        end: 'LOCK_LOST',
        state: 'lost',
      });
      // The frozen one's late calls took nothing from its successor.
      expect(await stillHeld()).toBe(true);
      console.log(
        `frozen ${mode} (token ${acquired.token}): successor served after ${waitedMs.toFixed(0)} ms with token ${successorToken}; on waking: ${JSON.stringify(probed)}`,
      );
      await letGo();
    } finally {
      child.kill('SIGCONT');
      child.send('exit');
      await Promise.race([new Promise((resolve) => child.once('exit', resolve)), sleep(5_000)]);
      if (child.exitCode === null) child.kill('SIGKILL');
      await successor.close();
      await service.close();
    }
  });
});
