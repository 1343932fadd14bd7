import { startTcpProxy, type TcpProxy, ZK_CONNECT } from '@dlock/test-utils';
import { type ContractSubject, lockServiceContract } from '@dlock/testing/contract';
import { afterAll, beforeAll } from 'vitest';
import { ZooKeeperLockService } from '../src/index.js';
import { waitFor } from './helpers.js';

// A lease is the session: the suite's TTL is the session timeout, which the shared server (tickTime 2000) grants
// from 4 s up. The grant reports the negotiated timeout, and the suite waits for that.
const SESSION_TIMEOUT_MS = 4_000;

/** Waiters queue on the server, in arrival order; `close()` is the service's own. */
const queueing = {
  fifo: true,
  closeService: async (subject: ContractSubject) => {
    if (!(subject.service instanceof ZooKeeperLockService)) throw new Error('not a ZooKeeperLockService');
    await subject.service.close();
  },
} as const;

lockServiceContract(
  'ZooKeeperLockService (own client)',
  () => {
    const service = new ZooKeeperLockService({
      connectionString: ZK_CONNECT,
      sessionTimeoutMs: SESSION_TIMEOUT_MS,
      keyPrefix: '/dlock-test/contract',
    });
    return { service, close: () => service.close() };
  },
  { ttlMs: SESSION_TIMEOUT_MS, expirySlackMs: 200, testTimeoutMs: 30_000, ...queueing },
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
      keyPrefix: '/dlock-test/contract',
    });
    return { service, close: () => service.close() };
  },
  {
    ttlMs: SESSION_TIMEOUT_MS,
    expirySlackMs: 200,
    testTimeoutMs: 30_000,
    ...queueing,
    // The session ends as in session.test.ts: the network goes silent for longer than the session timeout, so the
    // server expires the session and the adapter gives it up (it never hears so from the client).
    endSession: async (subject) => {
      const { service } = subject;
      if (!(service instanceof ZooKeeperLockService)) throw new Error('not a ZooKeeperLockService');
      const ended = service.session?.id;
      proxy.mode = 'blackhole';
      try {
        if (!(await waitFor(() => service.session?.id !== ended, SESSION_TIMEOUT_MS + 5_000))) {
          throw new Error(`session ${ended} still in use after a blackhole past its timeout`);
        }
      } finally {
        proxy.mode = 'pass';
      }
    },
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
