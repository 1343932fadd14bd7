import { EtcdLockService } from '@dlock/etcd';
import { ETCD_ENDPOINT } from '@dlock/test-utils';
import { inspectContract } from '@dlock/testing/contract';
import { Etcd3 } from 'etcd3';
import { afterAll } from 'vitest';

const client = new Etcd3({ hosts: ETCD_ENDPOINT });
afterAll(() => client.close());

// etcd's leases are whole seconds, at least 2 s. It tells a lease's time left only in whole seconds, so no holder
// reports expiresInMs; a lock taken with metadata stores the metadata alone (Go's Election layout), so no owner id.
for (const session of [false, true]) {
  inspectContract(
    `EtcdLockService (${session ? 'session mode' : 'a lease per lock'})`,
    () => {
      const service = new EtcdLockService({ client, keyPrefix: 'dlock-test/inspect/', session });
      return { service, close: () => service.close() };
    },
    { ttlMs: 2_000, lockWaiters: true, expiresInMs: false, ownerIdWithMetadata: false },
  );
}
