import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import {
  type Lease,
  LockClient,
  type LockHandle,
  LockLostError,
  type LockService,
  TransportError,
} from '@dlock/core';
import {
  keySlot,
  type RedisCluster,
  startRedisCluster,
  startTcpProxy,
  type TcpProxy,
} from '@dlock/test-utils';
import { Cluster as IORedisCluster } from 'ioredis';
import { createCluster } from 'redis';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { lockKeys, type RedisClientLike, RedisLockService } from '../src/index.js';
import { CLUSTER_FAMILIES, type ClusterFamily, type Connected } from './clients.js';
import { eventually, sleep } from './helpers.js';

// Faults on real Redis Clusters of private nodes: a master killed and failed over to its replica (with and without
// its latest writes replicated), a master cut off from the client by a TCP proxy, a holder frozen past its TTL. One
// node-redis and one ioredis cluster client; the probes talk to the nodes directly (cluster.command), never through
// the client under test.

const PREFIX = 'dlock-cf:';
const [NODE_REDIS_5, NODE_REDIS_6, IOREDIS_5] = CLUSTER_FAMILIES as [
  ClusterFamily,
  ClusterFamily,
  ClusterFamily,
];

const lockKey = (name: string): string => lockKeys(PREFIX, name).lock;
const masters = (cluster: RedisCluster) => cluster.nodes.filter((node) => node.createdAs === 'master');

/** slot → port of the master serving it, as the first live node that answers CLUSTER SLOTS says. */
async function slotOwners(cluster: RedisCluster): Promise<(slot: number) => number> {
  for (const node of cluster.nodes) {
    if (node.process.exited) continue;
    const reply = await cluster.command(node.port, 'CLUSTER', 'SLOTS').catch(() => undefined);
    if (!Array.isArray(reply)) continue;
    const ranges = (reply as [number, number, [string, number]][]).map(([start, end, [, port]]) => ({
      start,
      end,
      port,
    }));
    return (slot) => ranges.find((r) => r.start <= slot && slot <= r.end)?.port ?? -1;
  }
  throw new Error('no cluster node answered CLUSTER SLOTS');
}

/** `count` lock names served by the master on `port` (with `elsewhere`, by any other master). */
async function namesOn(
  cluster: RedisCluster,
  port: number,
  count: number,
  tag: string,
  elsewhere = false,
): Promise<string[]> {
  const owner = await slotOwners(cluster);
  const names: string[] = [];
  for (let i = 0; names.length < count; i++) {
    const name = `${tag}-${i}`;
    if ((owner(keySlot(lockKey(name))) === port) !== elsewhere) names.push(name);
  }
  return names;
}

/** The lock key's value on the master serving it now, read on that node directly; null when missing. */
async function serverValue(cluster: RedisCluster, name: string): Promise<string | null> {
  const { port } = await cluster.masterOf(lockKey(name));
  const value = await cluster.command(port, 'GET', lockKey(name));
  return typeof value === 'string' ? value : null;
}

/** Whether the server states `lease` as the lock's holder ("<ownership token> <fencing token> ..."). */
async function serverHolds(cluster: RedisCluster, lease: Lease | undefined): Promise<boolean> {
  if (lease === undefined) throw new Error('no grant recorded');
  const value = await serverValue(cluster, lease.name);
  return value?.startsWith(`${lease.ownershipToken} ${lease.fencingToken} `) === true;
}

async function role(cluster: RedisCluster, port: number): Promise<unknown[]> {
  const reply = await cluster.command(port, 'ROLE');
  if (!Array.isArray(reply)) throw new Error(`ROLE on ${port}: ${String(reply)}`);
  return reply;
}

/** The port of the (only) replica of the master on `port`. */
async function replicaOf(cluster: RedisCluster, port: number): Promise<number> {
  const [, , replicas] = await role(cluster, port);
  const first = Array.isArray(replicas) ? (replicas[0] as unknown[] | undefined) : undefined;
  if (first === undefined) throw new Error(`master ${port} has no replica`);
  return Number(first[1]);
}

/** The service, recording every grant it hands out so a test can check the server state of each one. */
function recording(service: RedisLockService) {
  const grants = new Map<string, Lease>();
  const wrapped: LockService = {
    acquire: async (request) => {
      const result = await service.acquire(request);
      if (result.acquired)
        grants.set(request.name, { name: request.name, ownerId: request.ownerId, ...result.grant });
      return result;
    },
    renew: (request) => service.renew(request),
    renewMany: (requests) => service.renewMany(requests),
    release: (lease) => service.release(lease),
    watch: (name, onReleased) => service.watch(name, onReleased),
  };
  return { wrapped, grants };
}

