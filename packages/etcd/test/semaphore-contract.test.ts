import { EtcdLockService } from '@dlock/etcd';
import { ETCD_ENDPOINT } from '@dlock/test-utils';
import { type ContractSubject, semaphoreContract } from '@dlock/testing/contract';
import { Etcd3 } from 'etcd3';
import { afterAll } from 'vitest';

const client = new Etcd3({ hosts: ETCD_ENDPOINT });
afterAll(() => client.close());

// etcd's leases are whole seconds, at least 2 s; its lessor looks for expired leases every 500 ms.
for (const session of [false, true]) {
  semaphoreContract(
    `EtcdLockService (${session ? 'session mode' : 'a lease per lock'})`,
    () => {
      const service = new EtcdLockService({ client, keyPrefix: 'dlock-test/semaphore-contract/', session });
      return { service, close: () => service.close() };
    },
    {
      ttlMs: 2_000,
      expirySlackMs: 1_000,
      closeService: async (subject: ContractSubject) => {
        await subject.close?.();
      },
    },
  );
}
