import { type ChildProcess, fork } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { fileURLToPath } from 'node:url';
import { type Leadership, type Lease, LockClient, UnsupportedError } from '@dlock/core';
import { FencingGate, StaleFencingTokenError } from '@dlock/fencing-pg';
import {
  PG_URL,
  REDIS_URL,
  type RedisCluster,
  startRedisCluster,
  startTcpProxy,
  uniqueName,
} from '@dlock/test-utils';
import { type ContractSubject, electionContract } from '@dlock/testing/contract';
import pg from 'pg';
import { RESP_TYPES } from 'redis';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { lockKeys, type RedisClientLike, RedisLockService, RedlockService } from '../src/index.js';
import { changeChannel } from '../src/keys.js';
import { CLUSTER_FAMILIES, FAMILY_PAIR } from './clients.js';
import { commandCalls, connect, disconnect, eventually, type Redis, SideRedis, sleep } from './helpers.js';

// Elections on RedisLockService: core's election contract on the shared server (node-redis and ioredis) and on a real
// 3-master cluster (every cluster client family), then what the lock key stores for them on a private server.

for (const family of FAMILY_PAIR) {
  electionContract(
    `RedisLockService (${family.label})`,
    async (): Promise<ContractSubject> => {
      const connected = await family.connect(REDIS_URL);
      const service = new RedisLockService({
        client: connected.client as RedisClientLike,
        keyPrefix: 'dlock-election:',
        fenceRetentionMs: 60_000,
      });
      return {
        service,
        close: async () => {
          await service.close();
          await connected.close();
        },
      };
    },
    { fifo: true },
  );
}

describe('on a 3-master cluster', () => {
  let cluster: RedisCluster;
  beforeAll(async () => {
    cluster = await startRedisCluster({ masters: 3 });
    // An election's first grant on a master up for less than its TTL waits for that (see the restart test below).
    for (const node of cluster.nodes) {
      for (;;) {
        const info = String(await cluster.command(node.port, 'INFO', 'server'));
        if (Number(/uptime_in_seconds:(\d+)/.exec(info)?.[1]) * 1_000 >= 2_000) break;
        await sleep(200);
      }
    }
  }, 30_000);
  afterAll(async () => {
    await cluster?.stop();
  });
  for (const family of CLUSTER_FAMILIES) {
    electionContract(
      `RedisLockService on a cluster (${family.label})`,
      async (): Promise<ContractSubject> => {
        const connected = await family.connect(cluster.rootNodes);
        const service = new RedisLockService({
          client: connected.client as RedisClientLike,
          keyPrefix: 'dlock-election:',
          fenceRetentionMs: 60_000,
        });
        return {
          service,
          close: async () => {
            await service.close();
            await connected.close();
          },
        };
      },
      { fifo: true },
    );
  }
});

it('RedlockService refuses elections: it has no inspect or updateMetadata', async () => {
  const client = await connect(REDIS_URL);
  const service = new RedlockService({ clients: [client] });
  const locks = new LockClient(service);
  try {
    expect(() => locks.election('e', { ttlMs: 1_000 })).toThrow(UnsupportedError);
    expect('inspect' in service).toBe(false);
    expect('updateMetadata' in service).toBe(false);
  } finally {
    await locks.close();
    await service.close();
    await disconnect(client);
  }
});

/** Waits until the server has been up for `ms` (an election's first grant on a younger server waits for that). */
async function upFor(client: Redis, ms: number): Promise<void> {
  for (;;) {
    const info = (await client.sendCommand(['INFO', 'server'])) as string;
    const up = Number(/uptime_in_seconds:(\d+)/.exec(info)?.[1]);
    if (up * 1_000 >= ms) return;
    await sleep(200);
  }
}

const neverAborted = new AbortController().signal;

