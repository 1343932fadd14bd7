import { startTcpProxy, type TcpProxy, ZK_CONNECT } from '@dlock/test-utils';
import { lockServiceContract } from '@dlock/testing/contract';
import { afterAll, beforeAll } from 'vitest';
import { ZooKeeperLockService } from '../src/index.js';

// A lease is the session: the suite's TTL is the session timeout, which the shared server (tickTime 2000) grants
// from 4 s up. The grant reports the negotiated timeout, and the suite waits for that.
const SESSION_TIMEOUT_MS = 4_000;

lockServiceContract(
  'ZooKeeperLockService (own client)',
  () => {
    const service = new ZooKeeperLockService({
      connectionString: ZK_CONNECT,
      sessionTimeoutMs: SESSION_TIMEOUT_MS,
      root: '/dlock-test/contract',
    });
    return { service, close: () => service.close() };
  },
  { ttlMs: SESSION_TIMEOUT_MS, expirySlackMs: 200, testTimeoutMs: 30_000 },
);

// The same contract through a fault proxy: tokens keep increasing across a dropped connection and a short outage.
let proxy: TcpProxy;
beforeAll(async () => {
  proxy = await startTcpProxy({ targetPort: Number(ZK_CONNECT.split(':')[1]) });
});
afterAll(() => proxy.close());

lockServiceContract(
  'ZooKeeperLockService (through a fault proxy)',
  () => {
    const service = new ZooKeeperLockService({
      connectionString: `127.0.0.1:${proxy.port}`,
      sessionTimeoutMs: SESSION_TIMEOUT_MS,
      root: '/dlock-test/contract',
    });
    return { service, close: () => service.close() };
  },
  {
    ttlMs: SESSION_TIMEOUT_MS,
    expirySlackMs: 200,
    testTimeoutMs: 30_000,
    faults: [
      { name: 'connection reset', inject: async () => proxy.resetAll(), recover: async () => {} },
      {
        name: 'server unreachable for 1 s',
        inject: async () => {
          proxy.mode = 'refuse';
          proxy.resetAll();
          await new Promise((resolve) => setTimeout(resolve, 1_000));
        },
        recover: async () => {
          proxy.mode = 'pass';
        },
      },
      {
        name: 'blackhole longer than the session timeout',
        inject: async () => {
          proxy.mode = 'blackhole';
          await new Promise((resolve) => setTimeout(resolve, SESSION_TIMEOUT_MS + 500));
        },
        recover: async () => {
          proxy.mode = 'pass';
        },
      },
    ],
  },
);
