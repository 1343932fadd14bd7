import {
  AcquireTimeoutError,
  type Lease,
  LockClient,
  LockLostError,
  systemClock,
  TransportError,
} from '@dlock/core';
import {
  type RedisServer,
  rejection,
  startRedisServer,
  startTcpProxy,
  type TcpProxy,
} from '@dlock/test-utils';
import { lockServiceContract } from '@dlock/testing/contract';
import { createClient } from 'redis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { connectionOf } from '../src/clients/detect.js';
import type { RedlockClientLike } from '../src/index.js';
import { redlockKeys } from '../src/keys.js';
import { RedlockService } from '../src/redlock/index.js';
import { RedisRedlockNode } from '../src/redlock/redis-node.js';
import { ACQUIRE, MINT, RELEASE, RENEW } from '../src/redlock/scripts.js';
import { type Connected, FAMILIES, FAMILY_PAIR, type Family } from './clients.js';
import { clientReady, connect6, type Redis6 } from './helpers.js';

/*
 * Redlock against real, private redis-server processes on loopback ports (no persistence, so a restart loses
 * everything). Five servers: the first three make the 3-node setup, all five the 5-node one. `clients` (node-redis 5)
 * serve both as the node-redis deployment and as the tests' probes; suites on other client families connect their
 * own clients to the same servers.
 */

type Client = ReturnType<typeof createClient>;

const NODE_TIMEOUT_MS = 200;
const servers: RedisServer[] = [];
const clients: Client[] = [];
/** Clients of other families, by server: taking a node down or bringing it back waits for them too. */
const others: Connected[][] = [[], [], [], [], []];
const IOREDIS = FAMILIES.filter((family) => family.label.startsWith('ioredis'));
const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

async function connect(url: string): Promise<Client> {
  // Reconnect quickly, so a restarted node is back within a test's time.
  const client = createClient({ url, socket: { reconnectStrategy: () => 50, connectTimeout: 1_000 } });
  client.on('error', () => {});
  await client.connect();
  return client;
}

async function until(condition: () => boolean, what = 'condition', maxMs = 5_000): Promise<void> {
  const deadline = Date.now() + maxMs;
  while (!condition()) {
    if (Date.now() > deadline) throw new Error(`${what}: not met within ${maxMs} ms`);
    await sleep(20);
  }
}

/** Direct commands in the tests get a bound too: a test must fail, not hang, when a server is stuck. */
function within<T>(promise: Promise<T>, ms = 3_000): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`no answer within ${ms} ms`)), ms);
  });
  return Promise.race([promise, timeout]).finally(() => clearTimeout(timer));
}

/** Until node `index`'s clients answer a PING again (their ready state alone can be stale for a moment). */
async function waitReady(index: number): Promise<void> {
  const deadline = Date.now() + 5_000;
  const answers = async (ready: boolean, ping: () => Promise<unknown>): Promise<boolean> =>
    ready && (await within(ping(), 500).catch(() => '')) === 'PONG';
  for (;;) {
    const client = clients[index] as Client;
    const followers = others[index] ?? [];
    const all = await Promise.all([
      answers(client.isReady, () => client.ping()),
      ...followers.map((c) => answers(clientReady(c.client), () => c.command(['PING']))),
    ]);
    if (all.every(Boolean)) return;
    if (Date.now() > deadline) throw new Error(`node ${index} did not come back`);
    await sleep(20);
  }
}

/** Polls until no server holds `key` or `maxMs` passed; how many still hold it. */
async function holdersSoon(key: string, maxMs: number): Promise<number> {
  const deadline = Date.now() + maxMs;
  for (;;) {
    const count = await holders(key);
    if (count === 0 || Date.now() > deadline) return count;
    await sleep(10);
  }
}

/** Polls until at least `count` servers hold `key` or `maxMs` passed; how many hold it. */
async function holdersSoonAtLeast(key: string, count: number, maxMs: number): Promise<number> {
  const deadline = Date.now() + maxMs;
  for (;;) {
    const held = await holders(key);
    if (held >= count || Date.now() > deadline) return held;
    await sleep(10);
  }
}

/** How many of the 3-node setup's servers hold `key`. */
async function holders(key: string): Promise<number> {
  let count = 0;
  for (const client of three()) count += await within(client.exists(key));
  return count;
}

/*
 * Servers are stopped with SIGTERM, not SIGKILL. With no persistence configured both lose every key, but a SIGKILL
 * lets node-redis < 5.11 reconnect to the dying server and end up "ready" on a dead socket for good
 * (redis/node-redis#3108, fixed in 5.11): the service survives that (the node just fails every round, by its
 * deadline) but the test could not bring the node back.
 */

/** Stops node `index` without saving and starts an empty server on the same port. */
async function restartEmpty(index: number): Promise<void> {
  const old = servers[index] as RedisServer;
  await old.process.stop();
  servers[index] = await startRedisServer({ port: old.port });
  await waitReady(index);
}

async function takeDown(index: number): Promise<void> {
  await (servers[index] as RedisServer).process.stop();
  const noticed = (): boolean =>
    clients[index]?.isReady === false && (others[index] ?? []).every((c) => !clientReady(c.client));
  await until(noticed, `node ${index} clients notice`);
}

function three(): Client[] {
  return clients.slice(0, 3);
}

function service(nodes: readonly object[]): RedlockService {
  return new RedlockService({ clients: nodes as RedlockClientLike[], nodeTimeoutMs: NODE_TIMEOUT_MS });
}