describe('on a private server', () => {
  let side: SideRedis;
  let admin: Redis;
  const cleanups: (() => Promise<void>)[] = [];

  async function serviceOn(url: string, subscriberUrl?: string): Promise<RedisLockService> {
    const client = await connect(url);
    const subscriber = subscriberUrl === undefined ? undefined : await connect(subscriberUrl);
    const service = new RedisLockService({ client, ...(subscriber === undefined ? {} : { subscriber }) });
    cleanups.push(async () => {
      await service.close();
      if (subscriber !== undefined) await disconnect(subscriber);
      await disconnect(client);
    });
    return service;
  }

  async function take(
    service: RedisLockService,
    name: string,
    options: { ttlMs?: number; waitMs?: number; metadata?: string } = {},
  ): Promise<Lease | null> {
    const { ttlMs = 3_000, waitMs = 0, metadata } = options;
    const result = await service.acquire({
      name,
      ownerId: 'test',
      ttlMs,
      waitMs,
      signal: neverAborted,
      ...(metadata === undefined ? {} : { metadata }),
    });
    return result.acquired ? { name, ownerId: 'test', ...result.grant } : null;
  }

  async function cycle(service: RedisLockService, name: string, metadata?: string): Promise<Lease> {
    const lease = await take(service, name, metadata === undefined ? {} : { metadata });
    if (lease === null) throw new Error(`${name} is busy`);
    expect(await service.release(lease)).toBe(true);
    return lease;
  }

  /** Commands run since the last CONFIG RESETSTAT, but for the test's own CONFIG, INFO and GET. */
  async function lockCommands(): Promise<Record<string, number>> {
    const calls = await commandCalls(admin);
    for (const command of Object.keys(calls)) {
      if (command.startsWith('config') || command.startsWith('info')) delete calls[command];
    }
    return calls;
  }

  const lockValue = async (name: string): Promise<string> =>
    (await admin.get(lockKeys('dlock:', name).lock)) ?? '';
  /** The lock key's value as stored, in bytes (the payload's separators are not UTF-8). */
  const rawValue = async (name: string): Promise<Buffer> =>
    ((await admin
      .withTypeMapping({ [RESP_TYPES.BLOB_STRING]: Buffer })
      .get(lockKeys('dlock:', name).lock)) as Buffer | null) ?? Buffer.alloc(0);
  /**
   * The lock key's value as stored: the claim, expiry, flags, and the payload after them: 0xFF, the owner id, then
   * 0xFF or 0xFE and the metadata (a value of an older version: " <metadata>", no owner).
   */
  const stored = async (name: string) => {
    const value = await rawValue(name);
    const match = /^(\S+) (\d+) (\d+) (\S+)(?: |$)/.exec(value.toString('latin1'));
    if (match === null) throw new Error(`unexpected lock value for ${name}`);
    const [head, who, fence, , flags] = match as unknown as string[];
    const payload = value.subarray((head as string).length);
    let owner: string | undefined;
    let metadata: string | undefined;
    if (payload[0] === 0xff) {
      const end = payload.findIndex((byte, at) => at > 0 && (byte === 0xff || byte === 0xfe));
      owner = payload.subarray(1, end).toString('utf8');
      if (payload[end] === 0xfe) metadata = payload.subarray(end + 1).toString('utf8');
    } else if (payload.length > 0) {
      metadata = payload.toString('utf8');
    }
    return { who, fence: BigInt(fence as string), flags: flags as string, owner, metadata };
  };
  const fresh = (label: string): string => `${label}-${randomBytes(4).toString('hex')}`;

  beforeAll(async () => {
    side = await SideRedis.start();
    admin = await connect(side.url);
    await upFor(admin, 3_000);
  }, 20_000);
  afterEach(async () => {
    for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
  });
  afterAll(async () => {
    await disconnect(admin);
    await side.stop();
  });

  it('stores the metadata at the end of the lock key; a renewal keeps it, a release drops it; plain cycles cost no more commands', async () => {
    const service = await serviceOn(side.url);
    const name = fresh('layout');
    const metadata = 'host a:4100 ✓\nsecond line ';
    const lease = (await take(service, name, { metadata })) as Lease;
    expect(await stored(name)).toMatchObject({
      who: lease.ownershipToken,
      fence: lease.fencingToken,
      owner: 'test',
      metadata,
    });
    await sleep(300);
    expect(await service.renew({ lease, ttlMs: 3_000 })).toEqual({ renewed: true });
    expect(await admin.pTTL(lockKeys('dlock:', name).lock)).toBeGreaterThan(2_800);
    expect((await stored(name)).metadata).toBe(metadata);
    expect(await service.inspect(name)).toMatchObject({
      held: true,
      ownerId: 'test',
      fencingToken: lease.fencingToken,
      metadata,
      waiters: 0,
    });
    expect(await service.release(lease)).toBe(true);
    expect(await lockValue(name)).toBe(`~ ${lease.fencingToken} -`);
    expect(await service.inspect(name)).toEqual({ held: false, waiters: 0 });

    // Nobody watches or observes the name now: a cycle with metadata and one without cost 6 commands each (the
    // release of a grant with metadata reads it, and finds its blind tombstone right).
    await admin.sendCommand(['CONFIG', 'RESETSTAT']);
    for (let i = 0; i < 50; i++) await cycle(service, name, `leader ${i}`);
    for (let i = 0; i < 50; i++) await cycle(service, name);
    expect(await lockCommands()).toEqual({ evalsha: 200, time: 100, set: 300 });
  });

  it("a hand-off gives the queued waiter's own metadata to its grant; so does a grant after the holder's lease ran out", async () => {
    const [a, b] = await Promise.all([serviceOn(side.url), serviceOn(side.url)]);
    const name = fresh('hand off {x} %');
    const holder = (await take(a, name, { metadata: 'holder' })) as Lease;
    const waiting = take(b, name, { waitMs: 5_000, metadata: 'waiter b: 2 words ' });
    expect(
      await eventually(async () => (await admin.lLen(lockKeys('dlock:', name).queue)) === 1, 2_000),
    ).toBe(true);
    expect(await b.inspect(name)).toMatchObject({ held: true, metadata: 'holder', waiters: 1 });
    await a.release(holder);
    const handed = (await waiting) as Lease;
    expect(handed.fencingToken).toBeGreaterThan(holder.fencingToken);
    expect(await stored(name)).toMatchObject({ who: handed.ownershipToken, metadata: 'waiter b: 2 words ' });

    // The holder's lease runs out unreleased: the waiter's look at its expiry grants it from the missing key.
    const expiring = (await take(a, fresh('expiring'), { ttlMs: 300, metadata: 'gone' })) as Lease;
    const after = take(b, expiring.name, { waitMs: 5_000, metadata: 'after expiry' });
    const next = (await after) as Lease;
    expect(next.fencingToken).toBeGreaterThan(expiring.fencingToken);
    expect(await b.inspect(expiring.name)).toMatchObject({ held: true, metadata: 'after expiry' });
  });

  it('reads a queue entry whose notify channel and metadata both hold spaces', async () => {
    const service = await serviceOn(side.url);
    const name = fresh('entry');
    const keys = lockKeys('dlock:', name);
    const listener = await connect(side.url);
    cleanups.push(() => disconnect(listener));
    const messages: string[] = [];
    await listener.subscribe('test:wake one two', (message) => messages.push(message));
    const holder = (await take(service, name)) as Lease;
    // A waiter of another service, as its acquire script would have queued it: "<deadline> <ttl>/<bytes> <channel><metadata>".
    const waiter = 'queued-waiter-token-00000000';
    const metadata = ' a b ✓';
    await admin.sendCommand(['RPUSH', keys.queue, waiter]);
    await admin.sendCommand([
      'HSET',
      keys.waiters,
      waiter,
      `${Date.now() + 10_000} 10000/${Buffer.byteLength(metadata)} test:wake one two${metadata}`,
    ]);
    // Marked q, as the waiter's own acquire script would have done: the release looks at the queue.
    const marked = (await rawValue(name)).toString('latin1').replace(/^(\S+ \d+ \d+) [-qwo]+/, '$1 q');
    await admin.sendCommand(['SET', keys.lock, Buffer.from(marked, 'latin1'), 'KEEPTTL']);
    expect(await service.release(holder)).toBe(true);
    expect(await eventually(() => messages.length === 1, 2_000)).toBe(true);
    expect((messages[0] as string).split(' ')[0]).toBe(waiter);
    expect(await stored(name)).toMatchObject({ who: waiter, metadata });
  });

  it('updateMetadata is owner-checked and keeps the token, the marks and the remaining lease', async () => {
    const [a, b] = await Promise.all([serviceOn(side.url), serviceOn(side.url)]);
    const name = fresh('update');
    const lease = (await take(a, name)) as Lease; // no metadata at first: the update adds it
    const waiting = take(b, name, { waitMs: 5_000 });
    expect(await eventually(async () => (await stored(name)).flags.includes('q'), 2_000)).toBe(true);
    await sleep(300);
    expect(await a.updateMetadata(lease, 'now with a value')).toBe(true);
    expect(await stored(name)).toMatchObject({ fence: lease.fencingToken, metadata: 'now with a value' });
    expect((await stored(name)).flags).toContain('q');
    expect(await admin.pTTL(lockKeys('dlock:', name).lock)).toBeLessThan(2_800);
    expect(await a.updateMetadata(lease, 'again')).toBe(true);
    expect((await stored(name)).metadata).toBe('again');
    expect(await a.updateMetadata({ ...lease, fencingToken: lease.fencingToken + 1n }, 'forged')).toBe(false);
    expect((await stored(name)).metadata).toBe('again');
    expect(await a.release(lease)).toBe(true); // handed to the waiter
    expect(await a.updateMetadata(lease, 'late')).toBe(false);
    const handed = (await waiting) as Lease;
    expect(await a.inspect(name)).toMatchObject({ held: true, fencingToken: handed.fencingToken });
    expect((await a.inspect(name)).metadata).toBeUndefined();
    await expect(a.updateMetadata(lease, 'x'.repeat(1_025))).rejects.toThrow(/1024 UTF-8 bytes/);
  });

  it('tells observers of every grant, hand-off, update and release, over one subscription per name and service', async () => {
    const [holder, waiter, observer] = await Promise.all([
      serviceOn(side.url),
      serviceOn(side.url),
      serviceOn(side.url),
    ]);
    const name = fresh('observed');
    const channel = changeChannel('dlock:', name);
    await cycle(holder, name); // the name exists (a tombstone), so the observer's mark has a key to go on
    let first = 0;
    let second = 0;
    const stopFirst = observer.watchChanges(name, () => {
      first += 1;
    });
    const stopSecond = observer.watchChanges(name, () => {
      second += 1;
    });
    // Each is called once when the subscription is active (a change meanwhile published nothing it could hear).
    expect(await eventually(() => first === 1 && second === 1, 2_000)).toBe(true);
    expect(await eventually(async () => (await lockValue(name)).endsWith(' o'), 2_000)).toBe(true);
    const subscribers = (await admin.sendCommand(['PUBSUB', 'NUMSUB', channel])) as unknown[];
    expect(Number(subscribers[1])).toBe(1);

    await admin.sendCommand(['CONFIG', 'RESETSTAT']);
    const lease = (await take(holder, name, { metadata: 'one' })) as Lease;
    expect(await eventually(() => first === 2, 2_000)).toBe(true);
    expect(await holder.updateMetadata(lease, 'two')).toBe(true);
    expect(await eventually(() => first === 3, 2_000)).toBe(true);
    const waiting = take(waiter, name, { waitMs: 5_000, metadata: 'three' });
    expect(await eventually(async () => (await stored(name)).flags === 'qo', 2_000)).toBe(true);
    expect(first).toBe(3); // queueing changes neither the holder nor its value
    await holder.release(lease);
    const handed = (await waiting) as Lease;
    expect(await eventually(() => first === 4, 2_000)).toBe(true);
    await waiter.release(handed);
    expect(await eventually(() => first === 5 && second === 5, 2_000)).toBe(true);
    // Four change notices, and the hand-off's message to the waiter's service.
    expect((await lockCommands())['publish']).toBe(5);

    // One observer leaves: the subscription stays. The last leaves: the next change reaches nobody and unmarks.
    stopFirst();
    await sleep(50);
    expect(Number(((await admin.sendCommand(['PUBSUB', 'NUMSUB', channel])) as unknown[])[1])).toBe(1);
    stopSecond();
    expect(
      await eventually(
        async () => Number(((await admin.sendCommand(['PUBSUB', 'NUMSUB', channel])) as unknown[])[1]) === 0,
        2_000,
      ),
    ).toBe(true);
    await admin.sendCommand(['CONFIG', 'RESETSTAT']);
    await cycle(holder, name, 'unheard'); // the grant publishes to nobody and unmarks
    await cycle(holder, name, 'quiet');
    expect((await lockCommands())['publish']).toBe(1);
    expect(await lockValue(name)).toMatch(/ -$/);
    expect(second).toBe(5);
  });

  it('a grant that finds the lock key missing tells observers and marks the name again', async () => {
    const [holder, observer] = await Promise.all([serviceOn(side.url), serviceOn(side.url)]);
    const name = fresh('missing');
    let notices = 0;
    observer.watchChanges(name, () => {
      notices += 1;
    });
    expect(await eventually(() => notices === 1, 2_000)).toBe(true);
    // Nothing to mark yet (no key): the first grant cannot know, publishes anyway, and finds the observer.
    const lease = (await take(holder, name, { metadata: 'first' })) as Lease;
    expect(await eventually(() => notices === 2, 2_000)).toBe(true);
    expect((await stored(name)).flags).toBe('wo');
    await holder.release(lease);
    expect(await eventually(() => notices === 3, 2_000)).toBe(true);
    // The lease runs out unreleased (the key goes with its marks): the next grant publishes anyway.
    await take(holder, name, { ttlMs: 200, metadata: 'expiring' });
    expect(await eventually(() => notices === 4, 2_000)).toBe(true);
    expect(
      await eventually(async () => (await admin.exists(lockKeys('dlock:', name).lock)) === 0, 2_000),
    ).toBe(true);
    await take(holder, name, { metadata: 'after' });
    expect(await eventually(() => notices === 5, 2_000)).toBe(true);
    expect(await observer.inspect(name)).toMatchObject({ held: true, metadata: 'after' });
  });

  it('an observer whose subscriber was cut off marks the name again and is woken once it is back', async () => {
    const proxy = await startTcpProxy({ targetPort: side.port });
    cleanups.push(() => proxy.close());
    const holder = await serviceOn(side.url);
    const observer = await serviceOn(side.url, `redis://127.0.0.1:${proxy.port}`);
    const name = fresh('observer-reconnect');
    await cycle(holder, name);
    let notices = 0;
    observer.watchChanges(name, () => {
      notices += 1;
    });
    expect(await eventually(() => notices === 1, 2_000)).toBe(true);
    expect(await eventually(async () => (await lockValue(name)).endsWith(' o'), 2_000)).toBe(true);
    proxy.mode = 'refuse';
    proxy.resetAll();
    const channel = changeChannel('dlock:', name);
    expect(
      await eventually(
        async () => Number(((await admin.sendCommand(['PUBSUB', 'NUMSUB', channel])) as unknown[])[1]) === 0,
        2_000,
      ),
    ).toBe(true);
    // A leader comes and goes while nobody hears: the notices are lost, and the first one unmarks the name.
    await cycle(holder, name, 'unheard');
    expect(await lockValue(name)).toMatch(/ -$/);
    expect(notices).toBe(1);
    proxy.mode = 'pass';
    expect(await eventually(() => notices === 2, 5_000)).toBe(true);
    expect(await lockValue(name)).toMatch(/ o$/);
    await cycle(holder, name, 'heard');
    expect(await eventually(() => notices === 4, 2_000)).toBe(true);
  });

  it('inspect: held only while a lease runs, with its remaining time; queued callers counted', async () => {
    const [a, b] = await Promise.all([serviceOn(side.url), serviceOn(side.url)]);
    const name = fresh('inspect');
    expect(await a.inspect(name)).toEqual({ held: false, waiters: 0 });
    const lease = (await take(a, name, { ttlMs: 1_000 })) as Lease;
    const info = await a.inspect(name);
    expect(info).toMatchObject({ held: true, fencingToken: lease.fencingToken, waiters: 0 });
    expect(info.metadata).toBeUndefined();
    expect(info.expiresInMs).toBeGreaterThan(0);
    expect(info.expiresInMs).toBeLessThanOrEqual(1_000);
    const waiting = take(b, name, { ttlMs: 1_000, waitMs: 300 });
    expect(await eventually(async () => (await a.inspect(name)).waiters === 1, 2_000)).toBe(true);
    expect(await waiting).toBeNull();
    // Unrenewed, the lease runs out: not held, though nothing was released.
    expect(await eventually(async () => !(await a.inspect(name)).held, 2_000)).toBe(true);
    await expect(a.inspect('')).rejects.toThrow();
  });
});

