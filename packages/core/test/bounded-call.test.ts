import { FakeClock } from '@dlock/testing';
import { describe, expect, it } from 'vitest';
import { boundedCall, CallDeadlines } from '../src/bounded-call.js';
import { TransportError } from '../src/errors.js';
import { outcome } from './harness.js';

function deferred<T>() {
  let resolve!: (value: T) => void;
  let reject!: (error: unknown) => void;
  const promise = new Promise<T>((res, rej) => {
    resolve = res;
    reject = rej;
  });
  return { promise, resolve, reject };
}

describe('boundedCall', () => {
  const setup = () => {
    const clock = new FakeClock();
    return { clock, deadlines: new CallDeadlines(clock) };
  };

  it('settles like the call, times out with a TransportError, and hands a late value to onLate', async () => {
    const { clock, deadlines } = setup();
    const fast = deferred<number>();
    const ok = outcome(boundedCall(() => fast.promise, { deadlines, clock, timeoutMs: 100, what: 'fast' }));
    fast.resolve(7);
    await clock.advance(0);
    expect(ok.value).toBe(7);

    const slow = deferred<number>();
    const late: number[] = [];
    let abandons = 0;
    const timedOut = outcome(
      boundedCall(() => slow.promise, {
        deadlines,
        clock,
        timeoutMs: 100,
        what: 'slow call',
        onLate: (value) => late.push(value),
        onAbandon: () => {
          abandons += 1;
        },
      }),
    );
    await clock.advance(99);
    expect(timedOut.done).toBe(false);
    await clock.advance(1);
    expect(timedOut.error).toBeInstanceOf(TransportError);
    expect(String(timedOut.error)).toContain('slow call did not answer within 100 ms');
    expect(abandons).toBe(1);
    slow.resolve(8);
    await clock.advance(0);
    expect(late).toEqual([8]);
    expect(abandons).toBe(1);
  });

  it('reads a signal given as a function only once the call has run signalAfterMs, then ends at its abort', async () => {
    const { clock, deadlines } = setup();
    const caller = new AbortController();
    let reads = 0;
    const signal = (): AbortSignal => {
      reads += 1;
      return caller.signal;
    };
    const quick = deferred<string>();
    const answered = outcome(
      boundedCall(() => quick.promise, {
        deadlines,
        clock,
        timeoutMs: 1_000,
        what: 'q',
        signal,
        signalAfterMs: 20,
      }),
    );
    quick.resolve('ok');
    await clock.advance(50);
    expect(answered.value).toBe('ok');
    expect(reads).toBe(0);

    let abandoned: AbortSignal | undefined;
    let abandons = 0;
    const slow = outcome(
      boundedCall(
        (abandonedSignal) => {
          abandoned = abandonedSignal();
          return deferred<string>().promise;
        },
        {
          deadlines,
          clock,
          timeoutMs: 1_000,
          what: 's',
          signal,
          signalAfterMs: 20,
          onAbandon: () => {
            abandons += 1;
          },
        },
      ),
    );
    await clock.advance(19);
    expect(reads).toBe(0);
    await clock.advance(1);
    expect(reads).toBe(1);
    expect(slow.done).toBe(false);
    // One timer serves the read and, after it, the deadline.
    expect(clock.pendingTimers).toBe(1);
    const reason = new Error('caller gave up');
    caller.abort(reason);
    await clock.advance(0);
    expect(slow.error).toBe(reason);
    expect(abandoned?.aborted).toBe(true);
    expect(abandoned?.reason).toBe(reason);
    expect(abandons).toBe(1);
    expect(reads).toBe(1);
  });

  it('ends at once when the signal read later has already aborted, and still times out if it never does', async () => {
    const { clock, deadlines } = setup();
    const reason = new Error('gone');
    const aborted = outcome(
      boundedCall(() => deferred<void>().promise, {
        deadlines,
        clock,
        timeoutMs: 1_000,
        what: 'a',
        signal: () => AbortSignal.abort(reason),
        signalAfterMs: 20,
      }),
    );
    await clock.advance(20);
    expect(aborted.error).toBe(reason);

    const quiet = new AbortController();
    const timedOut = outcome(
      boundedCall(() => deferred<void>().promise, {
        deadlines,
        clock,
        timeoutMs: 100,
        what: 'quiet',
        signal: () => quiet.signal,
        signalAfterMs: 20,
      }),
    );
    await clock.advance(99);
    expect(timedOut.done).toBe(false);
    await clock.advance(1);
    expect(timedOut.error).toBeInstanceOf(TransportError);
  });

  it('reads a signal function at once without signalAfterMs, and never when the deadline comes first', async () => {
    const { clock, deadlines } = setup();
    const reason = new Error('already');
    let called = false;
    const early = outcome(
      boundedCall(
        () => {
          called = true;
          return deferred<void>().promise;
        },
        { deadlines, clock, timeoutMs: 100, what: 'e', signal: () => AbortSignal.abort(reason) },
      ),
    );
    await clock.advance(0);
    expect(early.error).toBe(reason);
    expect(called).toBe(false);

    let reads = 0;
    const short = outcome(
      boundedCall(() => deferred<void>().promise, {
        deadlines,
        clock,
        timeoutMs: 10,
        what: 'short',
        signal: () => {
          reads += 1;
          return new AbortController().signal;
        },
        signalAfterMs: 20,
      }),
    );
    await clock.advance(30);
    expect(short.error).toBeInstanceOf(TransportError);
    expect(reads).toBe(0);
  });

  it("settles every call in flight with stop's reason; cancels end a call at once and leave the set", async () => {
    const { clock, deadlines } = setup();
    const cancels = new Set<(reason: unknown) => void>();
    const a = outcome(
      boundedCall(() => deferred<void>().promise, { deadlines, clock, timeoutMs: 100, what: 'a' }),
    );
    const b = outcome(
      boundedCall(() => deferred<void>().promise, { deadlines, clock, timeoutMs: 200, what: 'b', cancels }),
    );
    expect(cancels.size).toBe(1);
    const closed = new Error('closed');
    deadlines.stop(closed);
    await clock.advance(0);
    expect(a.error).toBe(closed);
    expect(b.error).toBe(closed);
    expect(cancels.size).toBe(0);
    expect(clock.pendingTimers).toBe(0);

    const c = outcome(
      boundedCall(() => deferred<void>().promise, { deadlines, clock, timeoutMs: 100, what: 'c', cancels }),
    );
    const stopped = new Error('stopped');
    for (const cancel of [...cancels]) cancel(stopped);
    await clock.advance(0);
    expect(c.error).toBe(stopped);
    expect(cancels.size).toBe(0);
  });
});

