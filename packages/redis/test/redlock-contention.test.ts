import { LockClient } from '@dlock/core';
import { type RedisServer, startRedisServer, startTcpProxy, type TcpProxy } from '@dlock/test-utils';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { RedlockService } from '../src/redlock/index.js';
import { commandCalls, connect, disconnect, type Redis, sleep } from './helpers.js';

/*
 * Contention on real redis-server nodes that are at different distances from the contenders, as when clients sit
 * next to different nodes: contender c reaches node i with the one-way delay LATENCIES[(i + c) % 3]. Contenders
 * that claim at the same moment each win their nearest node, and no one a majority.
 */

const LATENCIES_MS = [0, 4, 8] as const;
const CONTENDERS = 4;
const RUN_MS = 8_000;
const HOLD_MS = 50;

const servers: RedisServer[] = [];
const admins: Redis[] = [];

beforeAll(async () => {
  servers.push(...(await Promise.all([0, 1, 2].map(() => startRedisServer()))));
  admins.push(...(await Promise.all(servers.map((s) => connect(s.url)))));
}, 30_000);

afterAll(async () => {
  await Promise.all(admins.map((a) => disconnect(a)));
  await Promise.all(servers.map((s) => s.process.stop()));
});

/** Script calls on all nodes since the last CONFIG RESETSTAT, clean-ups and renewals included. */
async function scriptCalls(): Promise<number> {
  let total = 0;
  for (const admin of admins) {
    const calls = await commandCalls(admin);
    total += (calls['evalsha'] ?? 0) + (calls['eval'] ?? 0);
  }
  return total;
}

describe('Redlock under contention with node-latency skew', () => {
  it('keeps granting: contenders woken together do not split the nodes between them again and again', async () => {
    const proxies: TcpProxy[] = [];
    const contenders: { locks: LockClient; service: RedlockService; clients: Redis[] }[] = [];
    try {
      for (let c = 0; c < CONTENDERS; c++) {
        const near = await Promise.all(
          servers.map((s, i) =>
            startTcpProxy({ targetPort: s.port, delayMs: LATENCIES_MS[(i + c) % LATENCIES_MS.length] ?? 0 }),
          ),
        );
        proxies.push(...near);
        const clients = await Promise.all(near.map((p) => connect(`redis://127.0.0.1:${p.port}`)));
        const service = new RedlockService({ clients });
        contenders.push({ locks: new LockClient(service), service, clients });
      }
      const name = `contention:${process.pid}`;
      for (const admin of admins) await admin.sendCommand(['CONFIG', 'RESETSTAT']);
      const stop = new AbortController();
      const timer = setTimeout(() => stop.abort(new Error('time is up')), RUN_MS);
      let grants = 0;
      await Promise.all(
        contenders.map(async ({ locks }) => {
          while (!stop.signal.aborted) {
            try {
              const handle = await locks.acquire(name, { ttlMs: 2_000, waitMs: RUN_MS, signal: stop.signal });
              grants += 1;
              await sleep(HOLD_MS);
              await handle.release();
            } catch {
              // Time is up (or a transient failure: try again while there is time).
            }
          }
        }),
      );
      clearTimeout(timer);
      const scripts = await scriptCalls();
      // Before wake-ups were jittered and split claims' clean-ups went silent: 0 grants and ~7,900 scripts here.
      expect(grants, `${grants} grants, ${scripts} script calls`).toBeGreaterThanOrEqual(40);
      expect(scripts / grants, `${grants} grants, ${scripts} script calls`).toBeLessThanOrEqual(100);
    } finally {
      for (const { locks, service, clients } of contenders) {
        await locks.close();
        await service.close();
        for (const client of clients) await disconnect(client);
      }
      await Promise.all(proxies.map((p) => p.close()));
    }
  }, 30_000);
});
