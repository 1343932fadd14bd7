import { type ChildProcess, fork } from 'node:child_process';
import { performance } from 'node:perf_hooks';
import { fileURLToPath } from 'node:url';
import { type Leadership, LockClient, renewIntervalMs } from '@dlock/core';
import { EtcdLockService } from '@dlock/etcd';
import { FencingGate } from '@dlock/fencing-pg';
import { ETCD_ENDPOINT, PG_URL, uniqueName } from '@dlock/test-utils';
import { Etcd3 } from 'etcd3';
import pg from 'pg';
import { afterAll, afterEach, describe, expect, it } from 'vitest';
import { lockName, sleep, TEST_PREFIX, waitUntil } from './helpers.js';
import { startRestartableEtcd } from './restartable-etcd.js';

const teardown: (() => Promise<unknown> | unknown)[] = [];
afterEach(async () => {
  for (const fn of teardown.splice(0).reverse()) await Promise.resolve(fn()).catch(() => {});
});

interface Message {
  readonly type: 'leading' | 'lost' | 'write' | 'error';
  readonly epoch?: string;
  readonly reason?: string;
  readonly outcome?: 'committed' | 'rejected';
  readonly code?: string;
  readonly highWaterMark?: string;
  readonly message?: string;
}

/** Messages of a child process, each type awaited at most once. */
function inbox(child: ChildProcess): (type: Message['type'], ms: number) => Promise<Message> {
  const messages: Message[] = [];
  const waiters: (() => void)[] = [];
  child.on('message', (m: Message) => {
    messages.push(m);
    for (const wake of waiters.splice(0)) wake();
  });
  return async (type, ms) => {
    const deadline = Date.now() + ms;
    for (;;) {
      const found = messages.find((m) => m.type === type || m.type === 'error');
      if (found?.type === 'error') throw new Error(`the leader process failed: ${found.message}`);
      if (found) return found;
      const left = deadline - Date.now();
      if (left <= 0) throw new Error(`no "${type}" from the leader process within ${ms} ms`);
      await new Promise<void>((resolve) => {
        const timer = setTimeout(resolve, left);
        waiters.push(() => {
          clearTimeout(timer);
          resolve();
        });
      });
    }
  };
}

describe('a leader frozen (SIGSTOP) past its TTL', () => {
  const etcd = new Etcd3({ hosts: ETCD_ENDPOINT });
  const pool = new pg.Pool({ connectionString: PG_URL, max: 2 });
  const gate = new FencingGate();
  afterAll(async () => {
    etcd.close();
    await pool.end();
  });

  for (const mode of ['per-lock', 'session'] as const) {
    it(`is replaced by a higher epoch within TTL + one renewal interval; resumed, it is lost and its fenced write is refused (${mode})`, {
      timeout: 40_000,
    }, async () => {
      const ttlMs = 3_000;
      const name = lockName('frozen-leader');
      const table = uniqueName('etcd_election_writes');
      await gate.ensureSchema(pool);
      await pool.query(`CREATE TABLE ${table} (epoch bigint NOT NULL, writer text NOT NULL)`);
      teardown.push(() => pool.query(`DROP TABLE IF EXISTS ${table}`));
      const child = fork(
        fileURLToPath(new URL('./fixtures/leader.mjs', import.meta.url)),
        [ETCD_ENDPOINT, TEST_PREFIX, name, mode, String(ttlMs), PG_URL, table],
        { execArgv: [], stdio: ['ignore', 'inherit', 'inherit', 'ipc'] },
      );
      teardown.push(async () => {
        child.kill('SIGCONT');
        if (child.connected) child.send('exit');
        await Promise.race([new Promise((resolve) => child.once('exit', resolve)), sleep(5_000)]);
        if (child.exitCode === null) child.kill('SIGKILL');
      });
      const next = inbox(child);
      const service = new EtcdLockService({
        client: etcd,
        keyPrefix: TEST_PREFIX,
        session: mode === 'session',
      });
      const client = new LockClient(service);
      teardown.push(async () => {
        await client.close();
        await service.close();
      });

      const old = BigInt((await next('leading', 15_000)).epoch ?? '0');
      child.kill('SIGSTOP');
      const pausedAt = performance.now();
      // Queued behind the frozen leader: it takes over once etcd expires the frozen leader's lease.
      const successor = await client
        .election(name, { ttlMs })
        .campaign({ value: 'successor', waitMs: 15_000 });
      const takeOverMs = performance.now() - pausedAt;
      expect(successor.epoch).toBeGreaterThan(old);
      // The frozen leader's last keep-alive went out at most one renewal interval (±10 %) before the pause.
      expect(takeOverMs).toBeGreaterThanOrEqual(ttlMs - 1.1 * renewIntervalMs(ttlMs));
      expect(takeOverMs).toBeLessThanOrEqual(ttlMs + renewIntervalMs(ttlMs));
      await gate.runFenced(pool, name, successor.epoch, (tx) =>
        tx.query(`INSERT INTO ${table} (epoch, writer) VALUES ($1, $2)`, [
          String(successor.epoch),
          'successor',
        ]),
      );

      child.kill('SIGCONT');
      const lost = await next('lost', 5_000);
      expect(['expired', 'rejected']).toContain(lost.reason);
      child.send('write');
      const write = await next('write', 10_000);
      expect(write).toMatchObject({
        outcome: 'rejected',
        code: 'STALE_FENCING_TOKEN',
        highWaterMark: String(successor.epoch),
      });
      const rows = await pool.query(`SELECT epoch::text, writer FROM ${table} ORDER BY epoch`);
      expect(rows.rows).toEqual([{ epoch: String(successor.epoch), writer: 'successor' }]);
      expect(successor.isLeader()).toBe(true);
      await successor.resign();
    });
  }
});