/** A candidate or observer in a child process (`fixtures/election-process.mjs`, on the built package). */
class Candidate {
  readonly #child: ChildProcess;
  readonly #messages: Record<string, unknown>[] = [];
  readonly #waiting = new Set<() => void>();

  constructor(args: readonly string[]) {
    this.#child = fork(fileURLToPath(new URL('./fixtures/election-process.mjs', import.meta.url)), args, {
      execArgv: [],
      stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
    });
    this.#child.on('message', (message: Record<string, unknown>) => {
      this.#messages.push(message);
      for (const wake of [...this.#waiting]) wake();
    });
  }

  get messages(): readonly Record<string, unknown>[] {
    return this.#messages;
  }

  /** The first message of `type` not taken yet (each is returned once), waiting up to `ms`. */
  async next(type: string, ms: number): Promise<Record<string, unknown>> {
    const deadline = performance.now() + ms;
    for (;;) {
      const found = this.#messages.find((m) => m['type'] === type && m['taken'] !== true);
      if (found) {
        found['taken'] = true;
        return found;
      }
      const left = deadline - performance.now();
      if (left <= 0) throw new Error(`no "${type}" from the child within ${ms} ms`);
      await new Promise<void>((resolve) => {
        const timer = setTimeout(resolve, left);
        const wake = (): void => {
          clearTimeout(timer);
          this.#waiting.delete(wake);
          resolve();
        };
        this.#waiting.add(wake);
      });
    }
  }

  send(message: string): void {
    this.#child.send(message);
  }

  signal(signal: NodeJS.Signals): void {
    this.#child.kill(signal);
  }

  async exit(): Promise<void> {
    this.#child.kill('SIGCONT');
    if (this.#child.exitCode === null && this.#child.connected) this.#child.send('exit');
    await Promise.race([new Promise((resolve) => this.#child.once('exit', resolve)), sleep(5_000)]);
    if (this.#child.exitCode === null && this.#child.signalCode === null) this.#child.kill('SIGKILL');
  }
}

describe('leaders in processes of their own (on the built package)', () => {
  const pool = new pg.Pool({ connectionString: PG_URL, max: 2 });
  pool.on('error', () => {});
  const table = uniqueName('dlock_fencing_redis_election');
  const gate = new FencingGate({ table });
  const closing: (() => Promise<void>)[] = [];
  beforeAll(async () => {
    await gate.ensureSchema(pool);
  });
  afterEach(async () => {
    for (const close of closing.splice(0).reverse()) await close();
  });
  afterAll(async () => {
    await pool.query(gate.sql.dropTable);
    await pool.end();
  });

  async function clientOn(url: string): Promise<LockClient> {
    const redis = await connect(url);
    const service = new RedisLockService({ client: redis });
    const locks = new LockClient(service);
    closing.push(async () => {
      await locks.close();
      await service.close();
      await disconnect(redis);
    });
    return locks;
  }

  function candidate(args: readonly string[]): Candidate {
    const child = new Candidate(args);
    closing.push(() => child.exit());
    return child;
  }

  it('a leader frozen past its TTL: the next leader has a higher epoch within TTL + one renewal interval; the old one, resumed, is lost and fenced', {
    timeout: 30_000,
  }, async () => {
    const ttlMs = 2_000;
    const name = `frozen-${randomBytes(4).toString('hex')}`;
    const frozen = candidate(['leader', REDIS_URL, name, String(ttlMs), 'frozen', PG_URL, table]);
    const leading = await frozen.next('leading', 15_000);
    const oldEpoch = BigInt(leading['epoch'] as string);
    const locks = await clientOn(REDIS_URL);
    const election = locks.election(name, { ttlMs });
    expect(await election.leader()).toEqual({ value: 'frozen', epoch: oldEpoch });
    const waiting = election.campaign({ value: 'successor', waitMs: 20_000 });
    await sleep(200);
    frozen.signal('SIGSTOP');
    const frozenAt = performance.now();
    const successor = await waiting;
    const tookMs = performance.now() - frozenAt;
    expect(successor.epoch).toBeGreaterThan(oldEpoch);
    expect(tookMs).toBeLessThan(ttlMs + (ttlMs / 3) * 1.1);
    expect(await election.leader()).toEqual({ value: 'successor', epoch: successor.epoch });
    await gate.runFenced(pool, name, successor.epoch, async () => {});

    frozen.signal('SIGCONT');
    const lost = await frozen.next('lost', 5_000);
    expect(['expired', 'rejected']).toContain(lost['reason']);
    frozen.send('write');
    const write = await frozen.next('write', 5_000);
    expect(write).toMatchObject({ ok: false, error: 'StaleFencingTokenError' });
    await expect(gate.runFenced(pool, name, oldEpoch, async () => {})).rejects.toBeInstanceOf(
      StaleFencingTokenError,
    );
    expect(await gate.highWaterMark(pool, name)).toBe(successor.epoch);
    expect(successor.isLeader()).toBe(true);
    await successor.resign();
  });

  it('resign hands over at once; an observer in a third process sees every leader and value, in order', {
    timeout: 30_000,
  }, async () => {
    // A long TTL, and the observer's own look every half TTL is 15 s away: only notices can explain what it sees.
    const ttlMs = 30_000;
    const name = `observed-${randomBytes(4).toString('hex')}`;
    const observer = candidate(['observer', REDIS_URL, name, String(ttlMs)]);
    await observer.next('ready', 15_000);
    const [one, two, three] = await Promise.all([
      clientOn(REDIS_URL),
      clientOn(REDIS_URL),
      clientOn(REDIS_URL),
    ]);
    const first = await one.election(name, { ttlMs }).campaign({ value: 'one' });
    const secondWaits = two.election(name, { ttlMs }).campaign({ value: 'two', waitMs: 20_000 });
    await sleep(100);
    const thirdWaits = three.election(name, { ttlMs }).campaign({ value: 'three', waitMs: 20_000 });
    await sleep(300);
    await first.proclaim('one+');
    await sleep(300);
    let resignedAt = performance.now();
    await first.resign();
    const second: Leadership = await secondWaits;
    const handOvers = [performance.now() - resignedAt];
    await sleep(300);
    resignedAt = performance.now();
    await second.resign();
    const third: Leadership = await thirdWaits;
    handOvers.push(performance.now() - resignedAt);
    await sleep(300);
    await third.resign();
    for (const ms of handOvers) expect(ms).toBeLessThan(1_000); // a round trip and a notice, not a TTL
    expect(first.epoch < second.epoch && second.epoch < third.epoch).toBe(true);

    const last = { value: 'three', epoch: String(third.epoch) };
    expect(
      await eventually(() => {
        const leaders = observer.messages.filter((m) => m['type'] === 'leader').map((m) => m['leader']);
        return leaders.length >= 2 && leaders.at(-1) === null && leaders.at(-2) !== undefined;
      }, 5_000),
    ).toBe(true);
    const seen = observer.messages.filter((m) => m['type'] === 'leader').map((m) => m['leader']);
    expect(seen).toEqual([
      null,
      { value: 'one', epoch: String(first.epoch) },
      { value: 'one+', epoch: String(first.epoch) },
      { value: 'two', epoch: String(second.epoch) },
      last,
      null,
    ]);
  });
});

describe('a Redis server restarted empty', () => {
  it('never two leaders with open windows, epochs never go back: the first grant on the new server waits one TTL', {
    timeout: 30_000,
  }, async () => {
    const ttlMs = 2_000;
    const side = await SideRedis.start();
    const made: { locks: LockClient; service: RedisLockService; redis: Redis }[] = [];
    const clientOn = async (): Promise<LockClient> => {
      const redis = await connect(side.url);
      const service = new RedisLockService({ client: redis, requestTimeoutMs: 1_000 });
      const locks = new LockClient(service);
      made.push({ locks, service, redis });
      return locks;
    };
    try {
      const bystander = await clientOn();
      await upFor(made[0]?.redis as Redis, ttlMs);
      const name = `restarted-${randomBytes(4).toString('hex')}`;
      const [a, b] = [await clientOn(), await clientOn()];
      const first = await a.election(name, { ttlMs }).campaign({ value: 'a' });
      let second: Leadership | undefined;
      let overlaps = 0;
      const watching = setInterval(() => {
        if (first.isLeader() && second?.isLeader()) overlaps += 1;
      }, 2);
      try {
        const waiting = b.election(name, { ttlMs }).campaign({ value: 'b', waitMs: 20_000 });
        await sleep(200);
        await side.restartEmpty();
        second = await waiting;
        expect(first.isLeader()).toBe(false);
        expect(second.epoch).toBeGreaterThan(first.epoch);
        expect(await b.election(name, { ttlMs }).leader()).toEqual({ value: 'b', epoch: second.epoch });
        expect(await eventually(() => first.state === 'lost', 5_000)).toBe(true);
        await sleep(200);
      } finally {
        clearInterval(watching);
      }
      expect(overlaps).toBe(0);
      // The wait is the election's: a plain lock on a name the young server has never seen is granted at once; a
      // campaign on one, with a TTL longer than the server's uptime, finds it held by the stand-in.
      const plain = await bystander.acquire(`plain-${name}`, { ttlMs: 60_000 });
      expect(plain.fencingToken).toBeGreaterThan(0n);
      await expect(bystander.election(`fresh-${name}`, { ttlMs: 60_000 }).campaign()).rejects.toMatchObject({
        code: 'ACQUIRE_TIMEOUT',
      });
      await plain.release();
      await second.resign();
    } finally {
      for (const { locks, service, redis } of made.reverse()) {
        await locks.close();
        await service.close();
        await disconnect(redis);
      }
      await side.stop();
    }
  });
});
