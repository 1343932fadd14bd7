import {
  AcquireTimeoutError,
  ClientClosedError,
  InvalidArgumentError,
  type Leader,
  LockClient,
  LockLostError,
  LockReleasedError,
  type LockService,
  MemoryLockService,
  UnsupportedError,
} from '@dlock/core';
import { FakeClock } from '@dlock/testing';
import { describe, expect, it } from 'vitest';
import { harness, outcome } from './harness.js';

const TTL = 1_000;

/** Collects what an observer yields until `stop` aborts. */
function collect(iterable: AsyncIterable<Leader | null>): {
  seen: (Leader | null)[];
  done: Promise<unknown>;
} {
  const seen: (Leader | null)[] = [];
  const done = (async () => {
    for await (const leader of iterable) seen.push(leader);
  })().catch((error: unknown) => error);
  return { seen, done };
}

describe('election on the memory service', () => {
  it('one leader at a time; the epoch rises only when leadership changes hands; leader() reads the service', async () => {
    const { client, makeClient, clock } = harness();
    const other = makeClient();
    const a = client.election('sched', { ttlMs: TTL });
    const b = other.election('sched', { ttlMs: TTL });
    expect(await a.leader()).toBeNull();
    const first = await a.campaign({ value: 'host-a:1' });
    expect(first.state).toBe('leading');
    expect(first.isLeader()).toBe(true);
    expect(await b.leader()).toEqual({ value: 'host-a:1', epoch: first.epoch });
    await expect(b.campaign({ value: 'host-b:1' })).rejects.toBeInstanceOf(AcquireTimeoutError);
    // Renewals and proclaim keep the epoch.
    await clock.advance(3 * TTL);
    await first.proclaim('host-a:2');
    expect(first.value).toBe('host-a:2');
    expect(await b.leader()).toEqual({ value: 'host-a:2', epoch: first.epoch });
    const waiting = outcome(b.campaign({ value: 'host-b:1', waitMs: 5 * TTL }));
    await clock.advance(1); // refused once, now waiting for the release notice
    await first.resign();
    expect(first.state).toBe('resigned');
    expect(first.signal.reason).toBeInstanceOf(LockReleasedError);
    await clock.advance(10);
    expect(waiting.done).toBe(true);
    const second = waiting.value;
    expect(second?.epoch).toBeGreaterThan(first.epoch);
    expect(await a.leader()).toEqual({ value: 'host-b:1', epoch: second?.epoch });
    await expect(first.proclaim('again')).rejects.toBeInstanceOf(LockReleasedError);
  });

  it('a leader that stops renewing is lost; its proclaim says so and the next candidate has a higher epoch', async () => {
    const { client, makeClient, clock, faulty } = harness();
    const lostReasons: string[] = [];
    const leading = await client
      .election('e', { ttlMs: TTL })
      .campaign({ onLost: (_l, reason) => lostReasons.push(reason) });
    faulty.partition('fail');
    await clock.advance(2 * TTL);
    expect(leading.state).toBe('lost');
    expect(leading.isLeader()).toBe(false);
    expect(lostReasons).toHaveLength(1);
    faulty.heal();
    const next = await makeClient().election('e', { ttlMs: TTL }).campaign();
    expect(next.epoch).toBeGreaterThan(leading.epoch);
    await expect(leading.proclaim('late')).rejects.toBeInstanceOf(LockLostError);
    await expect(leading.resign()).rejects.toBeInstanceOf(LockLostError);
  });

  it('proclaim after a pause past the window says the leadership expired, and tells the service nothing', async () => {
    const { client, clock, faulty, memory } = harness();
    const lost: string[] = [];
    const leading = await client
      .election('pause', { ttlMs: TTL })
      .campaign({ value: 'before', onLost: (_l, reason) => lost.push(reason) });
    // Past the window (TTL less the drift allowance of 12 ms) but short of the service's TTL: the lease is still
    // there, yet this client no longer vouches for it.
    clock.jump(TTL - 5);
    expect(memory.holder('pause')).toBe(leading.epoch);
    const proclaimed = outcome(leading.proclaim('after'));
    await clock.advance(0);
    expect(proclaimed.error).toBeInstanceOf(LockLostError);
    expect((proclaimed.error as LockLostError).reason).toBe('expired');
    expect(leading.state).toBe('lost');
    expect(lost).toEqual(['expired']);
    expect(faulty.counts.attempted.updateMetadata).toBe(0);
    expect(leading.value).toBe('before');
  });

  it('a proclaim answered after the window closed (a pause in flight) is a loss, not a success', async () => {
    const { client, clock, faulty } = harness();
    const leading = await client.election('slow', { ttlMs: TTL }).campaign({ value: 'before' });
    // Applied while the service still has the lease (it ends at TTL), answered after the window closed (TTL - 12).
    faulty.latency(TTL - 5);
    const proclaimed = outcome(leading.proclaim('after'));
    await clock.advanceUntil(() => proclaimed.done, 2 * TTL);
    expect(proclaimed.error).toBeInstanceOf(LockLostError);
    expect(leading.state).toBe('lost');
  });

  it('proclaim on a grant the service no longer has makes the leadership lost', async () => {
    // The service's clock runs apart from the client's: the lease ends there while the client still believes.
    const serviceClock = new FakeClock();
    const clientClock = new FakeClock();
    const memory = new MemoryLockService({ clock: serviceClock });
    const client = new LockClient(memory, { clock: clientClock });
    const lost: string[] = [];
    const leading = await client
      .election('p', { ttlMs: TTL })
      .campaign({ value: 'mine', onLost: (_l, reason) => lost.push(reason) });
    serviceClock.jump(2 * TTL);
    const successor = await new LockClient(memory, { clock: serviceClock })
      .election('p', { ttlMs: TTL })
      .campaign();
    expect(leading.state).toBe('leading'); // the client has not looked yet
    await expect(leading.proclaim('still me')).rejects.toBeInstanceOf(LockLostError);
    expect(leading.state).toBe('lost');
    expect(lost).toEqual(['rejected']);
    expect(await client.election('p', { ttlMs: TTL }).leader()).toEqual({
      value: successor.value,
      epoch: successor.epoch,
    });
    expect(successor.epoch).toBeGreaterThan(leading.epoch);
    await client.close();
  });

  it('observe yields the current leader first, then every change in order, shared by observers', async () => {
    const { client, makeClient, clock } = harness();
    const watcher = makeClient();
    const election = watcher.election('obs', { ttlMs: TTL });
    const stop = new AbortController();
    const one = collect(election.observe({ signal: stop.signal }));
    const two = collect(election.observe({ signal: stop.signal }));
    await clock.advance(1);
    expect(one.seen).toEqual([null]);
    const candidate = client.election('obs', { ttlMs: TTL });
    const first = await candidate.campaign({ value: 'a' });
    await clock.advance(1);
    await first.proclaim('a2');
    await clock.advance(1);
    await first.resign();
    await clock.advance(1);
    const second = await makeClient().election('obs', { ttlMs: TTL }).campaign({ value: 'b' });
    await clock.advance(1);
    const expected = [
      null,
      { value: 'a', epoch: first.epoch },
      { value: 'a2', epoch: first.epoch },
      null,
      { value: 'b', epoch: second.epoch },
    ];
    expect(one.seen).toEqual(expected);
    expect(two.seen).toEqual(expected);
    stop.abort();
    await clock.advance(1);
    expect(await one.done).toBeUndefined();
    expect(await two.done).toBeUndefined();
  });

  it('observe sees a leader that died without resigning disappear within half a lease of its expiry', async () => {
    const { makeClient, clock, memory } = harness();
    const stop = new AbortController();
    const seen = collect(makeClient().election('dead', { ttlMs: TTL }).observe({ signal: stop.signal }));
    // The leader's process is gone: a grant straight on the service, never renewed, never released.
    const grant = await memory.acquire({
      name: 'dead',
      ownerId: 'gone',
      ttlMs: TTL,
      waitMs: 0,
      signal: new AbortController().signal,
      metadata: 'ghost',
    });
    if (!grant.acquired) throw new Error('not granted');
    await clock.advance(1);
    expect(seen.seen).toEqual([null, { value: 'ghost', epoch: grant.grant.fencingToken }]);
    await clock.advance(TTL + TTL / 2);
    expect(seen.seen.at(-1)).toBeNull();
    stop.abort();
    await clock.advance(1);
    expect(await seen.done).toBeUndefined();
  });

  it('an observer first iterated after close() ends with ClientClosedError instead of waiting for ever', async () => {
    const { client, clock, faulty } = harness();
    const iterable = client.election('late', { ttlMs: TTL }).observe();
    await client.close();
    const seen = collect(iterable);
    const ended = outcome(seen.done);
    await clock.advance(10 * TTL);
    expect(ended.value).toBeInstanceOf(ClientClosedError);
    expect(seen.seen).toEqual([]);
    expect(faulty.counts.attempted.inspect).toBe(0); // and nothing goes on polling the service
  });

  it('observe ends with ClientClosedError when its client closes', async () => {
    const { client, clock } = harness();
    const seen = collect(client.election('c', { ttlMs: TTL }).observe());
    await clock.advance(1);
    await client.close();
    await clock.advance(1);
    expect(await seen.done).toBeInstanceOf(ClientClosedError);
  });

  it('observe: every pending next() settles when the signal aborts or return() ends it, not only the last one', async () => {
    const { client, clock } = harness();
    const election = client.election('n', { ttlMs: TTL });
    const stop = new AbortController();
    const aborted = election.observe({ signal: stop.signal })[Symbol.asyncIterator]();
    expect(await aborted.next()).toEqual({ done: false, value: null });
    const first = outcome(aborted.next());
    const second = outcome(aborted.next());
    await clock.advance(1);
    stop.abort();
    await clock.advance(1);
    expect([first.value, second.value]).toEqual([
      { done: true, value: undefined },
      { done: true, value: undefined },
    ]);

    const returned = election.observe()[Symbol.asyncIterator]();
    expect(await returned.next()).toEqual({ done: false, value: null });
    const pending = outcome(returned.next());
    await clock.advance(1);
    await returned.return?.();
    await clock.advance(1);
    expect(pending.value).toEqual({ done: true, value: undefined });

    // Two waiting at once share the changes: each gets one, in order, and neither is left behind.
    const shared = election.observe()[Symbol.asyncIterator]();
    expect(await shared.next()).toEqual({ done: false, value: null });
    const a = outcome(shared.next());
    const b = outcome(shared.next());
    const leading = await client.election('n', { ttlMs: TTL }).campaign({ value: 'x' });
    await clock.advance(1);
    await leading.resign();
    await clock.advance(1);
    expect([a.value, b.value]).toEqual([
      { done: false, value: { value: 'x', epoch: leading.epoch } },
      { done: false, value: null },
    ]);
    await shared.return?.();
  });

  it('candidates waiting without a budget take over in turn; runWhileLeader resigns after fn and stands again after a loss', async () => {
    const { client, makeClient, clock, faulty } = harness();
    const order: string[] = [];
    const election = client.election('run', { ttlMs: TTL });
    const first = await election.runWhileLeader(
      async (leadership) => {
        order.push(`run ${leadership.value}`);
        return 42;
      },
      { value: 'a' },
    );
    expect(first).toBe(42);
    expect(await election.leader()).toBeNull();
    // A loss while fn runs: fn is waited for, then the loop campaigns again.
    let runs = 0;
    const looping = outcome(
      makeClient()
        .election('run', { ttlMs: TTL })
        .runWhileLeader(
          async (leadership) => {
            runs += 1;
            if (runs === 1) {
              faulty.partition('fail');
              await clock.sleep(2 * TTL);
              faulty.heal();
              expect(leadership.state).toBe('lost');
              return 'first';
            }
            return 'second';
          },
          { value: 'b' },
        ),
    );
    await clock.advance(10 * TTL);
    expect(looping.done).toBe(true);
    expect(looping.value).toBe('second');
    expect(runs).toBe(2);
  });

  it('runWhileLeader: a pause past the lease while fn ran is a loss like any other: it stands again', async () => {
    const { client, clock } = harness();
    const runs: { epoch: bigint; paused: boolean }[] = [];
    const result = outcome(
      client.election('paused', { ttlMs: TTL }).runWhileLeader(async (leadership) => {
        const paused = runs.length === 0;
        runs.push({ epoch: leadership.epoch, paused });
        if (paused) clock.jump(2 * TTL); // stop-the-world: the lease ran out and nothing ran to say so
        return runs.length;
      }),
    );
    await clock.advanceUntil(() => result.done, 10 * TTL);
    expect(result.error).toBeUndefined();
    expect(result.value).toBe(2);
    expect(runs).toHaveLength(2);
    expect(runs[1]?.epoch).toBeGreaterThan(runs[0]?.epoch ?? 0n);
  });

  it('runWhileLeader: an abort resigns and rejects with the reason; a waiting campaign(Infinity) ends by its signal', async () => {
    const { client, makeClient, clock } = harness();
    const stop = new AbortController();
    const running = outcome(
      client
        .election('abort', { ttlMs: TTL })
        .runWhileLeader(() => new Promise(() => {}), { signal: stop.signal }),
    );
    await clock.advance(10);
    expect(await client.election('abort', { ttlMs: TTL }).leader()).not.toBeNull();
    const standby = new AbortController();
    const waiting = outcome(
      makeClient()
        .election('abort', { ttlMs: TTL })
        .campaign({ waitMs: Number.POSITIVE_INFINITY, signal: standby.signal }),
    );
    await clock.advance(1); // the standby was refused once and waits
    const reason = new Error('shutting down');
    stop.abort(reason);
    await clock.advance(10);
    expect(running.error).toBe(reason);
    // The standby took over once the first resigned.
    expect(waiting.done).toBe(true);
    expect(waiting.value?.state).toBe('leading');
    await waiting.value?.resign();
    const third = new AbortController();
    const blocked = outcome(
      makeClient()
        .election('abort', { ttlMs: TTL })
        .campaign({ waitMs: Number.POSITIVE_INFINITY, signal: third.signal }),
    );
    const holder = await makeClient()
      .election('abort', { ttlMs: TTL })
      .campaign()
      .catch(() => null);
    void holder;
    third.abort(new Error('no longer needed'));
    await clock.advance(10);
    expect(blocked.done).toBe(true);
  });

  it('refuses bad input before any I/O, and services that cannot store a value', async () => {
    const { client, faulty } = harness();
    expect(() => client.election('', { ttlMs: TTL })).toThrow(InvalidArgumentError);
    expect(() => client.election('x', { ttlMs: 1 })).toThrow(InvalidArgumentError);
    expect(() => client.election('x', { ttlMs: TTL, tll: 5 } as never)).toThrow(/tll/);
    const election = client.election('x', { ttlMs: TTL });
    const before = { ...faulty.counts.attempted };
    await expect(election.campaign({ waitMs: -1 })).rejects.toBeInstanceOf(InvalidArgumentError);
    await expect(election.campaign({ waitMs: Number.NaN })).rejects.toBeInstanceOf(InvalidArgumentError);
    await expect(election.campaign({ value: 'x'.repeat(1_025) })).rejects.toBeInstanceOf(
      InvalidArgumentError,
    );
    await expect(election.campaign({ value: 42 as never })).rejects.toBeInstanceOf(InvalidArgumentError);
    await expect(election.campaign({ vale: 'x' } as never)).rejects.toThrow(/value/);
    await expect(election.runWhileLeader('nope' as never)).rejects.toBeInstanceOf(InvalidArgumentError);
    expect(() => election.observe({ signal: 'x' as never })).toThrow(InvalidArgumentError);
    await expect(client.acquire('m', { ttlMs: TTL, metadata: 7 as never })).rejects.toBeInstanceOf(
      InvalidArgumentError,
    );
    expect(faulty.counts.attempted).toEqual(before);
    const bare: LockService = {
      acquire: (r) => faulty.acquire(r),
      renew: (r) => faulty.renew(r),
      release: (l) => faulty.release(l),
      watch: (n, cb) => faulty.watch(n, cb),
    };
    const plain = new LockClient(bare);
    expect(() => plain.election('x', { ttlMs: TTL })).toThrow(UnsupportedError);
    await expect(plain.acquire('x', { ttlMs: TTL, metadata: 'host:1' })).rejects.toBeInstanceOf(
      UnsupportedError,
    );
    await plain.close();
  });

  it('await using resigns at scope exit', async () => {
    const { client } = harness();
    const election = client.election('scope', { ttlMs: TTL });
    {
      await using leadership = await election.campaign({ value: 'v' });
      expect(await election.leader()).toEqual({ value: 'v', epoch: leadership.epoch });
    }
    expect(await election.leader()).toBeNull();
  });
});
