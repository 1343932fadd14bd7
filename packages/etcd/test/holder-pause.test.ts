import { fork } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { LockClient } from '@dlock/core';
import { EtcdLockService } from '@dlock/etcd';
import { ETCD_ENDPOINT } from '@dlock/test-utils';
import { Etcd3 } from 'etcd3';
import { afterAll, describe, expect, it } from 'vitest';
import { lockName, sleep, TEST_PREFIX } from './helpers.js';

const etcd = new Etcd3({ hosts: ETCD_ENDPOINT });
afterAll(() => etcd.close());

interface Message {
  readonly type: 'acquired' | 'lost' | 'error';
  readonly token?: string;
  readonly validUntilNs?: string;
  readonly reason?: string;
  readonly atNs?: string;
  readonly message?: string;
}

const TTL_MS = 2_000;

for (const mode of ['per-lock', 'session'] as const) {
  describe(`a holder paused past its TTL (${mode})`, () => {
    it('is Lost when it resumes, and the next holder, served after its validity ended, has a higher token', {
      timeout: 30_000,
    }, async () => {
      const name = lockName('paused');
      const child = fork(
        fileURLToPath(new URL('./fixtures/holder.mjs', import.meta.url)),
        [ETCD_ENDPOINT, TEST_PREFIX, name, mode, String(TTL_MS)],
        { execArgv: [], stdio: ['ignore', 'inherit', 'inherit', 'ipc'] },
      );
      const messages: Message[] = [];
      const next = (type: Message['type'], ms: number): Promise<Message> =>
        new Promise((resolve, reject) => {
          const found = messages.find((m) => m.type === type);
          if (found) return resolve(found);
          const timer = setTimeout(
            () => reject(new Error(`no "${type}" from the holder within ${ms} ms`)),
            ms,
          );
          child.on('message', (m: Message) => {
            if (m.type === type) {
              clearTimeout(timer);
              resolve(m);
            }
          });
        });
      child.on('message', (m: Message) => messages.push(m));
      const service = new EtcdLockService({ client: etcd, prefix: TEST_PREFIX, session: mode === 'session' });
      const contender = new LockClient(service);
      try {
        const acquired = await next('acquired', 15_000);
        child.kill('SIGSTOP');
        const pausedAt = Date.now();
        // Queued behind the frozen holder: served only once etcd expires the holder's lease.
        const handle = await contender.acquire(name, { ttlMs: TTL_MS, waitMs: 10_000 });
        const acquiredAtNs = process.hrtime.bigint();
        expect(Date.now() - pausedAt).toBeGreaterThanOrEqual(TTL_MS - 1_000);
        expect(handle.fencingToken).toBeGreaterThan(BigInt(acquired.token ?? '0'));
        // No overlap: the holder's own validity window closed before the contender was served.
        expect(acquiredAtNs).toBeGreaterThan(BigInt(acquired.validUntilNs ?? '0'));
        child.kill('SIGCONT');
        const resumedAt = Date.now();
        const lost = await next('lost', 5_000);
        expect(['expired', 'rejected']).toContain(lost.reason);
        // It learns at its first timer tick after resuming, without waiting for the service.
        expect(Date.now() - resumedAt).toBeLessThan(2_000);
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
}