/** A client on each of the five servers (`connect(url, index)`) before the suite, in `others`; closed after it. */
function clientsOf(connect: (url: string, index: number) => Promise<Connected>): Connected[] {
  const connected: Connected[] = [];
  beforeAll(async () => {
    connected.push(...(await Promise.all(servers.map((s, i) => connect(s.url, i)))));
    for (const [i, c] of connected.entries()) others[i]?.push(c);
  });
  afterAll(async () => {
    for (const list of others) list.splice(0, list.length, ...list.filter((c) => !connected.includes(c)));
    await Promise.all(connected.map((c) => c.close()));
  });
  return connected;
}

/** The contract faults for an `count`-node deployment: one node restarted empty, then each in turn. */
function restartFaults(count: number) {
  return [
    {
      name: 'one node restarted empty',
      inject: () => restartEmpty(1),
      recover: async () => {},
    },
    {
      name: 'every node restarted empty, one after another (the counters reseed from the clock)',
      inject: async () => {
        for (let i = 0; i < count; i++) await restartEmpty(i);
      },
      recover: async () => {},
    },
  ];
}

let counter = 0;
function lockName(label: string): string {
  counter += 1;
  return `redlock-test:${process.pid}:${counter}:${label}`;
}

/** Each `takeTurn()` acquires `name` (waiting up to 1 s), releases it, and keeps the fencing token it was given. */
function turns(locks: LockClient, name: string): { takeTurn: () => Promise<void>; tokens: bigint[] } {
  const tokens: bigint[] = [];
  const takeTurn = async (): Promise<void> => {
    const handle = await locks.acquire(name, { ttlMs: 2_000, waitMs: 1_000 });
    tokens.push(handle.fencingToken);
    await handle.release();
  };
  return { takeTurn, tokens };
}

function expectIncreasing(tokens: readonly bigint[]): void {
  for (let i = 1; i < tokens.length; i++) expect(tokens[i]).toBeGreaterThan(tokens[i - 1] as bigint);
}

beforeAll(async () => {
  const started = await Promise.all(Array.from({ length: 5 }, () => startRedisServer()));
  servers.push(...started);
  clients.push(...(await Promise.all(started.map((s) => connect(s.url)))));
}, 30_000);

afterAll(async () => {
  for (const client of clients) client.destroy();
  await Promise.all(servers.map((s) => s.process.stop()));
});

describe('the per-node scripts on a real server', () => {
  const signal = new AbortController().signal;
  const node = (): RedisRedlockNode =>
    new RedisRedlockNode(connectionOf(clients[0], 'client', { allowCluster: false, clock: systemClock }), {
      prefix: 'dlock:redlock:',
      fenceRetentionMs: 60_000,
      label: 'n0',
    });

  it('claim seeds a missing counter from the server clock (µs) and keeps it for the retention', async () => {
    const name = lockName('seed');
    const { fence } = redlockKeys('dlock:redlock:', name);
    const before = BigInt(Date.now()) * 1000n;
    const reply = await node().acquire({ name, ownershipToken: 'owner-1', ttlMs: 5_000 }, signal);
    if (!reply.granted) throw new Error('expected a claim');
    expect(reply.counter).toBeGreaterThanOrEqual(before - 1_000_000n); // same machine: within a second
    expect(reply.counter).toBeLessThanOrEqual(BigInt(Date.now()) * 1000n + 1_000_000n);
    const ttl = await within((clients[0] as Client).pTTL(fence));
    expect(ttl).toBeGreaterThan(50_000);
    expect(ttl).toBeLessThanOrEqual(60_000);
    const busy = await node().acquire({ name, ownershipToken: 'owner-2', ttlMs: 5_000 }, signal);
    expect(busy.granted).toBe(false);
    if (!busy.granted) expect(busy.holderTtlMs).toBeGreaterThan(4_000);
  });

  it('mint raises only from below the token, only while the grant holds the key', async () => {
    const name = lockName('mint');
    const n = node();
    const reply = await n.acquire({ name, ownershipToken: 'owner-1', ttlMs: 5_000 }, signal);
    if (!reply.granted) throw new Error('expected a claim');
    const token = reply.counter + 1n;
    expect(await n.mint({ name, ownershipToken: 'someone-else', fencingToken: token + 5n }, signal)).toBe(
      false,
    );
    expect(await n.mint({ name, ownershipToken: 'owner-1', fencingToken: token }, signal)).toBe(true);
    // Equal is not a raise: a counter already at the token was raised by another grant.
    expect(await n.mint({ name, ownershipToken: 'owner-1', fencingToken: token }, signal)).toBe(false);
    expect(await n.mint({ name, ownershipToken: 'owner-1', fencingToken: token - 1n }, signal)).toBe(false);
    const { fence } = redlockKeys('dlock:redlock:', name);
    expect(await within((clients[0] as Client).get(fence))).toBe(token.toString());
  });

  it('renew extends, retakes a vanished key with the counter raised, and refuses another owner', async () => {
    const n = node();
    const [mine, vanished, taken] = [lockName('r1'), lockName('r2'), lockName('r3')];
    await n.acquire({ name: mine, ownershipToken: 'me', ttlMs: 1_000 }, signal);
    await n.acquire({ name: taken, ownershipToken: 'other', ttlMs: 5_000 }, signal);
    const big = 9_000_000_000_000_000n; // above any clock seed
    const replies = await n.renew(
      [
        { name: mine, ownershipToken: 'me', fencingToken: 1n, ttlMs: 8_000 },
        { name: vanished, ownershipToken: 'me', fencingToken: big, ttlMs: 8_000 },
        { name: taken, ownershipToken: 'me', fencingToken: 1n, ttlMs: 8_000 },
      ],
      signal,
    );
    expect(replies).toEqual(['extended', 'retaken', 'refused']);
    const redis = clients[0] as Client;
    expect(await within(redis.pTTL(redlockKeys('dlock:redlock:', mine).lock))).toBeGreaterThan(7_000);
    // Marked: it proves nothing about the time it was missing, so the next renewal answers it `retaken` too.
    expect(await within(redis.get(redlockKeys('dlock:redlock:', vanished).lock))).toBe('me r');
    expect(await within(redis.get(redlockKeys('dlock:redlock:', vanished).fence))).toBe(big.toString());
    expect(await within(redis.get(redlockKeys('dlock:redlock:', taken).lock))).toBe('other');
    expect(await n.release({ name: taken, ownershipToken: 'me', notice: '1' }, signal)).toBe('other');
    expect(await n.release({ name: mine, ownershipToken: 'me', notice: '1' }, signal)).toBe('deleted');
    expect(await n.release({ name: mine, ownershipToken: 'me', notice: '1' }, signal)).toBe('absent');
    expect(await n.release({ name: vanished, ownershipToken: 'me', notice: '1' }, signal)).toBe('retaken');
  });

  it('after the node lost its script cache: falls back to EVAL, and a re-sent renewal never re-takes', async () => {
    const n = node();
    const name = lockName('noscript');
    const redis = clients[0] as Client;
    await within(redis.scriptFlush());
    const reply = await n.acquire({ name, ownershipToken: 'x', ttlMs: 5_000 }, signal);
    expect(reply.granted).toBe(true);
    const renewal = { name, ownershipToken: 'x', fencingToken: 1n, ttlMs: 5_000 };
    await within(redis.scriptFlush());
    expect(await n.renew([renewal], signal)).toEqual(['extended']);
    // The re-sent copy may run after a release sent meanwhile: it must leave a deleted key deleted.
    await within(redis.del(redlockKeys('dlock:redlock:', name).lock));
    await within(redis.scriptFlush());
    expect(await n.renew([renewal], signal)).toEqual(['missing']);
    expect(await within(redis.exists(redlockKeys('dlock:redlock:', name).lock))).toBe(0);
    // With the script cached, the same renewal re-takes the vanished key.
    expect(await n.renew([renewal], signal)).toEqual(['retaken']);
  });
});

