import { rejection, startTcpProxy, uniqueName, ZK_CONNECT } from '@dlock/test-utils';
import { afterEach, beforeAll, describe, expect, it } from 'vitest';
import {
  type ZooKeeperClientLike,
  ZooKeeperLockService,
  ZooKeeperSessionError,
  type ZooKeeperTransactionLike,
} from '../src/index.js';
import { semaphorePath } from '../src/keys.js';
import { childrenOf, connectedClient, waitFor } from './helpers.js';

// A take of a slot that the server committed but that never became a grant: the answer to the multi or to the
// read of the token never came, or came after the session was given up. Each time the slot node must not outlive
// the attempt, held by nobody; and a session that ended must never be granted a permit. The shared server's
// sessions last at least 4 s, so the tests with a given-up session take about 10 s each.
const ROOT = '/dlock-test/semaphore-unanswered';
const SESSION_MS = 4_000;
let raw: ZooKeeperClientLike;
const cleanups: (() => unknown)[] = [];

beforeAll(async () => {
  raw = await connectedClient(ZK_CONNECT);
  return () => raw.close();
});

afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

function onClose<T extends { close(): unknown }>(item: T): T {
  cleanups.push(() => item.close());
  return item;
}

/** A client passed through a `Proxy` whose `exists`, `getData`, `remove` or `transaction` the test replaces. */
function wrapped(
  inner: ZooKeeperClientLike,
  replace: {
    exists?: ZooKeeperClientLike['exists'];
    getData?: ZooKeeperClientLike['getData'];
    remove?: ZooKeeperClientLike['remove'];
    transaction?: () => ZooKeeperTransactionLike;
  },
): ZooKeeperClientLike {
  return new Proxy(inner, {
    get(target, property) {
      if (property === 'exists' && replace.exists) return replace.exists;
      if (property === 'getData' && replace.getData) return replace.getData;
      if (property === 'remove' && replace.remove) return replace.remove;
      if (property === 'transaction' && replace.transaction) return replace.transaction;
      const value: unknown = Reflect.get(target, property);
      return typeof value === 'function' ? value.bind(target) : value;
    },
  });
}

/** One no-wait attempt at a permit of a 2-permit semaphore. */
function acquireOnce(service: ZooKeeperLockService, name: string) {
  const signal = new AbortController().signal;
  return service.acquirePermit({ name, ownerId: 'test', ttlMs: SESSION_MS, waitMs: 0, signal, permits: 2 });
}

/** The first take of a service checks the reply's zxid against a read of the node; later ones trust it. */
async function warmUp(service: ZooKeeperLockService, name: string): Promise<void> {
  const warm = await acquireOnce(service, name);
  if (!warm.acquired) throw new Error('the warm-up take failed');
  await service.release({ name, ownerId: 'test', ...warm.grant });
}

const slotsOf = (name: string) => childrenOf(raw, `${semaphorePath(ROOT, name)}/slots-2`);