const cleanups: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup().catch(() => {});
});

/** A service and two lock clients (the holder's, recording its grants, and a contender's) on `connected`. */
function servicesOn(connected: Connected, requestTimeoutMs: number) {
  const service = new RedisLockService({
    client: connected.client as RedisClientLike,
    keyPrefix: PREFIX,
    requestTimeoutMs,
  });
  const { wrapped, grants } = recording(service);
  const locks = new LockClient(wrapped, { operationTimeoutMs: requestTimeoutMs });
  const contender = new LockClient(service, { operationTimeoutMs: requestTimeoutMs });
  cleanups.push(async () => {
    await locks.close();
    await contender.close();
    await service.close();
    await connected.close();
  });
  return { service, locks, contender, grants };
}

describe('a master killed and failed over to its replica (3 masters, 3 replicas)', () => {
  let cluster: RedisCluster;
  beforeAll(async () => {
    cluster = await startRedisCluster({ masters: 3, replicas: 1 });
  }, 30_000);
  afterAll(async () => {
    await cluster?.stop();
  });

  const TTL_MS = 12_000;
  const LOSSY_TTL_MS = 30_000;
  /**
   * From the promotion on, how long the client may take to route to the new master. node-redis 6 refreshes its
   * slot map 5 s after a node starts reconnecting; ioredis as soon as the node's connection ends.
   */
  const FOLLOW_MS = 6_000;

  /**
   * Each run kills another master (one cluster survives three failovers: a majority of masters stays up to vote).
   * With `lossy`, grants made after the replica stopped receiving writes are killed with the master.
   */
  const failover = async (
    family: ClusterFamily,
    victimIndex: number,
    { follows, lossy }: { follows: boolean; lossy: boolean },
  ): Promise<void> => {
    const { locks, contender, grants } = servicesOn(await family.connect(cluster.rootNodes), 1_000);
    const victim = masters(cluster)[victimIndex] as (typeof cluster.nodes)[number];
    const replicaPort = await replicaOf(cluster, victim.port);
    const replica = cluster.nodes.find((node) => node.port === replicaPort) as (typeof cluster.nodes)[number];
    const tag = `failover-${victimIndex}`;
    const kept = await namesOn(cluster, victim.port, 2, `${tag}-kept`);
    const others = await namesOn(cluster, victim.port, 2, `${tag}-other`, true);
    const [reused, fresh, later] = (await namesOn(cluster, victim.port, 3, `${tag}-new`)) as [
      string,
      string,
      string,
    ];
    const renewedAt = new Map<string, number>();
    locks.events.on('renewed', (event) => renewedAt.set(event.name, performance.now()));

    const handles = await Promise.all(
      [...kept, ...others].map((name) => locks.acquire(name, { ttlMs: TTL_MS })),
    );
    const earlier = await locks.acquire(reused, { ttlMs: TTL_MS });
    await earlier.release(); // a tombstone with the name's counter
    const highest = new Map(handles.map((h) => [h.name, h.fencingToken]));
    highest.set(reused, earlier.fencingToken);
    // Everything so far is on the replica.
    expect(await cluster.command(victim.port, 'WAIT', 1, 1_000)).toBe(1);

    let lossyReused: LockHandle | undefined;
    let lossyFresh: LockHandle | undefined;
    const lostReasons: string[] = [];
    const onLost = (_: LockHandle, reason: string): void => {
      lostReasons.push(reason);
    };
    if (lossy) {
      // Frozen, the replica cannot reconnect (and resync) before its master is gone: grants made from here on are
      // acknowledged by the master alone.
      replica.process.pause();
      try {
        expect(await cluster.command(victim.port, 'CLIENT', 'KILL', 'TYPE', 'replica')).toBe(1);
        // A long lease: no renewal of theirs reaches the new master before the checks below.
        lossyReused = await locks.acquire(reused, { ttlMs: LOSSY_TTL_MS, onLost });
        lossyFresh = await locks.acquire(fresh, { ttlMs: LOSSY_TTL_MS, onLost });
        expect(await cluster.command(victim.port, 'WAIT', 1, 100)).toBe(0);
        await cluster.killNode(victim.port);
      } finally {
        replica.process.resume();
      }
    } else {
      await cluster.killNode(victim.port);
    }
    const killedAt = performance.now();
    const promoted = async (): Promise<boolean> => (await role(cluster, replicaPort))[0] === 'master';
    expect(await eventually(promoted, 15_000)).toBe(true);
    const promotedAt = performance.now();

    // The client finds the new master by itself: a name it never used, on the failed master's slots.
    let first: LockHandle | null = null;
    const acquired = async (): Promise<boolean> => {
      // A grant that answers after a probe gave up waiting is kept all the same (the next probe would be refused).
      const handle = await contender.tryAcquire(later, { ttlMs: TTL_MS }).catch(() => null);
      first ??= handle;
      return first !== null;
    };
    expect(await eventually(acquired, FOLLOW_MS)).toBe(follows);
    const followedAt = performance.now();
    // The checks below read the server through the test's own view of the slot map (the first live node's), which
    // may not have the promotion yet when the client has already followed it: a read would go to the dead master.
    const seen = async (): Promise<boolean> => (await cluster.masterOf(lockKey(later))).port !== victim.port;
    expect(await eventually(seen, 15_000)).toBe(true);
    if (!follows) {
      // Still no wrong answer: what the client believes held, the promoted replica still holds (the grants were
      // replicated, and their windows have not closed yet). Later they are lost as unreachable.
      for (const handle of handles) {
        if (handle.isHeld())
          expect(await serverHolds(cluster, grants.get(handle.name)), handle.name).toBe(true);
      }
      return;
    }

    // A try sent while the client's slot map still named the dead master can end as unknown when ioredis drops
    // that node (true: ioredis may send it again elsewhere); a later try reaches the new master. A grant that
    // answers after a try gave up is kept, as for `later`.
    const takeOver = async (name: string): Promise<LockHandle | null> => {
      let handle: LockHandle | null = null;
      await eventually(async () => {
        handle ??= await contender.tryAcquire(name, { ttlMs: TTL_MS }).catch(() => null);
        return handle !== null;
      }, FOLLOW_MS);
      return handle;
    };
    if (lossyReused !== undefined && lossyFresh !== undefined) {
      // The grants the old master acknowledged but never replicated are gone from the new master: `fresh` had no
      // key before them, `reused` is back to the tombstone its earlier release left.
      expect(await serverValue(cluster, fresh)).toBeNull();
      expect(await serverValue(cluster, reused)).toMatch(new RegExp(`^~ ${earlier.fencingToken} `));
      // So each name goes to someone else while its first holder, with an open window, still believes it holds it:
      // two holders, until the first one's next renewal is refused. Only fencing tokens can tell them apart.
      const second = await takeOver(fresh);
      expect(second).not.toBeNull();
      expect(lossyFresh.isHeld()).toBe(true);
      // For a name whose every write was lost, the token comes from the server clock (the fence key went too):
      // above the lost grant's.
      expect((second as LockHandle).fencingToken).toBeGreaterThan(lossyFresh.fencingToken);
      // For a name whose older state survived, the counter is rolled back with the lost writes: the last token + 1
      // would be the lost grant's token again, which fencing could not tell apart. Every grant also takes at least
      // the server clock in µs, which has moved on since the lost grant: above it.
      const third = await takeOver(reused);
      expect(third).not.toBeNull();
      expect(lossyReused.isHeld()).toBe(true);
      expect((third as LockHandle).fencingToken).toBeGreaterThan(lossyReused.fencingToken);
      // The first holders learn it at their next renewal: refused.
      expect(await lossyFresh.renew()).toBe(false);
      expect(await lossyReused.renew()).toBe(false);
      expect(lostReasons).toEqual(['rejected', 'rejected']);
      expect(await serverHolds(cluster, grants.get(fresh))).toBe(false);
      await second?.release();
      await third?.release();
    }

    // Locks whose grants reached the replica keep being renewed, now on the promoted replica.
    const settled = (): boolean =>
      handles.every((h) => h.state !== 'held' || (renewedAt.get(h.name) ?? 0) > promotedAt);
    expect(await eventually(settled, TTL_MS)).toBe(true);
    for (const handle of handles) {
      expect(handle.state, handle.name).toBe('held');
      // Held in the client's view and on the server alike: never a handle the server no longer backs.
      expect(await serverHolds(cluster, grants.get(handle.name)), handle.name).toBe(true);
      expect(await contender.tryAcquire(handle.name, { ttlMs: 1_000 })).toBeNull();
    }
    console.info(
      `${family.label}: promoted ${Math.round(promotedAt - killedAt)} ms after the kill, ` +
        `followed by the client ${Math.round(followedAt - killedAt)} ms after it`,
    );

    // Tokens handed out after the failover are above every token handed out before it.
    for (const handle of handles) await handle.release();
    for (const name of [...kept, ...others, ...(lossy ? [] : [reused])]) {
      const next = await contender.acquire(name, { ttlMs: TTL_MS, waitMs: 2_000 });
      expect(next.fencingToken, name).toBeGreaterThan(highest.get(name) as bigint);
      await next.release();
    }
    await (first as LockHandle | null)?.release();
  };

  // node-redis 5 refreshes its slot map only on a MOVED or ASK reply, which a dead master never sends (node-redis
  // #2806), so it keeps sending that master's slots to the dead node; 6.3 also refreshes 5 s after a node starts
  // reconnecting. Asserted as it is, so that a fix in the adapter shows up here.
  it(
    `${NODE_REDIS_5.label}: does not follow the failover (a known limitation of node-redis 5), and still answers nothing untrue`,
    () => failover(NODE_REDIS_5, 0, { follows: false, lossy: false }),
    45_000,
  );

  it(
    `${NODE_REDIS_6.label}: locks whose grants reached the replica stay held and renewed; new grants work, with greater tokens`,
    () => failover(NODE_REDIS_6, 1, { follows: true, lossy: false }),
    45_000,
  );

  it(
    `${IOREDIS_5.label}: the same; and grants acknowledged but not replicated are lost: two holders, told apart by their tokens only for names with no surviving state`,
    () => failover(IOREDIS_5, 2, { follows: true, lossy: true }),
    45_000,
  );
});