describe('RedlockService on 3 real nodes', () => {
  let subject: RedlockService | undefined;
  lockServiceContract(
    'RedlockService (3 redis-server nodes)',
    () => {
      subject = service(three());
      return { service: subject, close: () => subject?.close() };
    },
    {
      ttlMs: 500,
      // Calls after close() must say CLIENT_CLOSED.
      closeService: async () => {
        await subject?.close();
      },
      faults: restartFaults(3),
    },
  );
});

describe('RedlockService on 3 real nodes, through node-redis 6 clients', () => {
  const clients6: Redis6[] = [];
  beforeAll(async () => {
    clients6.push(...(await Promise.all(servers.slice(0, 3).map((s) => connect6(s.url)))));
  });
  afterAll(() => {
    for (const client of clients6) client.destroy();
  });
  let subject: RedlockService | undefined;
  lockServiceContract(
    'RedlockService (node-redis 6)',
    () => {
      subject = new RedlockService({ clients: clients6, nodeTimeoutMs: NODE_TIMEOUT_MS });
      return { service: subject, close: () => subject?.close() };
    },
    {
      ttlMs: 500,
      closeService: async () => {
        await subject?.close();
      },
    },
  );
});

/** A contract suite on the first `count` of `nodes` (their clients read when each test starts). */
function contractOn(label: string, nodes: () => readonly Connected[], count: number): void {
  let subject: RedlockService | undefined;
  lockServiceContract(
    label,
    () => {
      subject = service(
        nodes()
          .slice(0, count)
          .map((c) => c.client),
      );
      return { service: subject, close: () => subject?.close() };
    },
    {
      ttlMs: 500,
      closeService: async () => {
        await subject?.close();
      },
      faults: restartFaults(count),
    },
  );
}

// ioredis nodes: on 3 and 5 servers with ioredis 5, on 3 with ioredis 6 (RESP3).
for (const family of IOREDIS) {
  describe(`RedlockService through ${family.label} clients`, () => {
    const nodes = clientsOf((url) => family.connect(url));
    for (const count of family === FAMILY_PAIR[1] ? [3, 5] : [3]) {
      contractOn(`RedlockService (${family.label}, ${count} redis-server nodes)`, () => nodes, count);
    }
  });
}

// One deployment mixing the families: node i is reached through FAMILIES[i] (node-redis and ioredis side by side).
describe('RedlockService on 5 real nodes, each through another client family', () => {
  const familyOf = (i: number) => FAMILIES[i % FAMILIES.length] as (typeof FAMILIES)[number];
  const nodes = clientsOf((url, i) => familyOf(i).connect(url));
  const labels = [0, 1, 2, 3, 4].map((i) => familyOf(i).label).join(', ');
  contractOn(`RedlockService (mixed: ${labels})`, () => nodes, 5);
});

/** The clients a fault suite builds its services from: node-redis 5 (`clients`) or another family's. */
interface NodeSet {
  /** The services' clients, one per server. */
  nodes(): readonly object[];
  /** A client of this family on `url` (a proxy), and how to drop it at once (its replies may be out of step). */
  connect(url: string): Promise<{ client: object; ready(): boolean; drop(): void }>;
}

const NODE_REDIS: NodeSet = {
  nodes: () => clients,
  async connect(url) {
    const client = await connect(url);
    return { client, ready: () => client.isReady, drop: () => client.destroy() };
  },
};

