import { startZooKeeperServer, type ZooKeeperServer } from '@dlock/test-utils';
import { type ContractSubject, semaphoreContract } from '@dlock/testing/contract';
import { afterAll, beforeAll } from 'vitest';
import { type ZooKeeperClientLike, ZooKeeperLockService } from '../src/index.js';
import { connectedClient } from './helpers.js';

// A permit's lease is the session, so the suite's TTL is the session timeout. A private server (tickTime 200)
// grants 2 s sessions, which halves the suite's waits against the shared server's 4 s minimum.
const SESSION_TIMEOUT_MS = 2_000;
const ROOT = '/dlock-test/semaphore-contract';

let server: ZooKeeperServer;
beforeAll(async () => {
  server = await startZooKeeperServer({ tickTimeMs: 200 });
}, 60_000);
afterAll(() => server?.stop());

const options = {
  ttlMs: SESSION_TIMEOUT_MS,
  expirySlackMs: 300,
  testTimeoutMs: 30_000,
  closeService: async (subject: ContractSubject) => {
    if (!(subject.service instanceof ZooKeeperLockService)) throw new Error('not a ZooKeeperLockService');
    await subject.service.close();
  },
};

semaphoreContract(
  'ZooKeeperLockService (own client)',
  () => {
    const service = new ZooKeeperLockService({
      connectionString: server.connectString,
      sessionTimeoutMs: SESSION_TIMEOUT_MS,
      keyPrefix: ROOT,
    });
    return { service, close: () => service.close() };
  },
  options,
);

// A client the caller made and keeps: the service never closes it, and deletes its own nodes on close().
semaphoreContract(
  'ZooKeeperLockService (client passed in)',
  async () => {
    const client: ZooKeeperClientLike = await connectedClient(server.connectString, SESSION_TIMEOUT_MS);
    const service = new ZooKeeperLockService({ client, keyPrefix: ROOT });
    return {
      service,
      close: async () => {
        await service.close();
        client.close();
      },
    };
  },
  options,
);
