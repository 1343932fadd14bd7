import { ZK_CONNECT } from '@dlock/test-utils';
import { inspectContract } from '@dlock/testing/contract';
import { ZooKeeperLockService } from '../src/index.js';

// A lease is its session: the shared server (tickTime 2000) grants sessions from 4 s up. A session's remaining time
// is not visible to other clients, so no holder reports expiresInMs; both kinds of waiter are queue nodes.
const SESSION_TIMEOUT_MS = 4_000;

inspectContract(
  'ZooKeeperLockService',
  () => {
    const service = new ZooKeeperLockService({
      connectionString: ZK_CONNECT,
      sessionTimeoutMs: SESSION_TIMEOUT_MS,
      keyPrefix: '/dlock-test/inspect',
    });
    return { service, close: () => service.close() };
  },
  { ttlMs: SESSION_TIMEOUT_MS, lockWaiters: true, expiresInMs: false },
);
