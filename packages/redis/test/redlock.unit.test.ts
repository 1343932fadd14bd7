import { InvalidArgumentError, TransportError } from '@dlock/core';
import { FakeClock } from '@dlock/testing';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import type { RedisConnection, RedisSubscription } from '../src/clients/connection.js';
import { hashTagOf, redlockKeys } from '../src/keys.js';
import { RedlockService, type RedlockServiceOptions } from '../src/redlock/index.js';
import { NodeNotConnectedError, type NodeRelease } from '../src/redlock/node.js';
import { QuorumLock } from '../src/redlock/redlock-protocol.js';
import { RedlockReleaseWatch } from '../src/redlock/redlock-release-watch.js';
import { type Outcome, RoundDeadlines, runRound } from '../src/redlock/round.js';
import { ModelNode, World } from './redlock-model.js';

/**
 * A node-redis client as it looks while it reconnects (open, not ready): accepted, and since the service sends
 * nothing to a client that is not ready, these tests touch no network.
 */
const fresh = () => {
  const fail = async (): Promise<never> => {
    throw new Error('this test sends nothing');
  };
  const client = {
    isOpen: true,
    isReady: false,
    sendCommand: fail,
    duplicate: () => client,
    connect: fail,
    subscribe: fail,
    unsubscribe: fail,
    on: () => client,
    off: () => client,
    close: fail,
    destroy: () => {},
  };
  return client;
};

describe('RedlockService options', () => {
  it('needs a majority of N: floor(N / 2) + 1', () => {
    const quorums = [1, 2, 3, 4, 5, 6, 7].map(
      (n) => new RedlockService({ clients: Array.from({ length: n }, fresh) }).quorum,
    );
    expect(quorums).toEqual([1, 2, 2, 3, 3, 4, 4]);
  });

  it('rejects bad options before any network call', () => {
    const client = fresh();
    const bad: unknown[] = [
      undefined,
      {},
      { clients: [] },
      { clients: [{}] },
      { clients: [client, client] }, // one node counted twice would fake a majority
      { clients: [fresh()], keyPrefix: 'a{b' },
      { clients: [fresh()], nodeTimeoutMs: 0 },
      { clients: [fresh()], nodeTimeoutMs: 1.5 },
      { clients: [fresh()], fenceRetentionMs: 10 },
    ];
    for (const options of bad) {
      expect(() => new RedlockService(options as RedlockServiceOptions)).toThrow(InvalidArgumentError);
    }
  });

  it('refuses misspelt option keys, naming the key and the option probably meant', () => {
    const clients = [fresh()];
    const cases: [Record<string, unknown>, string, string][] = [
      [{ clients, prefix: 'mine:' }, 'options.prefix', 'keyPrefix'],
      [{ clients, nodeTimeout: 100 }, 'options.nodeTimeout', 'nodeTimeoutMs'],
      [{ clients, fenceRetentionMS: 60_000 }, 'options.fenceRetentionMS', 'fenceRetentionMs'],
      [{ client: clients[0] }, 'options.client', 'clients'],
    ];
    for (const [options, field, meant] of cases) {
      let error: unknown;
      try {
        new RedlockService(options as never);
      } catch (e) {
        error = e;
      }
      expect(error, field).toBeInstanceOf(InvalidArgumentError);
      expect((error as InvalidArgumentError).field).toBe(field);
      expect((error as Error).message).toContain(`did you mean "${meant}"`);
    }
    // The clock is checked too: a Redlock service given a broken one would fail inside its timers instead.
    expect(() => new RedlockService({ clients, clock: {} as never })).toThrow(InvalidArgumentError);
  });

  it('takes requestTimeoutMs, and nodeTimeoutMs as its deprecated name, but not both', () => {
    const clients = [fresh()];
    expect(() => new RedlockService({ clients, requestTimeoutMs: 100 })).not.toThrow();
    expect(() => new RedlockService({ clients, nodeTimeoutMs: 100 })).not.toThrow();
    for (const bad of [0, 1.5, 2 ** 31]) {
      expect(() => new RedlockService({ clients, requestTimeoutMs: bad }), String(bad)).toThrow(
        InvalidArgumentError,
      );
    }
    let error: unknown;
    try {
      new RedlockService({ clients, requestTimeoutMs: 100, nodeTimeoutMs: 100 });
    } catch (e) {
      error = e;
    }
    expect(error).toBeInstanceOf(InvalidArgumentError);
    expect((error as InvalidArgumentError).field).toBe('options.nodeTimeoutMs');
  });

  it('rejects every call after close() with ClientClosedError, before touching the nodes', async () => {
    const service = new RedlockService({ clients: [fresh()] });
    await service.close();
    const signal = new AbortController().signal;
    const lease = { name: 'a', ownerId: 'x', ownershipToken: 't', fencingToken: 1n };
    const closed = { code: 'CLIENT_CLOSED' };
    await expect(
      service.acquire({ name: 'a', ownerId: 'x', ttlMs: 100, waitMs: 0, signal }),
    ).rejects.toMatchObject(closed);
    await expect(service.renew({ lease, ttlMs: 100 })).rejects.toMatchObject(closed);
    await expect(service.renewMany([{ lease, ttlMs: 100 }])).rejects.toMatchObject(closed);
    await expect(service.release(lease)).rejects.toMatchObject(closed);
  });

  it('rejects bad requests without touching the nodes', async () => {
    const service = new RedlockService({ clients: [fresh()] });
    const signal = new AbortController().signal;
    await expect(service.acquire({ name: '', ownerId: 'x', ttlMs: 100, waitMs: 0, signal })).rejects.toThrow(
      InvalidArgumentError,
    );
    await expect(service.acquire({ name: 'a', ownerId: 'x', ttlMs: 0.5, waitMs: 0, signal })).rejects.toThrow(
      InvalidArgumentError,
    );
    const lease = { name: 'a', ownerId: 'x', ownershipToken: '', fencingToken: 1n };
    await expect(service.release(lease)).rejects.toThrow(InvalidArgumentError);
    expect(() => service.watch('a', 'nope' as unknown as () => void)).toThrow(InvalidArgumentError);
  });
});