/** The fault and timing tests with services on `set`'s clients; the probes stay the node-redis `clients`. */
function faultSuites(set: NodeSet): void {
  const firstNodes = (count: number): readonly object[] => set.nodes().slice(0, count);

  /**
   * Nodes 0 to `count - 1` behind proxies a test can break, each through a new client of the suite's family; nodes
   * `count` to 2 direct. `close` drops those clients (their reply streams may be out of step) and the proxies.
   */
  async function behindProxies(count: number) {
    const proxies: TcpProxy[] = await Promise.all(
      servers.slice(0, count).map((s) => startTcpProxy({ targetPort: s.port })),
    );
    const proxied = await Promise.all(proxies.map((p) => set.connect(`redis://127.0.0.1:${p.port}`)));
    return {
      proxies,
      proxied,
      /** The 3 nodes' clients, the proxied ones first. */
      clients: [...proxied.map((c) => c.client), ...firstNodes(3).slice(count)] as RedlockClientLike[],
      async close(): Promise<void> {
        for (const c of proxied) c.drop();
        await Promise.all(proxies.map((p) => p.close()));
      },
    };
  }

  /**
   * `mine` holds a lease (TTL 30 s); nodes 0 and 1 lose its keys (restart, eviction), and `rival` takes the lock
   * on them.
   */
  async function rivalTakesOver(mine: RedlockService, rival: RedlockService, label: string) {
    const name = lockName(label);
    const { lock: lockKey } = redlockKeys('dlock:redlock:', name);
    const request = { name, ownerId: 'test', waitMs: 0, signal: new AbortController().signal };
    const first = await mine.acquire({ ...request, ttlMs: 30_000 });
    if (!first.acquired) throw new Error('not granted');
    await within((clients[0] as Client).del(lockKey));
    await within((clients[1] as Client).del(lockKey));
    const taken = await rival.acquire({ ...request, ttlMs: 30_000 });
    if (!taken.acquired) throw new Error('rival not granted');
    return {
      lockKey,
      lease: { name, ownerId: 'test', ...first.grant },
      rivalLease: { name, ownerId: 'test', ...taken.grant },
    };
  }

  /**
   * `mine`'s release of `lease`, whose try on node 0 is written and then cut off: the connection drops, and the
   * proxy refuses connections for 200 ms. Answers what the release answered, or its error.
   */
  async function releaseCutOffOnNode0(mine: RedlockService, lease: Lease, proxy: TcpProxy): Promise<unknown> {
    proxy.mode = 'blackhole';
    const release = mine.release(lease).catch((error: unknown) => error);
    await sleep(50);
    proxy.mode = 'refuse';
    proxy.resetAll();
    setTimeout(() => {
      proxy.mode = 'pass';
    }, 200);
    return release;
  }

  describe('RedlockService faults on real servers', () => {
    it('one of three nodes down: locks are still granted and tokens still increase, also after it returns empty', async () => {
      const locks = new LockClient(service(firstNodes(3)), { operationTimeoutMs: 2_000 });
      const { takeTurn, tokens } = turns(locks, lockName('one-down'));
      await takeTurn();
      await takeDown(2);
      for (let i = 0; i < 4; i++) await takeTurn();
      await restartEmpty(2);
      for (let i = 0; i < 3; i++) await takeTurn();
      await locks.close();
      expect(tokens).toHaveLength(8);
      expectIncreasing(tokens);
    });

    it('renewMany with a node down: a lease the nodes can neither confirm nor refuse is not renewed; renew says so', async () => {
      const redlock = service(firstNodes(3));
      const signal = new AbortController().signal;
      const grab = async (label: string) => {
        const name = lockName(label);
        const result = await redlock.acquire({ name, ownerId: 'test', ttlMs: 5_000, waitMs: 0, signal });
        if (!result.acquired) throw new Error('expected a grant');
        const { ownershipToken, fencingToken } = result.grant;
        return { lease: { name, ownerId: 'test', ownershipToken, fencingToken }, ttlMs: 5_000 };
      };
      const [sound, shaky] = [await grab('sound'), await grab('shaky')];
      await takeDown(2);
      try {
        // Node 1 loses the shaky lease's key: node 0 still confirms it, node 1 only retakes it, node 2 is silent.
        await within((clients[1] as Client).del(redlockKeys('dlock:redlock:', shaky.lease.name).lock));
        expect(await redlock.renewMany([sound, shaky])).toEqual([{ renewed: true }, { renewed: false }]);
        // Alone, the same undecided lease is a transport error (core keeps its last proven validity).
        const again = await grab('shaky-again');
        await within((clients[1] as Client).del(redlockKeys('dlock:redlock:', again.lease.name).lock));
        await expect(redlock.renew(again)).rejects.toBeInstanceOf(TransportError);
        expect(await redlock.renew(sound)).toEqual({ renewed: true });
        expect(await redlock.release(sound.lease)).toBe(true);
      } finally {
        await restartEmpty(2);
      }
    });

    it('two of three nodes down: acquisition fails cleanly within its wait budget, and works again after', async () => {
      const locks = new LockClient(service(firstNodes(3)), { operationTimeoutMs: 2_000 });
      const name = lockName('two-down');
      const before = await locks.acquire(name, { ttlMs: 2_000 });
      await before.release();

      await takeDown(0);
      servers[1]?.process.pause(); // one down, one hung: neither may make the call wait past its budget
      try {
        const waitMs = 600;
        const startedAt = performance.now();
        const error = await rejection(locks.acquire(name, { ttlMs: 2_000, waitMs }));
        const elapsed = performance.now() - startedAt;
        expect(error instanceof TransportError || error instanceof AcquireTimeoutError).toBe(true);
        expect(error).toBeInstanceOf(TransportError); // "no quorum reachable", not "busy"
        expect(elapsed).toBeGreaterThanOrEqual(waitMs - 50);
        // waitMs, plus at most one more attempt's two rounds, plus slack for a busy machine.
        expect(elapsed).toBeLessThan(waitMs + 2 * NODE_TIMEOUT_MS + 1_500);
        // A single attempt (waitMs 0) is bounded by one round.
        const once = performance.now();
        await expect(locks.acquire(name, { ttlMs: 2_000 })).rejects.toBeInstanceOf(TransportError);
        expect(performance.now() - once).toBeLessThan(NODE_TIMEOUT_MS + 1_000);
      } finally {
        servers[1]?.process.resume();
        await restartEmpty(0);
      }
      const after = await locks.acquire(name, { ttlMs: 2_000, waitMs: 2_000 });
      expect(after.fencingToken).toBeGreaterThan(before.fencingToken);
      await locks.close();
    });

    it('a node restarted empty between grants, and the only node shared by both majorities: tokens still increase', async () => {
      // Node 2 is reached through a proxy, so it can be cut off with its data intact and without commands queued for
      // it (a paused server would run them on resume and learn the token after all).
      const proxy = await startTcpProxy({ targetPort: (servers[2] as RedisServer).port });
      const viaProxy = await set.connect(`redis://127.0.0.1:${proxy.port}`);
      const redlock = service([...firstNodes(2), viaProxy.client]);
      const locks = new LockClient(redlock, { operationTimeoutMs: 2_000 });
      const name = lockName('restart-between');
      try {
        // Warm the name on every node, so node 2 holds an old counter.
        await (await locks.acquire(name, { ttlMs: 2_000 })).release();
        // A release returns once a majority deleted; let node 2's delete land before cutting it off.
        const { lock: lockKey } = redlockKeys('dlock:redlock:', name);
        for (let i = 0; i < 100 && (await within((clients[2] as Client).exists(lockKey))) > 0; i++)
          await sleep(10);
        proxy.mode = 'blackhole';
        const a = await locks.acquire(name, { ttlMs: 2_000, waitMs: 1_000 }); // majority {0, 1}
        await a.release();
        proxy.resetAll();
        proxy.mode = 'pass';
        await restartEmpty(1); // node 1 forgets A's token; node 2 never saw it
        await until(() => viaProxy.ready());
        servers[0]?.process.pause();
        try {
          const b = await locks.acquire(name, { ttlMs: 2_000, waitMs: 1_000 }); // majority {1, 2}
          expect(b.fencingToken).toBeGreaterThan(a.fencingToken);
          await b.release();
        } finally {
          servers[0]?.process.resume();
        }
      } finally {
        await locks.close();
        viaProxy.drop();
        await proxy.close();
      }
    });

    it('a paused node: acquire, renewals and release stay bounded and the lock is held throughout', async () => {
      const redlock = service(firstNodes(3));
      const locks = new LockClient(redlock, { operationTimeoutMs: 2_000 });
      const other = new LockClient(service(firstNodes(3)), { operationTimeoutMs: 2_000 });
      const name = lockName('paused');
      servers[0]?.process.pause();
      try {
        let startedAt = performance.now();
        const handle = await locks.acquire(name, { ttlMs: 600, waitMs: 1_000 });
        // Two nodes answering make the quorum: the call does not wait for the paused one.
        expect(performance.now() - startedAt).toBeLessThan(NODE_TIMEOUT_MS + 500);
        let renewals = 0;
        locks.events.on('renewed', () => {
          renewals += 1;
        });
        await sleep(1_500); // 2.5 TTLs: renewals must keep it
        expect(renewals).toBeGreaterThanOrEqual(2);
        expect(handle.state).toBe('held');
        expect(await other.tryAcquire(name, { ttlMs: 600 })).toBeNull();
        startedAt = performance.now();
        await handle.release();
        expect(performance.now() - startedAt).toBeLessThan(NODE_TIMEOUT_MS + 500);
        const next = await other.acquire(name, { ttlMs: 600, waitMs: 1_000 });
        expect(next.fencingToken).toBeGreaterThan(handle.fencingToken);
        await next.release();
      } finally {
        servers[0]?.process.resume();
      }
      await Promise.all([locks.close(), other.close()]);
    });

    it('a release that only a node without the key answered is unknown, not "taken from you"', async () => {
      const locks = new LockClient(service(firstNodes(3)), { operationTimeoutMs: 2_000 });
      const other = new LockClient(service(firstNodes(3)), { operationTimeoutMs: 2_000 });
      const name = lockName('minority-release');
      const { lock: lockKey } = redlockKeys('dlock:redlock:', name);
      await takeDown(0);
      // Granted on {1, 2}; a long TTL, so no renewal re-takes the key on node 0 during the test.
      const handle = await locks.acquire(name, { ttlMs: 30_000 });
      await restartEmpty(0);
      servers[1]?.process.pause();
      servers[2]?.process.pause();
      let error: unknown;
      try {
        // Node 0 answers "not here"; the two nodes that hold the lock say nothing within the round.
        error = await rejection(handle.release());
      } finally {
        servers[1]?.process.resume();
        servers[2]?.process.resume();
      }
      // Before the fix: LockLostError (reason 'rejected'), while the lease held a majority and nobody else could
      // take it.
      expect(error).toBeInstanceOf(TransportError);
      expect(error).not.toBeInstanceOf(LockLostError);
      // The deletes written to the paused nodes ran when they resumed: the lock is free.
      expect(await holdersSoon(lockKey, 2_000)).toBe(0);
      const next = await other.tryAcquire(name, { ttlMs: 2_000 });
      expect(next?.fencingToken).toBeGreaterThan(handle.fencingToken);
      await next?.release();
      await Promise.all([locks.close(), other.close()]);
    });

    it('renewal retakes the key on a node that restarted empty, so a later second restart does not lose the lock', async () => {
      const locks = new LockClient(service(firstNodes(3)), { operationTimeoutMs: 2_000 });
      const name = lockName('heal');
      const { lock: lockKey } = redlockKeys('dlock:redlock:', name);
      const handle = await locks.acquire(name, { ttlMs: 900 });
      await restartEmpty(0);
      await sleep(1_000); // renewals every ~300 ms; the first after the restart may find no scripts cached
      expect(await within((clients[0] as Client).exists(lockKey))).toBe(1);
      await restartEmpty(1);
      await sleep(1_000);
      expect(handle.state).toBe('held');
      expect(await holders(lockKey)).toBe(3);
      await handle.release();
      // release returns once a majority deleted; the last node follows within a round trip.
      expect(await holdersSoon(lockKey, 1_000)).toBe(0);
      await locks.close();
    });

    it('a takeover on a majority: the old holder is told Lost (rejected), the new one has a higher token', async () => {
      const a = new LockClient(service(firstNodes(3)), { operationTimeoutMs: 2_000 });
      const b = new LockClient(service(firstNodes(3)), { operationTimeoutMs: 2_000 });
      const name = lockName('takeover');
      const { lock: lockKey } = redlockKeys('dlock:redlock:', name);
      const lost = new Promise<string>((resolve) => {
        a.events.on('lost', (event) => resolve(event.reason));
      });
      const first = await a.acquire(name, { ttlMs: 900 });
      // Nodes 0 and 1 forget the grant, as if their keys had expired early (restart, clock jump).
      await within((clients[0] as Client).del(lockKey));
      await within((clients[1] as Client).del(lockKey));
      const second = await b.acquire(name, { ttlMs: 900 });
      expect(second.fencingToken).toBeGreaterThan(first.fencingToken);
      expect(await within(lost)).toBe('rejected');
      expect(first.state).toBe('lost');
      await second.release();
      await Promise.all([a.close(), b.close()]);
    });

    it('a renewal is not confirmed by keys an earlier, undecided renewal re-took after a rival held the lock', async () => {
      const mine = service(firstNodes(3));
      const rival = service(firstNodes(3));
      // The rival holds the lock on nodes 0 and 1, then lets go.
      const { lockKey, lease, rivalLease } = await rivalTakesOver(mine, rival, 'retaken-then-extended');
      expect(rivalLease.fencingToken).toBeGreaterThan(lease.fencingToken);
      expect(await rival.release(rivalLease)).toBe(true);
      // A renewal that only node 2 answers in time: undecided. Nodes 0 and 1 run it when they resume, re-taking
      // the keys the rival left.
      servers[0]?.process.pause();
      servers[1]?.process.pause();
      let undecided: unknown;
      try {
        undecided = await rejection(mine.renew({ lease, ttlMs: 30_000 }));
      } finally {
        servers[0]?.process.resume();
        servers[1]?.process.resume();
      }
      expect(undecided).toBeInstanceOf(TransportError);
      expect(await holdersSoonAtLeast(lockKey, 3, 2_000)).toBe(3);
      // Before the fix: renewed (three nodes "extended"), while the rival had held the lock, with a higher token,
      // since this lease's last confirmed renewal.
      expect(await mine.renew({ lease, ttlMs: 30_000 })).toEqual({ renewed: false });
      await Promise.all([mine.close(), rival.close()]);
    });

    it('a release is not "released" when the lease lost its majority to a rival meanwhile', async () => {
      const mine = service(firstNodes(3));
      const rival = service(firstNodes(3));
      const { lease, rivalLease } = await rivalTakesOver(mine, rival, 'release-after-takeover');
      // Node 1 answers "not held" and node 2 deletes this lease's key; node 0 (the rival's) says nothing in time.
      servers[0]?.process.pause();
      let outcome: unknown;
      try {
        outcome = await mine.release(lease).catch((error: unknown) => error);
      } finally {
        servers[0]?.process.resume();
      }
      // Before the fix: true ("released"), from one delete among two answers, while the rival held the lock. One
      // node's key proves no majority: the outcome is unknown.
      expect(outcome).toBeInstanceOf(TransportError);
      // With every node answering, it is "lost": only node 2 still had this lease's key.
      expect(await mine.release(lease)).toBe(false);
      expect(await rival.release(rivalLease)).toBe(true);
      await Promise.all([mine.close(), rival.close()]);
    });

    it('replies lost on every node: the acquire fails, and the claims it may have made are deleted, not left to the TTL', async () => {
      const nodes = await behindProxies(3);
      const name = lockName('lost-replies');
      const { lock: lockKey } = redlockKeys('dlock:redlock:', name);
      try {
        for (const proxy of nodes.proxies) proxy.dropReplies(true);
        const redlock = service(nodes.clients);
        const startedAt = performance.now();
        await expect(
          redlock.acquire({
            name,
            ownerId: 'test',
            ttlMs: 10_000,
            waitMs: 0,
            signal: new AbortController().signal,
          }),
        ).rejects.toBeInstanceOf(TransportError);
        expect(performance.now() - startedAt).toBeLessThan(NODE_TIMEOUT_MS + 1_000);
        // The SETs did land (only the replies were lost) ...
        // ... and the cleanup deletes, which also reach the servers, removed them long before the 10 s TTL.
        expect(await holdersSoon(lockKey, 2_000)).toBe(0);
      } finally {
        await nodes.close();
      }
    });
  });

  describe('RedlockService: claims whose connections dropped before the reply', () => {
    it('are undone once the connections are back, not left for their TTL', async () => {
      // Nodes 0 and 1 through proxies that lose the claims' replies and then reset the connections; node 2 direct.
      const nodes = await behindProxies(2);
      const { proxies, proxied } = nodes;
      const redlock = new RedlockService({ clients: nodes.clients, requestTimeoutMs: 2_000 });
      const other = new LockClient(service(firstNodes(3)), { operationTimeoutMs: 2_000 });
      const name = lockName('reset-claims');
      const { lock: lockKey } = redlockKeys('dlock:redlock:', name);
      try {
        // Cached, so the claims run as sent (a NOSCRIPT answer would be lost too, and the claim never re-sent).
        for (const client of three()) await within(client.sendCommand(['SCRIPT', 'LOAD', ACQUIRE.source]));
        for (const proxy of proxies) proxy.dropReplies(true);
        const attempt = rejection(
          redlock.acquire({
            name,
            ownerId: 'test',
            ttlMs: 30_000,
            waitMs: 0,
            signal: new AbortController().signal,
          }),
        );
        // Every claim landed; only node 2's answer came back.
        expect(await holdersSoonAtLeast(lockKey, 3, 1_000)).toBe(3);
        for (const proxy of proxies) {
          proxy.dropReplies(false);
          proxy.resetAll();
        }
        expect(await attempt).toBeInstanceOf(TransportError);
        await until(() => proxied.every((c) => c.ready()), 'proxied clients reconnect');
        // Before the fix: the clean-up was tried once, while the two clients were reconnecting, and failed at once;
        // the claims then held the free lock for their whole 30 s TTL.
        expect(await holdersSoon(lockKey, 3_000)).toBe(0);
        const next = await other.tryAcquire(name, { ttlMs: 2_000 });
        expect(next?.isHeld()).toBe(true);
        await next?.release();
      } finally {
        await Promise.all([redlock.close(), other.close()]);
        await nodes.close();
      }
    });
  });

  describe('RedlockService: a release whose try on a node was cut off', () => {
    it('does not count a key held by someone else on the retry as its own delete', async () => {
      // Node 0 through a proxy; nodes 1 and 2 direct.
      const nodes = await behindProxies(1);
      const proxy = nodes.proxies[0] as TcpProxy;
      const mine = new RedlockService({ clients: nodes.clients, requestTimeoutMs: 2_000 });
      const rival = service(firstNodes(3));
      try {
        // The rival holds the lock on nodes 0 and 1.
        const { lease, rivalLease } = await rivalTakesOver(mine, rival, 'release-retry-other');
        // The release's try on node 0 may have been applied, so it is tried again once the client is back, and
        // then finds the rival's key.
        const release = releaseCutOffOnNode0(mine, lease, proxy);
        // Before the fix: true ("released"), node 0's "not held" taken for this release's own earlier delete, while
        // the rival held nodes 0 and 1. Node 1 and node 0 hold another owner's key: the lease was lost.
        expect(await release).toBe(false);
        expect(await rival.release(rivalLease)).toBe(true);
      } finally {
        proxy.mode = 'pass';
        await Promise.all([mine.close(), rival.close()]);
        await nodes.close();
      }
    });
  });

  describe('RedlockService: a release whose try on a node was cut off, on a lease that lost its majority', () => {
    it('does not count no key on the retry as its own delete when it cannot know: not "released"', async () => {
      // Node 0 through a proxy; nodes 1 and 2 direct.
      const nodes = await behindProxies(1);
      const proxy = nodes.proxies[0] as TcpProxy;
      const mine = new RedlockService({ clients: nodes.clients, requestTimeoutMs: 2_000 });
      const rival = service(firstNodes(3));
      try {
        // The rival takes the lock on nodes 0 and 1 and lets it go again.
        const { lease, rivalLease } = await rivalTakesOver(mine, rival, 'release-retry-absent');
        expect(await rival.release(rivalLease)).toBe(true);
        // The release's try on node 0 is tried again once the client is back and finds no key, which it would also
        // find had the first try deleted this lease's key.
        const release = releaseCutOffOnNode0(mine, lease, proxy);
        // Before the fix: true ("released"), node 0's "no key" taken for this release's own delete, while the rival
        // had held nodes 0 and 1. Node 2's delete is the only one known: the outcome cannot be told.
        expect(await release).toBeInstanceOf(TransportError);
      } finally {
        proxy.mode = 'pass';
        await Promise.all([mine.close(), rival.close()]);
        await nodes.close();
      }
    });
  });

  describe('RedlockService: a release while two nodes reconnect', () => {
    it('is tried again on them within its bound: "released" only once no majority can hold the lock', async () => {
      // Nodes 0 and 1 through proxies that drop every connection and refuse new ones for 300 ms; node 2 direct.
      const nodes = await behindProxies(2);
      const { proxies, proxied } = nodes;
      const redlock = new RedlockService({ clients: nodes.clients, requestTimeoutMs: 2_000 });
      const locks = new LockClient(redlock, { operationTimeoutMs: 3_000 });
      const other = new LockClient(service(firstNodes(3)), { operationTimeoutMs: 2_000 });
      const name = lockName('release-reconnect');
      const { lock: lockKey } = redlockKeys('dlock:redlock:', name);
      try {
        const handle = await locks.acquire(name, { ttlMs: 30_000 });
        expect(await holders(lockKey)).toBe(3);
        for (const proxy of proxies) {
          proxy.mode = 'refuse';
          proxy.resetAll();
        }
        await until(() => proxied.every((c) => !c.ready()), 'proxied clients notice');
        setTimeout(() => {
          for (const proxy of proxies) proxy.mode = 'pass';
        }, 300);
        const outcome = await handle.release().then(
          () => 'released',
          (error: unknown) => error,
        );
        // Before the fix: 'released' at once (node 2 deleted its key), while nodes 0 and 1, a majority, kept theirs
        // for the whole 30 s TTL and nobody could take the lock.
        expect(outcome).toBe('released');
        // It answers once a majority deleted; the last node's try follows within a round trip.
        expect(await holdersSoon(lockKey, 1_000)).toBe(0);
        const next = await other.tryAcquire(name, { ttlMs: 2_000 });
        expect(next?.fencingToken).toBeGreaterThan(handle.fencingToken);
        await next?.release();
      } finally {
        for (const proxy of proxies) proxy.mode = 'pass';
        await Promise.all([locks.close().catch(() => {}), other.close()]);
        await nodes.close();
      }
    });
  });

  describe('RedlockService: the claims of an acquire whose replies were lost', () => {
    const OPERATION_TIMEOUT_MS = 1_000;

    for (const cache of ['every script cached', 'only the claim script cached'] as const) {
      it(`are undone within operationTimeoutMs + 1 s of core giving up, while replies keep being lost (${cache})`, async () => {
        const nodes = await behindProxies(3);
        // Rounds bounded by more than core's operation timeout: core gives up on the call first.
        const holder = new LockClient(
          new RedlockService({
            clients: nodes.clients,
            nodeTimeoutMs: 3_000,
          }),
          {
            operationTimeoutMs: OPERATION_TIMEOUT_MS,
          },
        );
        const contender = new LockClient(service(firstNodes(3)), { operationTimeoutMs: 2_000 });
        const name = lockName('stray-claims');
        const { lock: lockKey } = redlockKeys('dlock:redlock:', name);
        try {
          for (const client of three()) {
            if (cache === 'every script cached') {
              for (const script of [ACQUIRE, MINT, RENEW, RELEASE]) {
                await within(client.sendCommand(['SCRIPT', 'LOAD', script.source]));
              }
            } else {
              // The release script gone from the cache (evicted, flushed) while the claim script is still there.
              await within(client.sendCommand(['SCRIPT', 'FLUSH']));
              await within(client.sendCommand(['SCRIPT', 'LOAD', ACQUIRE.source]));
            }
          }
          for (const proxy of nodes.proxies) proxy.dropReplies(true);
          const startedAt = performance.now();
          const failed = holder.acquire(name, { ttlMs: 10_000 }).catch((error: unknown) => error);
          // The claims did land (only the replies are lost): a lock nobody will use, for 10 s.
          expect(await holdersSoonAtLeast(lockKey, 2, 1_000)).toBeGreaterThanOrEqual(2);
          // Watched with plain EXISTS: a Redlock contender's own clean-ups would load the scripts into the cache.
          expect(await holdersSoon(lockKey, 3_000)).toBe(0);
          const after = performance.now() - startedAt;
          expect(await failed).toBeInstanceOf(TransportError);
          // Before the fix: the claims stayed until the round's own 3 s deadline, and for their whole TTL when the
          // release script had to be re-sent after a NOSCRIPT that was lost.
          expect(after).toBeLessThanOrEqual(OPERATION_TIMEOUT_MS + 1_000);
          const next = await contender.tryAcquire(name, { ttlMs: 10_000 });
          expect(next?.isHeld()).toBe(true);
          await next?.release();
        } finally {
          await Promise.all([holder.close(), contender.close()]);
          await nodes.close();
        }
      });
    }
  });

  describe('RedlockService on 5 real nodes', () => {
    it('two of five down: still granted with increasing tokens; three down: fails cleanly', async () => {
      const redlock = service(firstNodes(5));
      expect(redlock.quorum).toBe(3);
      const locks = new LockClient(redlock, { operationTimeoutMs: 2_000 });
      const name = lockName('five');
      const { takeTurn, tokens } = turns(locks, name);
      await takeTurn();
      await takeDown(3);
      servers[4]?.process.pause();
      try {
        for (let i = 0; i < 3; i++) await takeTurn();
        servers[0]?.process.pause();
        try {
          const startedAt = performance.now();
          await expect(locks.acquire(name, { ttlMs: 2_000, waitMs: 300 })).rejects.toBeInstanceOf(
            TransportError,
          );
          expect(performance.now() - startedAt).toBeLessThan(300 + 2 * NODE_TIMEOUT_MS + 1_500);
        } finally {
          servers[0]?.process.resume();
        }
      } finally {
        servers[4]?.process.resume();
      }
      await restartEmpty(3);
      await takeTurn();
      expect(tokens).toHaveLength(5);
      expectIncreasing(tokens);
      await locks.close();
    });
  });
}

faultSuites(NODE_REDIS);

describe(`RedlockService through ${(FAMILY_PAIR[1] as Family).label} clients: faults`, () => {
  const family = FAMILY_PAIR[1] as Family;
  const nodes = clientsOf((url) => family.connect(url));
  faultSuites({
    nodes: () => nodes.map((c) => c.client),
    async connect(url) {
      const connected = await family.connect(url);
      const { client } = connected;
      return { client, ready: () => clientReady(client), drop: () => void connected.close() };
    },
  });
});