describe('etcd killed and restarted on its data (private member)', () => {
  it('never has two leaders with open windows, and epochs never go back', { timeout: 90_000 }, async () => {
    const member = await startRestartableEtcd();
    teardown.push(() => member.stop());
    const ttlMs = 2_000;
    const name = lockName('restarted');
    const stop = new AbortController();
    interface Candidate {
      readonly id: number;
      current: Leadership | undefined;
    }
    const candidates: Candidate[] = [];
    const terms: { epoch: bigint; candidate: number; at: number }[] = [];
    let losses = 0;
    /** While set, a leader does not resign: the leader at the long outage must be lost, not step down. */
    let hold = false;
    const runs = [false, true, false, true].map(async (session, id) => {
      const etcd = new Etcd3({ hosts: member.endpoint });
      const service = new EtcdLockService({
        client: etcd,
        keyPrefix: TEST_PREFIX,
        session,
        requestTimeoutMs: 1_000,
      });
      const client = new LockClient(service, { operationTimeoutMs: 2_000 });
      const election = client.election(name, { ttlMs });
      const candidate: Candidate = { id, current: undefined };
      candidates.push(candidate);
      try {
        while (!stop.signal.aborted) {
          let leadership: Leadership;
          try {
            leadership = await election.campaign({
              value: `candidate-${id}`,
              waitMs: 3_000,
              signal: stop.signal,
              onLost: () => {
                losses++;
              },
            });
          } catch {
            await sleep(50);
            continue;
          }
          candidate.current = leadership;
          terms.push({ epoch: leadership.epoch, candidate: id, at: performance.now() });
          // Resigning often keeps leadership moving through the outages.
          const ended = new Promise((resolve) => leadership.signal.addEventListener('abort', resolve));
          await Promise.race([sleep(150 + 100 * id), ended]);
          while (hold && !leadership.signal.aborted) await sleep(20);
          // Still the current one until the resign settles: a resign marks it released at once, so the sampler
          // sees it stop leading exactly when the application would.
          await leadership.resign().catch(() => {});
          candidate.current = undefined;
        }
      } finally {
        await client.close();
        await service.close();
        etcd.close();
      }
    });
    // Every 5 ms: how many candidates believe they lead right now (isLeader: held and inside the window).
    let samples = 0;
    let mostAtOnce = 0;
    const sampler = setInterval(() => {
      samples++;
      const leading = candidates.filter((c) => c.current?.isLeader()).length;
      mostAtOnce = Math.max(mostAtOnce, leading);
    }, 5);
    teardown.push(() => clearInterval(sampler));

    await sleep(2_000);
    const beforeKills = terms.length;
    const epochBeforeKills = terms.at(-1)?.epoch ?? 0n;
    // A short outage: leadership moves on once etcd is back (etcd3's circuit breaker may keep it shut for 5 s).
    await member.kill();
    await sleep(300);
    await member.start();
    const restartedAt = performance.now();
    expect(await waitUntil(() => terms.some((t) => t.at > restartedAt), 20_000)).toBe(true);
    // Then one longer than the TTL, with a leader that does not step down: it must lose.
    hold = true;
    expect(await waitUntil(() => candidates.some((c) => c.current?.isLeader()), 10_000)).toBe(true);
    const leaderAtKill = candidates.find((c) => c.current?.isLeader())?.current;
    await member.kill();
    const longKillAt = performance.now();
    await sleep(ttlMs + 1_500);
    expect(leaderAtKill?.state).toBe('lost');
    hold = false;
    await member.start();
    expect(await waitUntil(() => terms.some((t) => t.at > longKillAt), 20_000)).toBe(true);
    await sleep(2_000);
    stop.abort();
    await Promise.all(runs);
    clearInterval(sampler);

    expect(beforeKills).toBeGreaterThan(3);
    expect(losses).toBeGreaterThan(0);
    expect(samples).toBeGreaterThan(1_000);
    expect(mostAtOnce).toBe(1);
    for (let i = 1; i < terms.length; i++) expect(terms[i]!.epoch).toBeGreaterThan(terms[i - 1]!.epoch);
    const afterRestart = terms.filter((t) => t.at > longKillAt);
    expect(afterRestart[0]!.epoch).toBeGreaterThan(epochBeforeKills);
    expect(new Set(terms.map((t) => t.candidate)).size).toBeGreaterThan(1);
  });
});
