import { EtcdLockService } from '@dlock/etcd';
import { ETCD_ENDPOINT } from '@dlock/test-utils';
import { type ContractSubject, electionContract, lockServiceContract } from '@dlock/testing/contract';
import { Etcd3 } from 'etcd3';
import { afterAll } from 'vitest';
import type { EtcdClientLike } from '../src/client-like.js';

// etcd grants whole seconds and raises TTLs under 2 s to 2 s, so the suite runs at 2 s. Its lessor looks for
// expired leases every 500 ms, hence the expiry slack.
const options = { ttlMs: 2_000, expirySlackMs: 1_000, fifo: true };
const client = new Etcd3({ hosts: ETCD_ENDPOINT });
afterAll(() => client.close());

/** The service closes itself: the subject's own close is its `close()` (idempotent, so it may run again after). */
const closeService = async (subject: ContractSubject): Promise<void> => {
  await subject.close?.();
};

/** The client, with the ids of the leases the service was granted kept, so a test can revoke them behind its back. */
function leaseRecordingClient(): { client: EtcdClientLike; granted: Set<string> } {
  const granted = new Set<string>();
  return {
    granted,
    client: {
      kv: client.kv,
      watchClient: client.watchClient,
      leaseClient: {
        leaseGrant: async (request, callOptions) => {
          const response = await client.leaseClient.leaseGrant(request, callOptions);
          granted.add(response.ID);
          return response;
        },
        leaseRevoke: (request, callOptions) => client.leaseClient.leaseRevoke(request, callOptions),
        leaseKeepAlive: (callOptions) => client.leaseClient.leaseKeepAlive(callOptions),
      },
    },
  };
}

lockServiceContract(
  'EtcdLockService (a lease per lock)',
  () => {
    const service = new EtcdLockService({ client, keyPrefix: 'dlock-test/contract/' });
    return { service, close: () => service.close() };
  },
  { ...options, closeService },
);

const sessions = new WeakMap<ContractSubject, Set<string>>();

lockServiceContract(
  'EtcdLockService (session mode)',
  () => {
    const recording = leaseRecordingClient();
    const service = new EtcdLockService({
      client: recording.client,
      keyPrefix: 'dlock-test/contract/',
      session: true,
    });
    const subject: ContractSubject = { service, close: () => service.close() };
    sessions.set(subject, recording.granted);
    return subject;
  },
  {
    ...options,
    closeService,
    // Revokes the session lease with another request than the service's own, as an operator or a leader's
    // expiry would end it.
    endSession: async (subject) => {
      const granted = [...(sessions.get(subject) ?? [])];
      if (granted.length === 0) throw new Error('the service holds no session lease');
      await Promise.all(granted.map((ID) => client.leaseClient.leaseRevoke({ ID }).catch(() => {})));
    },
  },
);

// Candidates queue like lock waiters, so they take over in campaign order.
for (const session of [false, true]) {
  electionContract(
    `EtcdLockService (${session ? 'session mode' : 'a lease per lock'})`,
    () => {
      const service = new EtcdLockService({ client, keyPrefix: 'dlock-test/election/', session });
      return { service, close: () => service.close() };
    },
    { ttlMs: 2_000, fifo: true },
  );
}
