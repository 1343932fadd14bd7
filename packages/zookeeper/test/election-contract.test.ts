import { ZK_CONNECT } from '@dlock/test-utils';
import { electionContract } from '@dlock/testing/contract';
import { ZooKeeperLockService } from '../src/index.js';

// A leader's lease is its session: the shared server (tickTime 2000) grants sessions from 4 s up.
const SESSION_TIMEOUT_MS = 4_000;

electionContract(
  'ZooKeeperLockService',
  () => {
    const service = new ZooKeeperLockService({
      connectionString: ZK_CONNECT,
      sessionTimeoutMs: SESSION_TIMEOUT_MS,
      keyPrefix: '/dlock-test/election',
    });
    return { service, close: () => service.close() };
  },
  { ttlMs: SESSION_TIMEOUT_MS, fifo: true },
);
