import { uniqueName, ZK_CONNECT } from '@dlock/test-utils';
import { afterAll, describe, expect, it } from 'vitest';
import { lockParentPath, ZooKeeperLockService } from '../src/index.js';
import { connectedClient, statOf } from './helpers.js';

// The service is public API as well as core's driver: a name core would refuse is an InvalidArgumentError before
// any request, not a TransportError carrying the client's path check, nor a lock under a name no client can use.

const ROOT = `/dlock-test/service-inputs/${uniqueName('run')}`;
const service = new ZooKeeperLockService({ connectionString: ZK_CONNECT, keyPrefix: ROOT });
const signal = new AbortController().signal;

afterAll(async () => {
  await service.close();
});

describe('names a client would refuse are refused by the service too', () => {
  const names = {
    empty: '',
    'lone surrogate': 'a\ud800',
    'over 1,024 UTF-8 bytes': 'y'.repeat(1_025),
  };
  for (const [label, name] of Object.entries(names)) {
    it(`${label}: every call that takes a name rejects with INVALID_ARGUMENT, and no node is made`, async () => {
      const request = { name, ownerId: 'owner', ttlMs: 10_000, waitMs: 0, signal };
      const calls = [
        () => service.acquire(request),
        () => service.acquirePermit({ ...request, permits: 2 }),
        () => service.availablePermits(name, 2),
        () => service.inspect(name),
        () => service.inspectPermits(name, 2),
      ];
      for (const call of calls) await expect(call()).rejects.toMatchObject({ code: 'INVALID_ARGUMENT' });
      if (name.length > 0) {
        const raw = await connectedClient(ZK_CONNECT);
        try {
          expect(await statOf(raw, lockParentPath(ROOT, name))).toBeNull();
        } finally {
          raw.close();
        }
      }
    });
  }
});
