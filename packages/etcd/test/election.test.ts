import { performance } from 'node:perf_hooks';
import { AcquireTimeoutError, type Leader, type Leadership, LockClient, LockLostError } from '@dlock/core';
import { EtcdLockService } from '@dlock/etcd';
import { ETCD_ENDPOINT, runBuiltPackage } from '@dlock/test-utils';
import { Etcd3 } from 'etcd3';
import { afterAll, afterEach, describe, expect, it } from 'vitest';
import type { EtcdClientLike, WatchResponseLike } from '../src/client-like.js';
import { escapeName } from '../src/keys.js';
import { lockName, sleep, waitUntil } from './helpers.js';

const PREFIX = 'dlock-test/election/';
const etcd = new Etcd3({ hosts: ETCD_ENDPOINT });
afterAll(() => etcd.close());

const teardown: (() => Promise<unknown> | unknown)[] = [];
afterEach(async () => {
  for (const fn of teardown.splice(0).reverse()) await Promise.resolve(fn()).catch(() => {});
});

function service(options: { session?: boolean; client?: EtcdClientLike } = {}): EtcdLockService {
  const made = new EtcdLockService({
    client: options.client ?? etcd,
    keyPrefix: PREFIX,
    session: options.session ?? false,
  });
  teardown.push(() => made.close());
  return made;
}

function lockClient(of: EtcdLockService): LockClient {
  const made = new LockClient(of);
  teardown.push(() => made.close());
  return made;
}

/** The keys of an election's directory, holder first, with their values as etcd stores them. */
async function directory(name: string): Promise<{ key: string; value: Buffer; create: bigint }[]> {
  const response = await etcd.kv.range({
    key: Buffer.from(`${PREFIX}${escapeName(name)}/`),
    range_end: Buffer.from(`${PREFIX}${escapeName(name)}0`),
    sort_target: 'Create',
    sort_order: 'Ascend',
  });
  return response.kvs.map((kv) => ({
    key: kv.key.toString(),
    value: kv.value,
    create: BigInt(kv.create_revision),
  }));
}

