import { LockClient, type LockService, MemoryLockService, TransportError } from '@dlock/core';
import { FakeClock, FaultyLockService, FencedStore } from '@dlock/testing';
import { describe, expect, it } from 'vitest';

const request = (name: string) => ({
  name,
  ownerId: 'o',
  ttlMs: 1_000,
  waitMs: 0,
  signal: new AbortController().signal,
});

function setup() {
  const clock = new FakeClock();
  const memory = new MemoryLockService({ clock });
  const faulty = new FaultyLockService(memory, { clock });
  return { clock, memory, faulty };
}

describe('FaultyLockService', () => {
  it('forwards everything and counts calls when no fault is set', async () => {
    const { faulty, memory } = setup();
    const result = await faulty.acquire(request('a'));
    expect(result.acquired).toBe(true);
    expect(memory.holder('a')).toBe(1n);
    expect(faulty.counts.attempted.acquire).toBe(1);
    expect(faulty.counts.forwarded.acquire).toBe(1);
  });

  it('partition("fail") refuses every call at once, without reaching the service; heal() restores', async () => {
    const { faulty, memory } = setup();
    faulty.partition('fail');
    await expect(faulty.acquire(request('a'))).rejects.toBeInstanceOf(TransportError);
    expect(memory.holder('a')).toBeUndefined();
    expect(faulty.counts.forwarded.acquire).toBe(0);
    faulty.heal();
    expect((await faulty.acquire(request('a'))).acquired).toBe(true);
  });

  it('partition("hang") leaves calls pending until heal(), which fails them like a reset', async () => {
    const { faulty, clock } = setup();
    faulty.partition('hang');
    let settled: unknown = 'pending';
    faulty.acquire(request('a')).then(
      (v) => {
        settled = v;
      },
      (e: unknown) => {
        settled = e;
      },
    );
    await clock.advance(60_000);
    expect(settled).toBe('pending');
    faulty.heal();
    await clock.advance(0);
    expect(settled).toBeInstanceOf(TransportError);
  });

  it('latency(ms) delays each call on the injected clock', async () => {
    const { faulty, clock } = setup();
    faulty.latency(250);
    let done = false;
    void faulty.acquire(request('a')).then(() => {
      done = true;
    });
    await clock.advance(249);
    expect(done).toBe(false);
    await clock.advance(1);
    expect(done).toBe(true);
  });

  it('failNext(n) fails exactly the next n calls', async () => {
    const { faulty } = setup();
    faulty.failNext(2);
    await expect(faulty.acquire(request('a'))).rejects.toBeInstanceOf(TransportError);
    await expect(faulty.acquire(request('a'))).rejects.toBeInstanceOf(TransportError);
    expect((await faulty.acquire(request('a'))).acquired).toBe(true);
  });

  it('dropRenewals() swallows renewals: a client loses the lock at its deadline, never renewed past it', async () => {
    const { faulty, clock, memory } = setup();
    const client = new LockClient(faulty, { clock, operationTimeoutMs: 60_000 });
    const handle = await client.acquire('a', { ttlMs: 3_000 });
    faulty.dropRenewals();
    await clock.advanceUntil(() => handle.state !== 'held', 10_000);
    expect(handle.state).toBe('lost');
    expect(clock.monotonic()).toBeLessThanOrEqual(handle.expiresAt);
    expect(faulty.counts.attempted.renew).toBeGreaterThan(0);
    expect(faulty.counts.forwarded.renew).toBe(0);
    await clock.advance(100);
    expect(memory.holder('a')).toBeUndefined(); // the service's lease ran out too
    faulty.heal();
    await client.close();
  });

  it('faults a renewMany batch as one call and exposes renewMany only when the inner service has it', async () => {
    const { faulty } = setup();
    expect(typeof faulty.renewMany).toBe('function');
    const grant = await faulty.acquire(request('a'));
    if (!grant.acquired) throw new Error('expected a grant');
    const lease = { name: 'a', ownerId: 'o', ...grant.grant };
    faulty.failNext(1);
    await expect(
      faulty.renewMany?.([
        { lease, ttlMs: 1_000 },
        { lease, ttlMs: 1_000 },
      ]),
    ).rejects.toBeInstanceOf(TransportError);
    const plain: LockService = {
      acquire: async () => ({ acquired: false }),
      renew: async () => ({ renewed: false }),
      release: async () => false,
      watch: () => () => {},
    };
    expect(new FaultyLockService(plain).renewMany).toBeUndefined();
  });

  it('does not deliver release notices across a partition', async () => {
    const { faulty, memory } = setup();
    let notices = 0;
    faulty.watch('a', () => {
      notices += 1;
    });
    const result = await memory.acquire(request('a'));
    if (!result.acquired) throw new Error('expected a grant');
    faulty.partition('fail');
    await memory.release({ name: 'a', ownerId: 'o', ...result.grant });
    await Promise.resolve();
    expect(notices).toBe(0);
  });

  it('failWatches("throw") makes watch and watchChanges throw, without reaching the service; false restores', async () => {
    const { faulty, memory } = setup();
    faulty.failWatches();
    expect(() => faulty.watch('a', () => {})).toThrow(TransportError);
    expect(() => faulty.watchChanges?.('a', () => {})).toThrow(TransportError);
    expect(faulty.counts.attempted.watch).toBe(2);
    expect(faulty.counts.forwarded.watch).toBe(0);
    faulty.failWatches(false);
    let notices = 0;
    faulty.watch('a', () => {
      notices += 1;
    });
    const result = await memory.acquire(request('a'));
    if (!result.acquired) throw new Error('expected a grant');
    await memory.release({ name: 'a', ownerId: 'o', ...result.grant });
    await Promise.resolve();
    expect(notices).toBe(1);
    expect(faulty.counts.forwarded.watch).toBe(1);
  });

  it('failWatches("silent") keeps old and new subscriptions from delivering, until restored', async () => {
    const { faulty, memory } = setup();
    const notices: string[] = [];
    faulty.watch('a', () => notices.push('old watch'));
    faulty.failWatches('silent');
    faulty.watch('a', () => notices.push('new watch'));
    faulty.watchChanges?.('a', () => notices.push('new changes'));
    const cycle = async (): Promise<void> => {
      const result = await memory.acquire(request('a'));
      if (!result.acquired) throw new Error('expected a grant');
      await memory.release({ name: 'a', ownerId: 'o', ...result.grant });
      await Promise.resolve();
    };
    await cycle();
    expect(notices).toEqual([]);
    faulty.failWatches(false);
    await cycle();
    expect(notices).toContain('old watch');
    expect(notices).toContain('new watch');
    expect(notices).toContain('new changes');
  });

  it('refuses a fault it cannot inject (a typo, a negative or non-finite number) and keeps the faults it had', async () => {
    const { faulty, clock } = setup();
    faulty.latency(100);
    faulty.failWatches('silent');
    const invalid = (field: string) => expect.objectContaining({ code: 'INVALID_ARGUMENT', field });
    const calls: [string, () => void][] = [
      ['mode', () => faulty.partition('fial' as never)],
      ['mode', () => faulty.partition(null as never)],
      ['mode', () => faulty.failWatches('thorw' as never)],
      ['mode', () => faulty.failWatches(true as never)],
      ['ms', () => faulty.latency(-5)],
      ['ms', () => faulty.latency(Number.NaN)],
      ['ms', () => faulty.latency(Number.POSITIVE_INFINITY)],
      ['ms', () => faulty.latency(2 ** 31)],
      ['ms', () => faulty.latency('100' as never)],
      ['n', () => faulty.failNext(-1)],
      ['n', () => faulty.failNext(1.5)],
      ['n', () => faulty.failNext(Number.NaN)],
      ['n', () => faulty.failNext('3' as never)],
      ['on', () => faulty.dropRenewals('yes' as never)],
      ['on', () => faulty.dropRenewals(0 as never)],
    ];
    for (const [field, call] of calls) expect.soft(call, `${call}`).toThrow(invalid(field));
    // None of them changed a fault: calls still take 100 ms, reach the service, and watches stay silent.
    let done = false;
    void faulty.acquire(request('a')).then(() => {
      done = true;
    });
    await clock.advance(99);
    expect(done).toBe(false);
    await clock.advance(1);
    expect(done).toBe(true);
    const notices: string[] = [];
    const stop = faulty.watch('a', () => notices.push('released'));
    await clock.advance(2_000);
    await Promise.resolve();
    expect(notices).toEqual([]);
    stop();
  });

  it('refuses to wrap something that is not a LockService', () => {
    for (const inner of [undefined, null, {}, { acquire: 1 }]) {
      expect(() => new FaultyLockService(inner as never)).toThrow(
        expect.objectContaining({ code: 'INVALID_ARGUMENT', field: 'inner' }),
      );
    }
  });
});