describe('Redlock keys', () => {
  it('maps distinct names to distinct keys that share one hash tag', () => {
    fc.assert(
      fc.property(
        fc.string({ unit: 'grapheme', minLength: 1, maxLength: 40 }),
        fc.string({ minLength: 1, maxLength: 40 }),
        (a, b) => {
          fc.pre(a !== b);
          const ka = redlockKeys('p:', a);
          const kb = redlockKeys('p:', b);
          expect(ka.lock).not.toBe(kb.lock);
          expect(ka.fence).not.toBe(kb.fence);
          expect(ka.released).not.toBe(kb.released);
          expect(hashTagOf(ka.fence)).toBe(hashTagOf(ka.lock));
          expect(hashTagOf(ka.released)).toBe(hashTagOf(ka.lock));
        },
      ),
    );
  });
});

describe('runRound', () => {
  const never = (): Promise<never> => new Promise(() => {});

  it('ends at its deadline with unanswered nodes pending, and aborts their signal', async () => {
    const clock = new FakeClock();
    const signals: AbortSignal[] = [];
    const round = runRound(
      3,
      (i, signal) => {
        signals.push(signal);
        return i === 0 ? Promise.resolve('a') : i === 1 ? Promise.reject(new Error('down')) : never();
      },
      { deadlines: new RoundDeadlines(clock, 100) },
    );
    let done = false;
    void round.then(() => {
      done = true;
    });
    await clock.advance(99);
    expect(done).toBe(false);
    await clock.advance(1);
    const outcomes: Outcome<string>[] = await round;
    expect(outcomes.map((o) => o.status)).toEqual(['ok', 'failed', 'pending']);
    expect(signals[2]?.aborted).toBe(true);
    expect(signals[2]?.reason).toBeInstanceOf(TransportError);
  });

  it('ends as soon as the decision cannot change, without waiting for a hung node', async () => {
    const clock = new FakeClock();
    const outcomes = await runRound(3, (i) => (i === 2 ? never() : Promise.resolve(i)), {
      deadlines: new RoundDeadlines(clock, 100),
      decided: (o) => o.filter((x) => x.status === 'ok').length >= 2,
    });
    expect(outcomes.map((o) => o.status)).toEqual(['ok', 'ok', 'pending']);
  });

  it('shares one timer between rounds and ends each at its own deadline', async () => {
    const clock = new FakeClock();
    const deadlines = new RoundDeadlines(clock, 100);
    const first = runRound(1, () => never(), { deadlines });
    await clock.advance(40);
    const second = runRound(2, (i) => (i === 0 ? Promise.resolve('quick') : never()), { deadlines });
    const third = runRound(1, () => Promise.resolve('done'), { deadlines }); // ends at once, never times out
    expect((await third)[0]?.status).toBe('ok');
    expect(clock.pendingTimers).toBe(1);
    let secondDone = false;
    void second.then(() => {
      secondDone = true;
    });
    await clock.advance(60);
    expect((await first)[0]?.status).toBe('pending');
    expect(secondDone).toBe(false);
    await clock.advance(40);
    expect((await second).map((o) => o.status)).toEqual(['ok', 'pending']);
    expect(clock.pendingTimers).toBe(0); // nothing left to bound: the timer is not re-armed
  });
});