for (const session of [false, true]) {
  describe(`elections on etcd (${session ? 'session mode' : 'a lease per lock'})`, () => {
    it('keeps the Go Election layout: the leader is the first key, its value the bare proclaimed text, its create revision the epoch; candidates queue behind with their own values', async () => {
      const name = lockName('layout');
      const s = service({ session });
      const elections = [0, 1, 2].map(() => lockClient(s).election(name, { ttlMs: 2_000 }));
      const first = await elections[0]!.campaign({ value: 'host-a:4100 ✓' });
      const second = elections[1]!.campaign({ value: 'host-b', waitMs: 10_000 });
      expect(await waitUntil(async () => (await directory(name)).length === 2, 5_000)).toBe(true);
      const third = elections[2]!.campaign({ value: 'host-c', waitMs: 10_000 });
      expect(await waitUntil(async () => (await directory(name)).length === 3, 5_000)).toBe(true);
      const keys = await directory(name);
      expect(keys.map((k) => k.value.toString('utf8'))).toEqual(['host-a:4100 ✓', 'host-b', 'host-c']);
      expect(keys[0]!.create).toBe(first.epoch);
      expect(await s.inspect(name)).toEqual({
        held: true,
        fencingToken: first.epoch,
        metadata: 'host-a:4100 ✓',
        waiters: 2,
      });

      // Handed to the queued candidate: its value was written with its key, before it led.
      await first.resign();
      const next = await second;
      expect(await elections[2]!.leader()).toEqual({ value: 'host-b', epoch: next.epoch });
      expect((await s.inspect(name)).waiters).toBe(1);
      await next.proclaim('host-b:2');
      const after = await directory(name);
      expect(after[0]!.value.toString('utf8')).toBe('host-b:2');
      expect(after[0]!.create).toBe(next.epoch);
      await next.resign();
      await (await third).resign();
      expect(await s.inspect(name)).toEqual({ held: false });
      expect(await directory(name)).toEqual([]);
    });

    it('a lock taken without metadata reports none', async () => {
      const name = lockName('plain');
      const s = service({ session });
      const client = lockClient(s);
      const lock = await client.acquire(name, { ttlMs: 2_000 });
      const info = await s.inspect(name);
      // No metadata; the key's value is the owner id instead, which inspect reports.
      expect(info).toEqual({
        held: true,
        fencingToken: lock.fencingToken,
        waiters: 0,
        ownerId: client.ownerId,
      });
      await lock.release();
    });

    it('a leader whose key was deleted behind its back cannot proclaim, and is lost', async () => {
      const name = lockName('deleted');
      const s = service({ session });
      const election = lockClient(s).election(name, { ttlMs: 2_000 });
      const leadership = await election.campaign({ value: 'a' });
      const successor = lockClient(service({ session }))
        .election(name, { ttlMs: 2_000 })
        .campaign({ value: 'b', waitMs: 10_000 });
      expect(await waitUntil(async () => (await directory(name)).length === 2, 5_000)).toBe(true);
      await etcd.delete().key((await directory(name))[0]!.key);
      const error = await leadership.proclaim('a:2').catch((e: unknown) => e);
      expect(error).toBeInstanceOf(LockLostError);
      expect(leadership.state).toBe('lost');
      expect(leadership.isLeader()).toBe(false);
      // The successor's value was not overwritten by the refused proclaim.
      const next = await successor;
      expect(next.epoch).toBeGreaterThan(leadership.epoch);
      expect(await election.leader()).toEqual({ value: 'b', epoch: next.epoch });
      await next.resign();
    });

    it('a candidate that does not wait is never shown as the leader, even when the leader resigns before it leaves', async () => {
      const name = lockName('no-wait');
      // The non-waiting candidate's clean-up (a delete, or its lease's revoke) is held until the end, so that the
      // leader's resignation falls after its campaign's write was answered and before it could leave.
      let open = (): void => {};
      const gate = new Promise<void>((resolve) => {
        open = resolve;
      });
      let tried = false;
      // A client of its own: the held calls outlive their deadlines, which must not open the shared client's breaker.
      const own = new Etcd3({ hosts: ETCD_ENDPOINT });
      teardown.push(() => own.close());
      const held: EtcdClientLike = {
        kv: {
          txn: async (request, options) => {
            if ((request.success ?? []).some((op) => op.request_delete_range)) await gate;
            const answer = await own.kv.txn(request, options);
            if ((request.success ?? []).some((op) => op.request_put)) tried = true;
            return answer;
          },
        },
        leaseClient: {
          leaseGrant: (request, options) => own.leaseClient.leaseGrant(request, options),
          leaseRevoke: async (request, options) => {
            await gate;
            return own.leaseClient.leaseRevoke(request, options);
          },
          leaseKeepAlive: (options) => own.leaseClient.leaseKeepAlive(options),
        },
        watchClient: own.watchClient,
      };
      teardown.push(open);
      const observer = lockClient(service({ session })).election(name, { ttlMs: 10_000 });
      const leadership = await lockClient(service({ session }))
        .election(name, { ttlMs: 10_000 })
        .campaign({ value: 'a' });
      const attempt = lockClient(service({ session, client: held }))
        .election(name, { ttlMs: 10_000 })
        .campaign({ value: 't' })
        .then(
          (won) => won,
          (error: unknown) => error,
        );
      expect(await waitUntil(async () => tried, 5_000)).toBe(true);
      await leadership.resign();
      // 't' was never told it leads: nobody leads.
      expect(await observer.leader()).toBeNull();
      open();
      expect(await attempt).toBeInstanceOf(AcquireTimeoutError);
      expect(await waitUntil(async () => (await directory(name)).length === 0, 5_000)).toBe(true);
    });

    it('a candidate whose wait ends after the leader left, before the notice came, leads rather than be shown leading', async () => {
      const name = lockName('late-notice');
      // Watch answers to the standby reach it 3 s late once `late` is set: its 2 s wait ends before it hears that
      // the leader resigned, while its key already leads the directory.
      let late = false;
      const timers = new Set<ReturnType<typeof setTimeout>>();
      const own = new Etcd3({ hosts: ETCD_ENDPOINT });
      teardown.push(() => own.close());
      teardown.push(() => {
        for (const timer of timers) clearTimeout(timer);
      });
      const slowWatch: EtcdClientLike = {
        kv: own.kv,
        leaseClient: own.leaseClient,
        watchClient: {
          watch: async (options) => {
            const stream = await own.watchClient.watch(options);
            const on = stream.on.bind(stream);
            stream.on = ((event: 'data', listener: (response: WatchResponseLike) => void) =>
              on(event, (response: WatchResponseLike) => {
                if (event !== 'data' || !late) return listener(response);
                const timer = setTimeout(() => {
                  timers.delete(timer);
                  listener(response);
                }, 3_000);
                timers.add(timer);
              })) as typeof stream.on;
            return stream;
          },
        },
      };
      const observer = lockClient(service({ session })).election(name, { ttlMs: 10_000 });
      const leadership = await lockClient(service({ session }))
        .election(name, { ttlMs: 10_000 })
        .campaign({ value: 'a' });
      const standby = lockClient(service({ session, client: slowWatch }))
        .election(name, { ttlMs: 10_000 })
        .campaign({ value: 'b', waitMs: 2_000 })
        .then(
          (won) => won,
          (error: unknown) => error,
        );
      expect(await waitUntil(async () => (await directory(name)).length === 2, 5_000)).toBe(true);
      await sleep(300);
      late = true;
      await leadership.resign();
      const shown = await observer.leader();
      const outcome = await standby;
      // The standby's key led once the leader left; what observers were shown is what the standby was told.
      expect(shown?.value).toBe('b');
      expect(outcome).not.toBeInstanceOf(Error);
      const successor = outcome as Leadership;
      expect(shown).toEqual({ value: 'b', epoch: successor.epoch });
      expect(successor.epoch).toBeGreaterThan(leadership.epoch);
      await successor.resign();
    });

    it('resign hands over on the release notice, long before the TTL', async () => {
      const ttlMs = 10_000;
      const name = lockName('resign');
      const a = lockClient(service({ session })).election(name, { ttlMs });
      const b = lockClient(service({ session })).election(name, { ttlMs });
      const first = await a.campaign({ value: 'a' });
      const waiting = b.campaign({ value: 'b', waitMs: 20_000 });
      expect(await waitUntil(async () => (await directory(name)).length === 2, 5_000)).toBe(true);
      const resignedAt = performance.now();
      await first.resign();
      const second = await waiting;
      const handOverMs = performance.now() - resignedAt;
      // Only the notice explains a take-over this early: the first leader's lease had ~10 s left.
      expect(handOverMs).toBeLessThan(ttlMs / 4);
      expect(second.epoch).toBeGreaterThan(first.epoch);
      await second.resign();
    });
  });
}