/** A cluster client of one family that reaches every node through its proxy (the nodes announce their own ports). */
interface ProxiedFamily {
  readonly label: string;
  connect(
    seeds: readonly number[],
    map: Readonly<Record<string, { host: string; port: number }>>,
  ): Promise<Connected>;
}

const PROXIED: readonly ProxiedFamily[] = [
  {
    label: 'node-redis 5 createCluster (nodeAddressMap)',
    async connect(seeds, map) {
      const client = createCluster({
        rootNodes: seeds.map((port) => ({ url: `redis://127.0.0.1:${port}` })),
        nodeAddressMap: map,
      });
      client.on('error', () => {});
      await client.connect();
      return {
        client,
        command: (args) => client.sendCommand(undefined, false, [...args]),
        close: async () => {
          await Promise.race([client.close(), sleep(1_000)]).catch(() => {});
        },
      };
    },
  },
  {
    label: 'ioredis 5 Cluster (natMap)',
    async connect(seeds, map) {
      const client = new IORedisCluster(
        seeds.map((port) => ({ host: '127.0.0.1', port })),
        { natMap: map, lazyConnect: true },
      );
      client.on('error', () => {});
      await client.connect();
      return {
        client,
        command: ([command, ...rest]) => client.call(command as string, ...rest),
        close: async () => {
          client.disconnect();
        },
      };
    },
  },
];

