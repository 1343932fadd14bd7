import { LockClient } from '@dlock/core';
import { FencingGate } from '@dlock/fencing-pg';
import { PostgresLockService } from '@dlock/postgres';
import { beforeAll, describe, expect, it } from 'vitest';
import { forkFixture, newPool, PG_URL, usePrivateSchema } from './helpers.js';

interface Message {
  readonly type: 'acquired' | 'lost' | 'wrote' | 'refused' | 'error';
  readonly token?: string;
  readonly validUntilNs?: string;
  readonly reason?: string;
  readonly highWaterMark?: string;
  readonly message?: string;
}

const TTL_MS = 1_500;
const pool = newPool(5);
const tables = usePrivateSchema(pool, 'dlock_pg_pause');
let schema = '';
beforeAll(async () => {
  schema = tables.name;
  await pool.query(`CREATE TABLE "${schema}".ledger (id int PRIMARY KEY, balance int NOT NULL, writer text)`);
  await pool.query(`INSERT INTO "${schema}".ledger VALUES (1, 100, 'nobody')`);
  await new FencingGate({ schema }).ensureSchema(pool);
});

const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

describe('a holder process frozen (SIGSTOP) past its TTL', () => {
  it("loses the lock to a waiter with a higher token, learns it on waking, and its stale write is refused by fencing-pg's gate", {
    timeout: 20_000,
  }, async () => {
    const { child, next } = forkFixture<Message>(
      'holder.mjs',
      [PG_URL, schema, 'paused', String(TTL_MS)],
      'holder',
    );
    const service = new PostgresLockService({ pool, schema });
    const contender = new LockClient(service);
    const gate = new FencingGate({ schema });
    try {
      const acquired = await next('acquired', 10_000);
      child.kill('SIGSTOP');
      const frozenAt = performance.now();
      // Queued behind the frozen holder: its lease runs out on the server's clock, nobody releases it.
      const handle = await contender.acquire('paused', { ttlMs: 10_000, waitMs: 10_000 });
      const servedAt = process.hrtime.bigint();
      const waitedMs = performance.now() - frozenAt;
      expect(waitedMs).toBeGreaterThanOrEqual(TTL_MS - 600);
      expect(handle.fencingToken).toBeGreaterThan(BigInt(acquired.token ?? '0'));
      // No overlap: the frozen holder's own validity window had closed before the waiter was served.
      expect(servedAt).toBeGreaterThan(BigInt(acquired.validUntilNs ?? '0'));
      await gate.runFenced(pool, 'paused', handle.fencingToken, (tx) =>
        tx.query(`UPDATE "${schema}".ledger SET balance = balance - 30, writer = 'current' WHERE id = 1`),
      );
      child.kill('SIGCONT');
      const resumedAt = performance.now();
      const lost = await next('lost', 5_000);
      const learnedMs = performance.now() - resumedAt;
      expect(['expired', 'rejected']).toContain(lost.reason);
      expect(learnedMs).toBeLessThan(2_000);
      child.send('write');
      const refused = await next('refused', 5_000);
      expect(refused).toMatchObject({ token: acquired.token, highWaterMark: String(handle.fencingToken) });
      expect((await pool.query(`SELECT balance, writer FROM "${schema}".ledger WHERE id = 1`)).rows).toEqual([
        { balance: 70, writer: 'current' },
      ]);
      console.log(
        `frozen holder (token ${acquired.token}): waiter served after ${waitedMs.toFixed(0)} ms with token ${handle.fencingToken}; holder knew it lost ${learnedMs.toFixed(0)} ms after waking (${lost.reason}); its write refused (${refused.token} < ${refused.highWaterMark})`,
      );
      await handle.release();
    } finally {
      child.kill('SIGCONT');
      child.send('exit');
      await Promise.race([new Promise((resolve) => child.once('exit', resolve)), sleep(5_000)]);
      if (child.exitCode === null) child.kill('SIGKILL');
      await contender.close();
      await service.close();
    }
  });
});