describe('observers', () => {
  it('of one election share one etcd watch per service, however many observe in however many clients', async () => {
    const name = lockName('shared-watch');
    const creates: { key: string; watchId: string; filtered: boolean }[] = [];
    const cancels: string[] = [];
    const counting: EtcdClientLike = {
      kv: etcd.kv,
      leaseClient: etcd.leaseClient,
      watchClient: {
        watch: async (options) => {
          const stream = await etcd.watchClient.watch(options);
          const write = stream.write.bind(stream);
          stream.write = (item) => {
            const create = item.create_request;
            if (create) {
              creates.push({
                key: create.key?.toString() ?? '',
                watchId: String(create.watch_id),
                filtered: (create.filters?.length ?? 0) > 0,
              });
            }
            if (item.cancel_request) cancels.push(String(item.cancel_request.watch_id));
            write(item);
          };
          return stream;
        },
      },
    };
    const observed = service({ client: counting });
    const clients = [lockClient(observed), lockClient(observed)];
    const stop = new AbortController();
    const seen: (Leader | null)[][] = [[], [], []];
    const observers = [clients[0]!, clients[0]!, clients[1]!].map(async (client, i) => {
      for await (const leader of client.election(name, { ttlMs: 2_000 }).observe({ signal: stop.signal })) {
        seen[i]!.push(leader);
      }
    });
    const leader = await lockClient(service()).election(name, { ttlMs: 2_000 }).campaign({ value: 'x' });
    const expected = { value: 'x', epoch: leader.epoch };
    expect(await waitUntil(() => seen.every((s) => s.some((l) => l?.epoch === leader.epoch)), 5_000)).toBe(
      true,
    );
    stop.abort();
    await Promise.all(observers);
    for (const s of seen) expect(s.at(-1)).toEqual(expected);
    const directoryKey = `${PREFIX}${escapeName(name)}/`;
    const ofElection = creates.filter((c) => c.key === directoryKey);
    expect(ofElection).toHaveLength(1);
    expect(ofElection[0]!.filtered).toBe(false);
    // Cancelled with the last observer.
    expect(cancels).toEqual([ofElection[0]!.watchId]);
    await leader.resign();
  });

  it('in another process see every epoch in order', { timeout: 30_000 }, async () => {
    const name = lockName('observed');
    const ready = `${PREFIX}ready/${name}`;
    const values = ['l1', 'l2', 'l3', 'last'];
    const child = runBuiltPackage(
      new URL('..', import.meta.url),
      `
        import { LockClient } from '@dlock/core';
        import { EtcdLockService } from '@dlock/etcd';
        import { Etcd3 } from 'etcd3';
        const etcd = new Etcd3({ hosts: process.env.ETCD });
        const service = new EtcdLockService({ client: etcd, keyPrefix: process.env.PREFIX });
        const client = new LockClient(service);
        const stop = new AbortController();
        const timer = setTimeout(() => stop.abort(), 20_000);
        const seen = [];
        for await (const leader of client.election(process.env.NAME, { ttlMs: 2_000 }).observe({ signal: stop.signal })) {
          seen.push(leader && { value: leader.value, epoch: String(leader.epoch) });
          if (seen.length === 1) await etcd.put(process.env.READY).value('1');
          if (leader?.value === 'last') stop.abort();
        }
        clearTimeout(timer);
        console.log(JSON.stringify(seen));
        await client.close();
        await service.close();
        etcd.close();
      `,
      { timeoutMs: 25_000, env: { ETCD: ETCD_ENDPOINT, PREFIX, NAME: name, READY: ready } },
    );
    teardown.push(() => etcd.delete().key(ready));
    expect(await waitUntil(async () => (await etcd.get(ready).string()) === '1', 15_000)).toBe(true);
    // Each candidate queues behind the one before and leads for a while, so every leader can be seen.
    const s = service();
    const epochs: bigint[] = [];
    const campaigns = values.map(async (value, i) => {
      await sleep(50 * i); // campaign in this order
      const leadership = await lockClient(s)
        .election(name, { ttlMs: 2_000 })
        .campaign({ value, waitMs: 15_000 });
      epochs.push(leadership.epoch);
      await sleep(300);
      if (value !== 'last') await leadership.resign();
      return leadership;
    });
    const last = (await Promise.all(campaigns)).at(-1)!;
    const result = await child;
    await last.resign();
    expect(result.stderr).toBe('');
    expect(result.code).toBe(0);
    const seen = JSON.parse(result.stdout) as ({ value: string; epoch: string } | null)[];
    expect(seen[0]).toBeNull();
    const led = seen.filter((l): l is { value: string; epoch: string } => l !== null);
    expect(led.map((l) => l.value)).toEqual(values);
    expect(led.map((l) => BigInt(l.epoch))).toEqual(epochs);
    for (let i = 1; i < epochs.length; i++) expect(epochs[i]!).toBeGreaterThan(epochs[i - 1]!);
  });
});