describe('a master cut off from the client for a moment (3 masters, each behind a TCP proxy)', () => {
  let cluster: RedisCluster;
  const proxies = new Map<number, TcpProxy>();
  beforeAll(async () => {
    cluster = await startRedisCluster({ masters: 3 });
    for (const node of cluster.nodes) proxies.set(node.port, await startTcpProxy({ targetPort: node.port }));
  }, 30_000);
  afterAll(async () => {
    for (const proxy of proxies.values()) await proxy.close();
    await cluster?.stop();
  });

  const TTL_MS = 2_000;
  const TIMEOUT_MS = 300;

  /**
   * Locks on the first master and on the others, through `family` on the proxies; `victim` is the first master's
   * proxy. The cluster bus does not go through the proxies, so the cluster itself sees nothing wrong. The locks are
   * taken in that order, or with `sparedFirst` the others' first: the client's renewal batches list them so.
   */
  async function setUp(
    family: ProxiedFamily,
    tag: string,
    requestTimeoutMs = TIMEOUT_MS,
    sparedFirst = false,
  ) {
    const map = Object.fromEntries(
      cluster.nodes.map((node) => [
        `127.0.0.1:${node.port}`,
        { host: '127.0.0.1', port: (proxies.get(node.port) as TcpProxy).port },
      ]),
    );
    const connected = await family.connect(
      [...proxies.values()].map((proxy) => proxy.port),
      map,
    );
    const { service, locks, contender, grants } = servicesOn(connected, requestTimeoutMs);
    const master = masters(cluster)[0] as (typeof cluster.nodes)[number];
    const victim = proxies.get(master.port) as TcpProxy;
    cleanups.push(async () => {
      victim.dropReplies(false);
      victim.resetAll();
      victim.mode = 'pass';
    });
    const cut = await namesOn(cluster, master.port, 2, `${tag}-cut`);
    const spared = await namesOn(cluster, master.port, 2, `${tag}-spared`, true);
    const log: { at: number; kind: 'renewed' | 'renew-failed'; name: string }[] = [];
    locks.events.on('renewed', (e) => log.push({ at: performance.now(), kind: 'renewed', name: e.name }));
    locks.events.on('renew-failed', (e) =>
      log.push({ at: performance.now(), kind: 'renew-failed', name: e.name }),
    );
    const lost: { name: string; reason: string; at: number; windowEnd: number }[] = [];
    const onLost = (handle: LockHandle, reason: string): void => {
      lost.push({ name: handle.name, reason, at: performance.now(), windowEnd: handle.expiresAt });
    };
    // Each name once before, so that its next grants have a token to beat.
    const before = new Map<string, bigint>();
    for (const name of [...cut, ...spared]) {
      const handle = await contender.acquire(name, { ttlMs: TTL_MS });
      before.set(name, handle.fencingToken);
      await handle.release();
    }
    const handles = await Promise.all(
      (sparedFirst ? [...spared, ...cut] : [...cut, ...spared]).map((name) =>
        locks.acquire(name, { ttlMs: TTL_MS, onLost }),
      ),
    );
    return { service, locks, contender, grants, victim, cut, spared, handles, log, lost, before };
  }

  /** Blackholes `proxy` for `ms`, then breaks its connections and lets traffic pass again. */
  async function blackhole(
    proxy: TcpProxy,
    ms: number,
    during?: () => Promise<void>,
  ): Promise<{ from: number; to: number }> {
    const from = performance.now();
    proxy.mode = 'blackhole';
    const until = from + ms;
    while (performance.now() < until) {
      await during?.();
      await sleep(Math.min(50, until - performance.now()));
    }
    // The proxy drops what arrives while blackholed, where TCP would deliver it late: a connection that lost bytes
    // would pair later replies with the wrong requests, so it is broken, as a partition outlasting TCP would break it.
    proxy.resetAll();
    proxy.mode = 'pass';
    return { from, to: performance.now() };
  }

  for (const family of PROXIED) {
    it(`${family.label}: blackholed for less than the TTL, every lock stays held and renewed after it, and the names work again`, async () => {
      const { locks, contender, grants, victim, cut, handles, log, lost, before } = await setUp(
        family,
        `short-${PROXIED.indexOf(family)}`,
      );
      const window = await blackhole(victim, 1_000);
      const since = (name: string, kind: string, from: number): number =>
        log.filter((e) => e.name === name && e.kind === kind && e.at >= from).length;
      // The client did go through the proxy: renewals of the cut-off master's locks failed meanwhile.
      for (const name of cut) expect(since(name, 'renew-failed', window.from), name).toBeGreaterThan(0);
      // A renewal lands before any window closes (the last one before the cut left ~2 s, the cut lasted 1 s).
      expect(
        await eventually(() => handles.every((h) => since(h.name, 'renewed', window.to) > 0), TTL_MS),
      ).toBe(true);
      expect(lost).toEqual([]);
      for (const handle of handles) {
        expect(handle.state, handle.name).toBe('held');
        expect(await serverHolds(cluster, grants.get(handle.name)), handle.name).toBe(true);
      }
      // The cut-off master serves again: its names change hands with greater tokens.
      for (const handle of handles.filter((h) => cut.includes(h.name))) {
        await handle.release();
        const next = await contender.acquire(handle.name, { ttlMs: TTL_MS, waitMs: 1_000 });
        expect(next.fencingToken).toBeGreaterThan(handle.fencingToken);
        expect(next.fencingToken).toBeGreaterThan(before.get(handle.name) as bigint);
        await next.release();
      }
      await locks.close();
    }, 20_000);

    it(`${family.label}: blackholed past the TTL, its locks are lost (unreachable) only once their window closed, never held without the server; afterwards every name works again`, async () => {
      const { locks, contender, grants, victim, cut, spared, handles, lost, before } = await setUp(
        family,
        `long-${PROXIED.indexOf(family)}`,
      );
      const wrong: string[] = [];
      // While cut off, whatever the client still calls held must be held on the server (read there directly). A
      // handle counts only if held both before and after the read: its window, which ends before the server's own
      // expiry, was open while the read ran.
      const probe = async (): Promise<void> => {
        for (const handle of handles) {
          if (!handle.isHeld()) continue;
          const holds = await serverHolds(cluster, grants.get(handle.name));
          if (!holds && handle.isHeld()) wrong.push(handle.name);
        }
      };
      await blackhole(victim, TTL_MS + 600, probe);
      expect(wrong).toEqual([]);
      for (const name of cut) {
        const loss = lost.find((l) => l.name === name);
        expect(loss, name).toBeDefined();
        expect(['unreachable', 'expired']).toContain(loss?.reason);
        expect(loss?.at).toBeGreaterThanOrEqual(loss?.windowEnd as number);
      }
      // Locks elsewhere: held and backed by the server, or lost — never a wrong answer either (whether they stay
      // held is the next test's question).
      for (const handle of handles.filter((h) => spared.includes(h.name))) {
        if (handle.state === 'held') expect(await serverHolds(cluster, grants.get(handle.name))).toBe(true);
      }
      // Every name can be taken again once traffic passes, with a token above all earlier ones.
      for (const handle of handles) {
        if (handle.state === 'held') await handle.release();
        const next = await contender.acquire(handle.name, { ttlMs: TTL_MS, waitMs: TTL_MS });
        expect(next.fencingToken, handle.name).toBeGreaterThan(handle.fencingToken);
        expect(next.fencingToken, handle.name).toBeGreaterThan(before.get(handle.name) as bigint);
        await next.release();
      }
      await locks.close();
    }, 20_000);
  }

  for (const family of PROXIED) {
    it(`${family.label}: a release whose reply is lost in a connection reset is an unknown outcome, never "lost"`, async () => {
      const { locks, victim, cut, handles } = await setUp(family, `release-${PROXIED.indexOf(family)}`);
      const handle = handles.find((h) => h.name === cut[0]) as LockHandle;
      victim.dropReplies(true);
      const released = handle.release().catch((error: unknown) => error);
      // The release did run: the lock is free on the server, and only the reply is missing.
      const free = async (): Promise<boolean> =>
        (await serverValue(cluster, handle.name))?.startsWith('~ ') === true;
      expect(await eventually(free, 2_000)).toBe(true);
      victim.resetAll();
      victim.dropReplies(false);
      const outcome = await released;
      expect(outcome).not.toBeInstanceOf(LockLostError);
      expect(outcome).toBeInstanceOf(TransportError);
      await locks.close();
    }, 20_000);
  }

  // A renewal batch is one script call per master; one master's call failing must fail only its own locks' renewals
  // (it once failed the whole renewMany, and locks on healthy masters were lost with the cut-off master's). The cut-off
  // master's locks go last in every batch: the batch's results once came out short then, and core failed all of it.
  it('locks on the other masters keep being renewed, and stay held, while one master is blackholed past the TTL', async () => {
    // A longer request bound than the other cases: the healthy masters' answers must not miss it on a busy CI
    // machine (the cut-off master's group still fails after 3/4 of it, well inside the 2 s leases).
    const { victim, spared, handles, log, lost } = await setUp(
      PROXIED[1] as ProxiedFamily,
      'others',
      600,
      true,
    );
    const window = await blackhole(victim, TTL_MS + 600);
    for (const handle of handles.filter((h) => spared.includes(h.name))) {
      expect(handle.state, JSON.stringify(lost)).toBe('held');
    }
    const during = log.filter((e) => spared.includes(e.name) && e.at >= window.from && e.at <= window.to);
    expect(during.filter((e) => e.kind === 'renew-failed')).toEqual([]);
  }, 20_000);
});

