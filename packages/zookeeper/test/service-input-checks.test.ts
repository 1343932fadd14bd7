import { uniqueName, ZK_CONNECT } from '@dlock/test-utils';
import { afterAll, describe, expect, it } from 'vitest';
import { lockParentPath, ZooKeeperLockService } from '../src/index.js';
import { connectedClient, statOf, zookeeper } from './helpers.js';

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

describe('a client the service cannot use', () => {
  it('is refused at construction when it has no getACL, naming what it lacks', async () => {
    // A real node-zookeeper-client client, never connected: construction does no I/O either way.
    const real = zookeeper.createClient(ZK_CONNECT, { sessionTimeout: 10_000 });
    const withoutAcl = new Proxy(real, {
      get: (target, property) => (property === 'getACL' ? undefined : Reflect.get(target, property)),
    });
    // Accepted, it read no parent's ACL: a try queued the old racy way, and idle parents with another ACL were
    // deleted as if open.
    const refused = (() => {
      try {
        new ZooKeeperLockService({ client: withoutAcl, keyPrefix: ROOT });
      } catch (error) {
        return error;
      }
      return undefined;
    })();
    expect(refused).toMatchObject({ code: 'INVALID_ARGUMENT', field: 'options.client' });
    expect(String((refused as Error | undefined)?.message)).toContain('lacks getACL');
    expect(real.getState().code).not.toBe(3);
    // The same client with its getACL is accepted.
    const accepted = new ZooKeeperLockService({ client: real, keyPrefix: ROOT });
    expect(accepted).toBeInstanceOf(ZooKeeperLockService);
    // Never connected, the client has no socket to close (node-zookeeper-client's close() would throw).
    await accepted.close();
  });
});

describe('a client or clock that cannot be read', () => {
  it('is refused at construction with InvalidArgumentError, not the error its getter throws', () => {
    // A real node-zookeeper-client client, never connected: construction does no I/O.
    const real = zookeeper.createClient(ZK_CONNECT, { sessionTimeout: 10_000 });
    const refusal = (options: object): unknown => {
      try {
        new ZooKeeperLockService(options as ConstructorParameters<typeof ZooKeeperLockService>[0]);
      } catch (error) {
        return error;
      }
      return undefined;
    };
    const throwingGetACL = new Proxy(real, {
      get: (target, property) => {
        if (property === 'getACL') throw new Error('get trap');
        return Reflect.get(target, property);
      },
    });
    const revoked = Proxy.revocable(real, {});
    revoked.revoke();
    // Not an object: described by its type, never by its own toString (which may throw).
    const callable = Object.assign(() => {}, {
      toString: (): string => {
        throw new Error('toString');
      },
    });
    for (const client of [throwingGetACL, revoked.proxy, callable]) {
      expect.soft(refusal({ client, keyPrefix: ROOT })).toMatchObject({
        code: 'INVALID_ARGUMENT',
        field: 'options.client',
      });
    }
    const throwingClock = new Proxy(
      {},
      {
        get: () => {
          throw new Error('clock trap');
        },
      },
    );
    expect
      .soft(refusal({ client: real, keyPrefix: ROOT, clock: throwingClock }))
      .toMatchObject({ code: 'INVALID_ARGUMENT', field: 'options.clock' });
    expect(String((refusal({ client: throwingGetACL, keyPrefix: ROOT }) as Error).message)).toContain(
      'lacks getACL',
    );
  });
});