describe('QuorumLock under contention and abandonment (in-process nodes)', () => {
  /** Model nodes that record the releases they are sent. */
  function nodes(count: number) {
    const world = new World();
    const released: NodeRelease[] = [];
    const list = Array.from({ length: count }, () => {
      const node = new ModelNode(world, { seedFromClock: true });
      const release = node.release.bind(node);
      node.release = (request: NodeRelease) => {
        released.push(request);
        return release(request);
      };
      return node;
    });
    return { list, released };
  }
  const request = (signal = new AbortController().signal) => ({
    name: 'n',
    ownerId: 'o',
    ttlMs: 10_000,
    waitMs: 0,
    signal,
  });

  it('a claim split with rivals: no expiry hint, and its clean-up announces nothing', async () => {
    const { list, released } = nodes(3);
    // Two rivals' claims, one node each: ours wins the other (answering first), and nobody a majority.
    await list[1]?.acquire({ name: 'n', ownershipToken: 'rival-a', ttlMs: 10_000 });
    await list[2]?.acquire({ name: 'n', ownershipToken: 'rival-b', ttlMs: 10_000 });
    const lock = new QuorumLock({
      nodes: list,
      nodeTimeoutMs: 100,
      clock: new FakeClock(),
      newOwnershipToken: () => 'me',
    });
    expect(await lock.acquire(request())).toEqual({ acquired: false });
    await Promise.resolve();
    expect(released).toHaveLength(1);
    expect(released[0]).toMatchObject({ ownershipToken: 'me', cleanup: true });
    expect(released[0]?.notice).toBeUndefined();
    expect(list.map((node) => node.holds('n'))).toEqual([undefined, 'rival-a', 'rival-b']);
  });

  it('a lock held on a majority: busy with the holder expiry as hint', async () => {
    const { list } = nodes(3);
    for (const node of list.slice(0, 2))
      await node.acquire({ name: 'n', ownershipToken: 'holder', ttlMs: 5_000 });
    await list[2]?.acquire({ name: 'n', ownershipToken: 'holder', ttlMs: 5_000 });
    const lock = new QuorumLock({
      nodes: list,
      nodeTimeoutMs: 100,
      clock: new FakeClock(),
      newOwnershipToken: () => 'me',
    });
    const result = await lock.acquire(request());
    expect(result.acquired).toBe(false);
    expect(result).toHaveProperty('holderExpiresInMs');
  });

  it('the caller giving up ends the round at once; the claims it may have made are undone, announced', async () => {
    const { list, released } = nodes(3);
    const clock = new FakeClock();
    // Every claim lands, every reply is lost: the nodes never answer.
    const silent = list.map((node) => ({
      acquire: (r: Parameters<ModelNode['acquire']>[0]) => {
        void node.acquire(r);
        return new Promise<never>(() => {});
      },
      mint: node.mint.bind(node),
      renew: node.renew.bind(node),
      release: node.release.bind(node),
      confirm: node.confirm.bind(node),
    }));
    const lock = new QuorumLock({
      nodes: silent,
      nodeTimeoutMs: 60_000,
      clock,
      newOwnershipToken: () => 'me',
    });
    const caller = new AbortController();
    const pending = lock.acquire(request(caller.signal)).catch((error: unknown) => error);
    await Promise.resolve();
    expect(list.map((node) => node.holds('n'))).toEqual(['me', 'me', 'me']);
    const reason = new Error('core gave up');
    caller.abort(reason);
    expect(await pending).toBe(reason);
    await Promise.resolve();
    expect(released).toHaveLength(3);
    for (const r of released) expect(r.notice).toMatch(/^x[0-9a-f]+$/);
    expect(list.map((node) => node.holds('n'))).toEqual([undefined, undefined, undefined]);
  });
});