/**
 * A child process that queues for `name` on the cluster through the built package (node-redis createCluster), prints
 * its fencing token once it holds the lock, and holds it until told to stop (at most 10 s).
 */
function startSuccessor(
  cluster: RedisCluster,
  name: string,
): { acquired: Promise<bigint>; stop(): Promise<void> } {
  const child = spawn(
    process.execPath,
    [
      '--input-type=module',
      '-e',
      `
      import { LockClient } from '@dlock/core';
      import { RedisLockService } from '@dlock/redis';
      import { createCluster } from 'redis';
      const rootNodes = JSON.parse(process.env.ROOT_NODES).map((url) => ({ url }));
      const client = createCluster({ rootNodes });
      client.on('error', () => {});
      await client.connect();
      const service = new RedisLockService({ client, keyPrefix: process.env.PREFIX });
      const locks = new LockClient(service);
      const handle = await locks.acquire(process.env.NAME, { ttlMs: 5_000, waitMs: 8_000 });
      console.log('acquired ' + handle.fencingToken);
      await new Promise((resolve) => {
        process.stdin.once('data', resolve);
        setTimeout(resolve, 10_000);
      });
      await handle.release();
      await locks.close();
      await service.close();
      await client.close();
      process.exit(0);
    `,
    ],
    {
      cwd: fileURLToPath(new URL('..', import.meta.url)),
      env: {
        ...process.env,
        ROOT_NODES: JSON.stringify(cluster.rootNodes.map((node) => node.url)),
        PREFIX,
        NAME: name,
      },
    },
  );
  let output = '';
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  const acquired = new Promise<bigint>((resolve, reject) => {
    child.stdout.on('data', (chunk: Buffer) => {
      output += chunk.toString();
      const match = /acquired (\d+)/.exec(output);
      if (match) resolve(BigInt(match[1] as string));
    });
    child.stderr.on('data', (chunk: Buffer) => {
      output += chunk.toString();
    });
    void exited.then(() => reject(new Error(`successor exited: ${output}`)));
  });
  acquired.catch(() => {});
  return {
    acquired,
    stop: async () => {
      child.stdin.end('stop\n');
      await Promise.race([exited, sleep(3_000)]);
      if (child.exitCode === null) child.kill();
    },
  };
}

