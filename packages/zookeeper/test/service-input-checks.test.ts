import { uniqueName, ZK_CONNECT } from '@dlock/test-utils';
import { afterAll, describe, expect, it } from 'vitest';
import { lockParentPath, ZooKeeperLockService } from '../src/index.js';
import { connectedClient, statOf } from './helpers.js';

// The contract suite (contract.test.ts) checks that names and metadata core would refuse are an InvalidArgumentError
// from the service called directly. What is ZooKeeper's own: no node is made for them (the lock's parent is created
// before its child), and metadata over 1 MB is refused by the service, not by the ZooKeeper client's size check as a
// TransportError.

const ROOT = `/dlock-test/service-input-checks/${uniqueName('run')}`;
const service = new ZooKeeperLockService({ connectionString: ZK_CONNECT, keyPrefix: ROOT });
const signal = new AbortController().signal;

afterAll(async () => {
  await service.close();
});

describe('refused input makes no node', () => {
  it('names core would refuse, and metadata up to over 1 MB', async () => {
    const named: string[] = [];
    for (const name of ['a\ud800', 'y'.repeat(1_025)]) {
      const request = { name, ownerId: 'owner', ttlMs: 10_000, waitMs: 0, signal };
      await expect.soft(service.acquire(request)).rejects.toMatchObject({ code: 'INVALID_ARGUMENT' });
      await expect
        .soft(service.acquirePermit({ ...request, permits: 2 }))
        .rejects.toMatchObject({ code: 'INVALID_ARGUMENT' });
      named.push(name);
    }
    for (const metadata of ['é'.repeat(513), 'a\ud800', 'm'.repeat(1_100_000)]) {
      const name = uniqueName('metadata');
      const request = { name, ownerId: 'owner', ttlMs: 10_000, waitMs: 0, signal, metadata };
      await expect.soft(service.acquire(request)).rejects.toMatchObject({
        code: 'INVALID_ARGUMENT',
        field: 'request.metadata',
      });
      await expect
        .soft(service.acquirePermit({ ...request, permits: 2 }))
        .rejects.toMatchObject({ code: 'INVALID_ARGUMENT', field: 'request.metadata' });
      named.push(name);
    }
    const raw = await connectedClient(ZK_CONNECT);
    try {
      for (const name of named) expect.soft(await statOf(raw, lockParentPath(ROOT, name))).toBeNull();
    } finally {
      raw.close();
    }
  });
});
