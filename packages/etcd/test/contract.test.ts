import { EtcdLockService } from '@dlock/etcd';
import { ETCD_ENDPOINT } from '@dlock/test-utils';
import { lockServiceContract } from '@dlock/testing/contract';
import { Etcd3 } from 'etcd3';
import { afterAll } from 'vitest';

// etcd grants whole seconds and raises TTLs under 2 s to 2 s, so the suite runs at 2 s. Its lessor looks for
// expired leases every 500 ms, hence the expiry slack.
const options = { ttlMs: 2_000, expirySlackMs: 1_000 };
const client = new Etcd3({ hosts: ETCD_ENDPOINT });
afterAll(() => client.close());

lockServiceContract(
  'EtcdLockService (a lease per lock)',
  () => {
    const service = new EtcdLockService({ client, prefix: 'dlock-test/contract/' });
    return { service, close: () => service.close() };
  },
  options,
);

lockServiceContract(
  'EtcdLockService (session mode)',
  () => {
    const service = new EtcdLockService({ client, prefix: 'dlock-test/contract/', session: true });
    return { service, close: () => service.close() };
  },
  options,
);