describe('a holder frozen past its TTL (3 masters)', () => {
  let cluster: RedisCluster;
  beforeAll(async () => {
    cluster = await startRedisCluster({ masters: 3 });
  }, 30_000);
  afterAll(async () => {
    await cluster?.stop();
  });

  for (const family of [NODE_REDIS_5, IOREDIS_5]) {
    it(`${family.label}: its successor gets a greater token, and its late release rejects with LockLostError (expired)`, async () => {
      const { service, locks, grants } = servicesOn(await family.connect(cluster.rootNodes), 1_000);
      const name = `frozen-${family.label}-${process.pid}`;
      const reasons: string[] = [];
      const handle = await locks.acquire(name, { ttlMs: 500, onLost: (_, reason) => reasons.push(reason) });
      const old = grants.get(name) as Lease;
      // The successor runs in another process, so it can take the lock while this one is frozen.
      const successor = startSuccessor(cluster, name);
      try {
        const queue = lockKeys(PREFIX, name).queue;
        const { port } = await cluster.masterOf(queue);
        expect(await eventually(async () => (await cluster.command(port, 'LLEN', queue)) === 1, 5_000)).toBe(
          true,
        );
        // Frozen past the TTL, as in a long GC pause: no timer runs, so no renewal and no expiry check.
        Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 1_200);
        // Called before any timer could run: the release itself must find out.
        const error = await handle.release().catch((e: unknown) => e);
        expect(error).toBeInstanceOf(LockLostError);
        expect(error).toMatchObject({ code: 'LOCK_LOST', reason: 'expired' });
        expect(handle.state).toBe('lost');
        const token = await successor.acquired;
        expect(token).toBeGreaterThan(handle.fencingToken);
        await sleep(50);
        expect(reasons).toEqual(['expired']);
        // The server refuses the old grant, and the owner-checked release left the successor's grant alone.
        expect(await service.renew({ lease: old, ttlMs: 5_000 })).toEqual({ renewed: false });
        expect(await service.release(old)).toBe(false);
        expect(await serverValue(cluster, name)).toMatch(new RegExp(`^\\S+ ${token} `));
      } finally {
        await successor.stop();
      }
    }, 20_000);
  }
});
