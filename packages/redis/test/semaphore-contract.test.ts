import { REDIS_URL } from '@dlock/test-utils';
import { type ContractSubject, semaphoreContract } from '@dlock/testing/contract';
import { type RedisClientLike, RedisLockService } from '../src/index.js';
import { FAMILY_PAIR } from './clients.js';

// The semaphore contract against the shared server, with a fresh client and service per test, on one node-redis and
// one ioredis family (the cluster runs it in semaphore-cluster.test.ts). TTL 1 s: the expiry cases wait for it.
const closeService = async (subject: ContractSubject): Promise<void> => {
  await (subject.service as RedisLockService).close();
};
for (const family of FAMILY_PAIR) {
  semaphoreContract(
    `RedisLockService (${family.label})`,
    async () => {
      const connected = await family.connect(REDIS_URL);
      const service = new RedisLockService({
        client: connected.client as RedisClientLike,
        keyPrefix: 'dlock-sem-test:',
        fenceRetentionMs: 60_000,
      });
      return {
        service,
        close: async () => {
          await service.close();
          await connected.close();
        },
      };
    },
    { ttlMs: 1_000, expirySlackMs: 300, closeService },
  );
}