describe('a take the server committed but that never became a grant', () => {
  it('a take whose token read goes unanswered leaves no slot node behind', { timeout: 20_000 }, async () => {
    const inner = onClose(await connectedClient(ZK_CONNECT, 10_000));
    const stall = { armed: true };
    const client = wrapped(inner, {
      exists: ((path: string, ...rest: unknown[]) => {
        // A reply that never comes: the request's bound turns it into a TransportError.
        if (stall.armed && /\/slots-2\/\d+$/.test(path)) return;
        (inner.exists as (...args: unknown[]) => void)(path, ...rest);
      }) as ZooKeeperClientLike['exists'],
    });
    // The first take of a service reads the slot's czxid with `exists` after the multi committed.
    const service = onClose(new ZooKeeperLockService({ client, keyPrefix: ROOT, requestTimeoutMs: 500 }));
    const name = uniqueName('tokenread');
    expect(await rejection(acquireOnce(service, name))).toMatchObject({ code: 'TRANSPORT' });
    stall.armed = false;
    // The leave runs as the call fails, or in the background right after.
    expect(await waitFor(async () => (await slotsOf(name)).length === 0, 3_000, 50)).toBe(true);
    expect(await service.availablePermits(name, 2)).toBe(2);
  });

  it('a take unanswered until the session was given up: its slot node is deleted once the client is back under that session', {
    timeout: 40_000,
  }, async () => {
    const proxy = onClose(await startTcpProxy({ targetPort: Number(ZK_CONNECT.split(':')[1]) }));
    const inner = onClose(await connectedClient(`127.0.0.1:${proxy.port}`, SESSION_MS));
    const fault = { armed: false };
    const client = wrapped(inner, {
      transaction: () => {
        const transaction = inner.transaction();
        const commit = transaction.commit.bind(transaction);
        // From the commit on, every reply is swallowed: the server commits the take, the client never hears.
        transaction.commit = (callback) => {
          if (fault.armed) proxy.dropReplies(true);
          commit(callback);
        };
        return transaction;
      },
    });
    const service = onClose(new ZooKeeperLockService({ client, keyPrefix: ROOT, requestTimeoutMs: 800 }));
    const name = uniqueName('givenup');
    await warmUp(service, name);
    const sessionId = service.session?.id;
    fault.armed = true;
    expect(await rejection(acquireOnce(service, name))).toMatchObject({ code: 'TRANSPORT' });
    fault.armed = false;
    expect(await slotsOf(name)).toEqual(['0']); // committed by the server, unknown to the client
    expect(await waitFor(() => service.session === undefined, 12_000, 50)).toBe(true);
    // The server kept the session (the client's handshakes reach it): so it keeps the slot node.
    expect(await slotsOf(name)).toEqual(['0']);
    proxy.dropReplies(false);
    proxy.resetAll();
    expect(
      await waitFor(
        () => inner.getState().code === 3 && inner.getSessionId().toString('hex') === sessionId,
        10_000,
        50,
      ),
    ).toBe(true);
    expect(await waitFor(async () => (await slotsOf(name)).length === 0, 5_000, 50)).toBe(true);
  });

  it('a take whose success arrives after the session was given up is no grant; its slot node is deleted later', {
    timeout: 40_000,
  }, async () => {
    const proxy = onClose(await startTcpProxy({ targetPort: Number(ZK_CONNECT.split(':')[1]) }));
    const inner = onClose(await connectedClient(`127.0.0.1:${proxy.port}`, SESSION_MS));
    const fault = { armed: false };
    let deliver: (() => void) | undefined;
    const client = wrapped(inner, {
      transaction: () => {
        const transaction = inner.transaction();
        const commit = transaction.commit.bind(transaction);
        // The take's reply is kept from the adapter, and every reply after it swallowed, until the test hands
        // it over: the adapter hears nothing for a session timeout and gives the session up meanwhile.
        transaction.commit = (callback) => {
          if (!fault.armed) return commit(callback);
          commit((...reply) => {
            proxy.dropReplies(true);
            deliver = () => callback(...reply);
          });
        };
        return transaction;
      },
    });
    // Requests outlive the session, so that the take is still waiting for its answer when the session is given up.
    const service = onClose(
      new ZooKeeperLockService({ client, keyPrefix: ROOT, requestTimeoutMs: 4 * SESSION_MS }),
    );
    const name = uniqueName('late');
    await warmUp(service, name); // from now on the token comes from the reply: no read after the take
    const sessionId = service.session?.id;
    fault.armed = true;
    const taking = rejection(acquireOnce(service, name));
    expect(await waitFor(() => deliver !== undefined, 5_000)).toBe(true);
    fault.armed = false;
    expect(await waitFor(() => service.session === undefined, 12_000, 50)).toBe(true);
    deliver?.(); // the take succeeded, as far as the adapter can tell, on a session it has given up
    expect(await taking).toBeInstanceOf(ZooKeeperSessionError);
    expect(await slotsOf(name)).toEqual(['0']); // the server kept the session
    proxy.dropReplies(false);
    proxy.resetAll();
    expect(
      await waitFor(
        () => inner.getState().code === 3 && inner.getSessionId().toString('hex') === sessionId,
        10_000,
        50,
      ),
    ).toBe(true);
    expect(await waitFor(async () => (await slotsOf(name)).length === 0, 5_000, 50)).toBe(true);
  });
});

