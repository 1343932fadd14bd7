import { REDIS_URL } from '@dlock/test-utils';
import { semaphoreContract } from '@dlock/testing/contract';
import { FAMILY_PAIR } from './clients.js';
import { closeService, subjectOn } from './semaphore-cases.js';

// The semaphore contract against the shared server, with a fresh client and service per test, on one node-redis and
// one ioredis family (the cluster runs it in semaphore-cluster.test.ts). TTL 1 s: the expiry cases wait for it.
for (const family of FAMILY_PAIR) {
  semaphoreContract(
    `RedisLockService (${family.label})`,
    async () => subjectOn(await family.connect(REDIS_URL), 'dlock-sem-test:'),
    { ttlMs: 1_000, expirySlackMs: 300, closeService },
  );
}