describe('QuorumLock: clean-ups and releases that nodes fail', () => {
  /** Model nodes whose `release` fails (as a reconnecting client does, at once) while `down` says so. */
  function flaky(count: number) {
    const world = new World();
    const down = new Set<number>();
    const tries: number[] = [];
    const models = Array.from({ length: count }, () => new ModelNode(world, { seedFromClock: true }));
    const list = models.map((node, i) => ({
      acquire: node.acquire.bind(node),
      mint: node.mint.bind(node),
      renew: node.renew.bind(node),
      release: (r: NodeRelease) => {
        tries.push(i);
        return down.has(i) ? Promise.reject(new TransportError('not connected')) : node.release(r);
      },
      confirm: node.confirm.bind(node),
    }));
    return { models, list, down, tries };
  }
  const request = { name: 'n', ownerId: 'o', ttlMs: 10_000, waitMs: 0, signal: new AbortController().signal };
  const settle = async (): Promise<void> => {
    for (let i = 0; i < 5; i++) await Promise.resolve();
  };

  /**
   * A rival holds nodes 1 and 2; node 0's client fails every call: the acquire fails, leaving its claim on node 0,
   * whose clean-up fails until `down` lets it through.
   */
  async function claimLeftOnNode0() {
    const { models, list, down, tries } = flaky(3);
    await models[1]?.acquire({ name: 'n', ownershipToken: 'rival', ttlMs: 10_000 });
    await models[2]?.acquire({ name: 'n', ownershipToken: 'rival', ttlMs: 10_000 });
    const clock = new FakeClock();
    const lock = new QuorumLock({ nodes: list, nodeTimeoutMs: 100, clock, newOwnershipToken: () => 'me' });
    down.add(0);
    expect((await lock.acquire(request)).acquired).toBe(false);
    await settle();
    return { models, down, tries, clock, lock };
  }

  it('a clean-up whose call fails is tried again until the node answers', async () => {
    const { models, down, tries, clock } = await claimLeftOnNode0();
    expect(models[0]?.holds('n')).toBe('me');
    await clock.advance(50 + 100 + 200);
    await settle();
    expect(models[0]?.holds('n')).toBe('me');
    down.delete(0);
    await clock.advance(400);
    await settle();
    expect(models[0]?.holds('n')).toBeUndefined();
    const count = tries.length;
    await clock.advance(10_000);
    expect(tries).toHaveLength(count); // answered: not tried again
    expect(clock.pendingTimers).toBe(0);
  });

  it('stops trying once the claim has expired by itself, or at close()', async () => {
    for (const end of ['expiry', 'close'] as const) {
      const { tries, clock, lock } = await claimLeftOnNode0();
      if (end === 'close') lock.close();
      else for (let t = 0; t < 12_000; t += 500) await clock.advance(500);
      await settle();
      const count = tries.length;
      await clock.advance(100); // the last round's deadline timer, which outlives its round until due
      expect(clock.pendingTimers).toBe(0);
      await clock.advance(10_000);
      expect(tries).toHaveLength(count);
      expect(count).toBeLessThan(end === 'close' ? 2 : 20);
    }
  });

  it('no clean-up, and no retries, on a node whose claim was refused before it was sent', async () => {
    const { models, list, tries } = flaky(3);
    await models[1]?.acquire({ name: 'n', ownershipToken: 'rival', ttlMs: 10_000 });
    const disconnected = {
      ...(list[0] as (typeof list)[number]),
      acquire: () => Promise.reject(new NodeNotConnectedError('not connected')),
    };
    const clock = new FakeClock();
    const lock = new QuorumLock({
      nodes: [disconnected, list[1], list[2]] as typeof list,
      nodeTimeoutMs: 100,
      clock,
      newOwnershipToken: () => 'me',
    });
    expect((await lock.acquire(request)).acquired).toBe(false);
    await clock.advance(10_000);
    expect(tries).toEqual([2]);
  });

  it('release: true only once a majority deleted, false only when no majority can hold the grant; else a transport error', async () => {
    const { models, list, down } = flaky(3);
    const clock = new FakeClock();
    const lock = new QuorumLock({ nodes: list, nodeTimeoutMs: 100, clock, newOwnershipToken: () => 'me' });
    const result = await lock.acquire(request);
    if (!result.acquired) throw new Error('expected a grant');
    const lease = { name: 'n', ownerId: 'o', ...result.grant };
    await models[0]?.release({ name: 'n', ownershipToken: 'me' }); // node 0 lost the key
    down.add(1);
    down.add(2);
    const unknown = expect(lock.release(lease)).rejects.toBeInstanceOf(TransportError);
    await clock.advance(100); // nodes 1 and 2 are tried again until the release's bound
    await unknown;
    down.delete(1);
    // One delete (node 1) and one node without the key (node 0) prove neither answer while node 2 is silent.
    const stillUnknown = expect(lock.release(lease)).rejects.toBeInstanceOf(TransportError);
    await clock.advance(100);
    await stillUnknown;
    await models[1]?.renew([
      { name: 'n', ownershipToken: 'me', fencingToken: lease.fencingToken, ttlMs: 10_000 },
    ]);
    await models[1]?.confirm([{ name: 'n', ownershipToken: 'me' }]);
    down.delete(2);
    expect(await lock.release(lease)).toBe(true);
    expect(await lock.release(lease)).toBe(false);
  });
});