// A caller's client keeps its session after close(), and with it any ephemeral slot node the service still meant to
// delete: close() must hand such deletes to the leftovers, which it sweeps with that client before it returns.
describe('closing a service on a passed-in client while a slot delete is still pending', () => {
  /** A service on a caller's client whose calls `faults` may change while `fault.armed`. */
  async function serviceOnCallersClient(
    faults: (inner: ZooKeeperClientLike, fault: { armed: boolean }) => Partial<ZooKeeperClientLike>,
  ): Promise<{ inner: ZooKeeperClientLike; fault: { armed: boolean }; service: ZooKeeperLockService }> {
    const inner = onClose(await connectedClient(ZK_CONNECT, 10_000));
    const fault = { armed: false };
    const client = wrapped(inner, faults(inner, fault));
    const service = new ZooKeeperLockService({ client, keyPrefix: ROOT, requestTimeoutMs: 500 });
    cleanups.push(() => service.close());
    return { inner, fault, service };
  }

  /**
   * Closes `service` while its slot delete is pending, the server answering again, and checks what the caller's
   * client, whose session lives on, is left with: no slot node of `name`, both permits free to another service.
   */
  async function closeAndCheckFreed(
    setup: { inner: ZooKeeperClientLike; fault: { armed: boolean }; service: ZooKeeperLockService },
    name: string,
  ): Promise<ZooKeeperLockService> {
    setup.fault.armed = false;
    await setup.service.close();
    expect(setup.inner.getState().code).toBe(3);
    expect(await slotsOf(name)).toEqual([]);
    const other = onClose(new ZooKeeperLockService({ connectionString: ZK_CONNECT, keyPrefix: ROOT }));
    expect(await other.availablePermits(name, 2)).toBe(2);
    return other;
  }

  it('a take still unsure when a service on a passed-in client is closed: close() deletes its slot node', {
    timeout: 20_000,
  }, async () => {
    const setup = await serviceOnCallersClient((inner, fault) => ({
      transaction: () => {
        const transaction = inner.transaction();
        const commit = transaction.commit.bind(transaction);
        // The server commits the take; its answer never reaches the adapter.
        transaction.commit = (callback) => (fault.armed ? commit(() => {}) : commit(callback));
        return transaction;
      },
      getData: ((path: string, ...rest: unknown[]) => {
        // Nor does any read of a slot node: the claim's leave keeps failing, retried in the background.
        if (fault.armed && /\/slots-2\/\d+$/.test(path)) return;
        (inner.getData as (...args: unknown[]) => void)(path, ...rest);
      }) as ZooKeeperClientLike['getData'],
    }));
    const name = uniqueName('closedunsure');
    await warmUp(setup.service, name);
    setup.fault.armed = true;
    expect(await rejection(acquireOnce(setup.service, name))).toMatchObject({ code: 'TRANSPORT' });
    expect(await slotsOf(name)).toEqual(['0']); // committed by the server, unknown to the client
    // The leave's first try is still waiting for its read. Without the hand-over, the caller's client would keep the
    // slot node with its session: a permit gone for good.
    const other = await closeAndCheckFreed(setup, name);
    expect((await acquireOnce(other, name)).acquired).toBe(true);
    expect((await acquireOnce(other, name)).acquired).toBe(true);
  });

  it('a permit whose release went unanswered when the service is closed: close() deletes its slot node', {
    timeout: 20_000,
  }, async () => {
    const setup = await serviceOnCallersClient((inner, fault) => ({
      remove: ((path: string, ...rest: unknown[]) => {
        // A delete of a slot node that never reaches the server: the release fails, retried in the background.
        if (fault.armed && /\/slots-2\/\d+$/.test(path)) return;
        (inner.remove as (...args: unknown[]) => void)(path, ...rest);
      }) as ZooKeeperClientLike['remove'],
    }));
    const name = uniqueName('closedrelease');
    const taken = await acquireOnce(setup.service, name);
    if (!taken.acquired) throw new Error('the take failed');
    setup.fault.armed = true;
    expect(await rejection(setup.service.release({ name, ownerId: 'test', ...taken.grant }))).toMatchObject({
      code: 'TRANSPORT',
    });
    expect(await slotsOf(name)).toEqual(['0']);
    // The background delete's first retry is still waiting for its answer.
    await closeAndCheckFreed(setup, name);
  });
});