describe('boundedCall with map', () => {
  it('settles with map(value) in the same reaction; what map throws rejects; onLate gets the raw value', async () => {
    const clock = new FakeClock();
    const deadlines = new CallDeadlines(clock);
    const mapped = await boundedCall(() => Promise.resolve('41'), {
      deadlines,
      clock,
      timeoutMs: 100,
      what: 'm',
      map: (raw: string) => Number(raw) + 1,
    });
    expect(mapped).toBe(42);

    const dlock = new TransportError('bad reply');
    await expect(
      boundedCall(() => Promise.resolve(1), {
        deadlines,
        clock,
        timeoutMs: 100,
        what: 'm',
        map: (): number => {
          throw dlock;
        },
      }),
    ).rejects.toBe(dlock);
    const other = outcome(
      boundedCall(() => Promise.resolve(1), {
        deadlines,
        clock,
        timeoutMs: 100,
        what: 'parse',
        map: (): number => {
          throw new Error('boom');
        },
      }),
    );
    await clock.advance(0);
    expect(other.error).toBeInstanceOf(TransportError);
    expect(String(other.error)).toContain('parse failed: Error: boom');

    const adopted = await boundedCall(() => Promise.resolve(2), {
      deadlines,
      clock,
      timeoutMs: 100,
      what: 'm',
      map: (n: number) => Promise.resolve(n * 10),
    });
    expect(adopted).toBe(20);

    const slow = deferred<string>();
    const late: string[] = [];
    let mapCalls = 0;
    const timedOut = outcome(
      boundedCall(() => slow.promise, {
        deadlines,
        clock,
        timeoutMs: 100,
        what: 'slow',
        onLate: (raw) => late.push(raw),
        map: (raw: string) => {
          mapCalls += 1;
          return raw.length;
        },
      }),
    );
    await clock.advance(100);
    expect(timedOut.error).toBeInstanceOf(TransportError);
    slow.resolve('late');
    await clock.advance(0);
    expect(late).toEqual(['late']);
    expect(mapCalls).toBe(0);
  });
});

describe('CallDeadlines', () => {
  it('expires entries at their times in order of addition, skips deleted ones, and re-arms for the next', async () => {
    const clock = new FakeClock();
    const deadlines = new CallDeadlines(clock);
    const fired: string[] = [];
    deadlines.add(300, () => fired.push('c'));
    deadlines.add(100, () => fired.push('a1'));
    const gone = deadlines.add(100, () => fired.push('deleted'));
    deadlines.add(100, () => fired.push('a2'));
    deadlines.add(200, () => fired.push('b'));
    deadlines.delete(gone);
    deadlines.delete(gone);
    expect(clock.pendingTimers).toBe(1);
    await clock.advance(100);
    expect(fired).toEqual(['a1', 'a2']);
    await clock.advance(100);
    expect(fired).toEqual(['a1', 'a2', 'b']);
    // An entry added while the timer waits for a later one, and due before it, re-arms the timer.
    deadlines.add(250, () => fired.push('early'));
    await clock.advance(50);
    expect(fired).toEqual(['a1', 'a2', 'b', 'early']);
    await clock.advance(50);
    expect(fired).toEqual(['a1', 'a2', 'b', 'early', 'c']);
    expect(clock.pendingTimers).toBe(0);
  });
});