describe('FencedStore', () => {
  it('accepts equal and higher tokens, rejects lower ones, and records both', () => {
    const store = new FencedStore<number>();
    expect(store.write('r', 5n, 1)).toEqual({ accepted: true });
    expect(store.write('r', 5n, 2)).toEqual({ accepted: true });
    expect(store.write('r', 4n, 3)).toEqual({ accepted: false, highWaterMark: 5n });
    expect(store.write('r', 7n, 4)).toEqual({ accepted: true });
    expect(store.write('other', 1n, 5)).toEqual({ accepted: true });
    expect(store.read('r')).toBe(4);
    expect(store.highWaterMark('r')).toBe(7n);
    expect(store.accepted.map((w) => w.token)).toEqual([5n, 5n, 7n, 1n]);
    expect(store.rejected).toMatchObject([{ resource: 'r', token: 4n, value: 3, highWaterMark: 5n }]);
  });

  it('refuses a write without a valid fencing token, as a real gate does, and records nothing', () => {
    // A caller that forgot the token (`lock.fencingtoken` is undefined) must fail its test, not pass it: a real gate
    // (`@dlock/fencing-pg`, `@dlock/fencing-kysely`) throws for it.
    const store = new FencedStore<number>();
    expect(store.write('r', 5n, 1)).toEqual({ accepted: true });
    for (const token of [undefined, null, 'x', Number.NaN, 0n, -1n, 2n ** 63n]) {
      expect(() => store.write('r', token as bigint, 2)).toThrow(
        expect.objectContaining({ code: 'INVALID_ARGUMENT', field: 'token' }),
      );
    }
    expect(() => store.write('', 6n, 3)).toThrow(expect.objectContaining({ field: 'resource' }));
    expect(() => store.write(7 as unknown as string, 6n, 3)).toThrow(
      expect.objectContaining({ field: 'resource' }),
    );
    expect(store.read('r')).toBe(1);
    expect(store.highWaterMark('r')).toBe(5n);
    expect(store.accepted).toHaveLength(1);
    expect(store.rejected).toHaveLength(0);
  });
});
