import { ZK_CONNECT } from '@dlock/test-utils';
import { type ContractSubject, semaphoreContract } from '@dlock/testing/contract';
import { ZooKeeperLockService } from '../src/index.js';

// A permit's lease is the session: the suite's TTL is the session timeout, which the shared server (tickTime 2000)
// grants from 4 s up, as in the lock contract.
const SESSION_TIMEOUT_MS = 4_000;

semaphoreContract(
  'ZooKeeperLockService',
  () => {
    const service = new ZooKeeperLockService({
      connectionString: ZK_CONNECT,
      sessionTimeoutMs: SESSION_TIMEOUT_MS,
      keyPrefix: '/dlock-test/semaphore-contract',
    });
    return { service, close: () => service.close() };
  },
  {
    ttlMs: SESSION_TIMEOUT_MS,
    expirySlackMs: 300,
    testTimeoutMs: 30_000,
    closeService: async (subject: ContractSubject) => {
      if (!(subject.service instanceof ZooKeeperLockService)) throw new Error('not a ZooKeeperLockService');
      await subject.service.close();
    },
  },
);