describe('RedlockReleaseWatch', () => {
  /** One node whose subscriber hands its message listener to the test. */
  function node() {
    const listeners = new Map<string, (message: string) => void>();
    const subscriber: RedisSubscription = {
      isOpen: true,
      isReady: true,
      connect: async () => {},
      subscribe: async (channel, listener) => {
        listeners.set(channel, listener);
      },
      unsubscribe: async (channel) => {
        listeners.delete(channel);
      },
      onReconnect: () => () => {},
      close: async () => {},
      destroy: () => {},
      detach: () => {},
    };
    const client: RedisConnection = {
      description: 'a fake node',
      cluster: false,
      isReady: () => true,
      send: async () => null,
      masterOf: () => undefined,
      duplicate: () => subscriber,
    };
    return {
      client,
      publish: (message: unknown) => {
        for (const listener of listeners.values()) listener(message as string);
      },
    };
  }

  it('wakes each watcher after its own random delay within the jitter, and ignores what is not a notice', async () => {
    const clock = new FakeClock({ seed: 7 });
    const { client, publish } = node();
    const notices = new RedlockReleaseWatch([client], 'p:', { clock, jitterMs: () => 40 });
    const woken: number[][] = [[], [], [], []];
    const unwatch = woken.map((times) => notices.watch('n', () => times.push(clock.monotonic())));
    await clock.advance(40); // the subscription becomes active: one wake-up each
    for (const times of woken) times.length = 0;
    const sentAt = clock.monotonic();
    for (const message of [null, 42, {}]) publish(message);
    publish('17');
    publish('17'); // the same notice from another node
    await clock.advance(40);
    const delays = woken.map((times) => {
      expect(times).toHaveLength(1);
      return (times[0] as number) - sentAt;
    });
    for (const delay of delays) expect(delay).toBeLessThanOrEqual(40);
    expect(new Set(delays).size).toBeGreaterThan(1);
    for (const stop of unwatch) stop();
    notices.close();
  });
});
