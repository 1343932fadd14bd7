import {
  type AcquireRequest,
  type AcquireResult,
  AcquireTimeoutError,
  type Grant,
  InvalidArgumentError,
  LockClient,
  MemoryLockService,
  type PermitRequest,
  TransportError,
} from '@dlock/core';
import { FakeClock } from '@dlock/testing';
import { describe, expect, it } from 'vitest';
import { acquireInQueue, type QueueTools } from '../src/queue/acquire-in-queue.js';
import { BackgroundRetries } from '../src/queue/background-retries.js';
import type { QueueDriver, Standing } from '../src/queue/queue-driver.js';
import { outcome } from './harness.js';

interface Claim {
  readonly id: number;
  readonly name: string;
}

/**
 * A FIFO queue with predecessor notices, in memory: the smallest driver there is, and a model of etcd's and
 * ZooKeeper's (each claim waits for the one just ahead). Faults are switched per operation.
 */
class MemoryQueue implements QueueDriver<Claim, number> {
  readonly queues = new Map<string, number[]>();
  readonly #gone = new Map<number, Set<() => void>>();
  #next = 0;
  #token = 0n;
  failLeaves = 0;
  /** Makes the next enqueue write the claim and then throw, as a write whose reply was lost. */
  loseNextEnqueueReply = false;
  grantWhileAborting: AbortController | undefined;
  calls = { enqueue: 0, check: 0, wait: 0, leave: 0 };

  constructor(readonly clock: FakeClock) {}

  claim(request: AcquireRequest): Claim {
    this.#next += 1;
    return { id: this.#next, name: request.name };
  }

  async enqueue(claim: Claim, options: { readonly queue: boolean }): Promise<Standing<number>> {
    this.calls.enqueue += 1;
    const queue = this.queues.get(claim.name) ?? [];
    this.queues.set(claim.name, queue);
    if (!options.queue && queue.length > 0) return { kind: 'behind', wait: -1, holderExpiresInMs: 42 };
    queue.push(claim.id);
    if (this.loseNextEnqueueReply) {
      this.loseNextEnqueueReply = false;
      throw new Error('reply lost');
    }
    return this.#standing(claim);
  }

  async check(claim: Claim): Promise<Standing<number>> {
    this.calls.check += 1;
    return this.#standing(claim);
  }

  async wait(_claim: Claim, ahead: number, ms: number, signal: AbortSignal): Promise<undefined> {
    this.calls.wait += 1;
    const woken = new AbortController();
    const listeners = this.#gone.get(ahead) ?? new Set();
    this.#gone.set(ahead, listeners);
    const wake = (): void => woken.abort();
    listeners.add(wake);
    const stop = (): void => woken.abort();
    signal.addEventListener('abort', stop, { once: true });
    try {
      await this.clock.sleep(ms, woken.signal).catch(() => {});
    } finally {
      listeners.delete(wake);
      signal.removeEventListener('abort', stop);
    }
    if (signal.aborted) throw signal.reason;
    return undefined;
  }

  async leave(claim: Claim): Promise<void> {
    this.calls.leave += 1;
    if (this.failLeaves > 0) {
      this.failLeaves -= 1;
      throw new Error('leave failed');
    }
    this.remove(claim.name, claim.id);
  }

  /** Removes a claim behind its owner's back, as an expired lease or session would. */
  remove(name: string, id: number): void {
    const queue = this.queues.get(name) ?? [];
    const index = queue.indexOf(id);
    if (index < 0) return;
    queue.splice(index, 1);
    for (const wake of this.#gone.get(id) ?? []) wake();
  }

  holder(name: string): number | undefined {
    return this.queues.get(name)?.[0];
  }

  #standing(claim: Claim): Standing<number> {
    const queue = this.queues.get(claim.name) ?? [];
    const index = queue.indexOf(claim.id);
    if (index < 0) return { kind: 'gone' };
    if (index === 0) {
      this.#token += 1n;
      this.grantWhileAborting?.abort(new Error('caller gave up'));
      const grant: Grant = { ownershipToken: String(claim.id), fencingToken: this.#token, ttlMs: 1_000 };
      return { kind: 'first', grant };
    }
    return { kind: 'behind', wait: queue[index - 1] as number };
  }
}

function setup() {
  const clock = new FakeClock();
  const driver = new MemoryQueue(clock);
  const cleanups = new BackgroundRetries(clock);
  const tools: QueueTools = { clock, cleanups, cleanupHorizonMs: () => 10_000 };
  const acquire = (name: string, waitMs: number, signal = new AbortController().signal) =>
    acquireInQueue(driver, { name, ownerId: 'o', ttlMs: 1_000, waitMs, signal }, tools);
  return { clock, driver, cleanups, acquire };
}

describe('acquireInQueue: the one queue algorithm', () => {
  it('grants in arrival order, each waiter woken by the claim just ahead leaving', async () => {
    const { clock, driver, acquire } = setup();
    const first = await acquire('a', 0);
    expect(first.acquired).toBe(true);
    const waiters = [
      outcome(acquire('a', 10_000)),
      outcome(acquire('a', 10_000)),
      outcome(acquire('a', 10_000)),
    ];
    await clock.advance(0);
    const order: number[] = [];
    for (let i = 0; i < 3; i++) {
      await driver.leave({ id: driver.holder('a') as number, name: 'a' });
      await clock.advance(0);
      const done = waiters.findIndex((w, j) => w.done && !order.includes(j));
      order.push(done);
    }
    expect(order).toEqual([0, 1, 2]);
    // Each waiter watches only the claim just ahead and is woken once, when that one leaves: no herd, no polling.
    expect(driver.calls.wait).toBe(3);
  });

  it('a caller that does not wait is answered at once and leaves nothing behind', async () => {
    const { driver, acquire } = setup();
    await acquire('a', 0);
    const busy = await acquire('a', 0);
    expect(busy).toEqual({ acquired: false, holderExpiresInMs: 42 });
    expect(driver.queues.get('a')).toHaveLength(1);
  });

  it('at the deadline the waiter leaves the queue and reports not acquired', async () => {
    const { clock, driver, acquire } = setup();
    await acquire('a', 0);
    const waiting = outcome(acquire('a', 500));
    await clock.advance(499);
    expect(waiting.done).toBe(false);
    expect(driver.queues.get('a')).toHaveLength(2);
    await clock.advance(1);
    expect(waiting.value).toEqual({ acquired: false });
    expect(driver.queues.get('a')).toHaveLength(1);
    // The wait ran out at the deadline: leaving needs no re-read first.
    expect(driver.calls.check).toBe(0);
  });

  it('an abort rejects with its reason and removes the claim', async () => {
    const { clock, driver, acquire } = setup();
    await acquire('a', 0);
    const abort = new AbortController();
    const waiting = outcome(acquire('a', 10_000, abort.signal));
    await clock.advance(10);
    const reason = new Error('user gave up');
    abort.abort(reason);
    await clock.advance(0);
    expect(waiting.error).toBe(reason);
    expect(driver.queues.get('a')).toHaveLength(1);
  });

  it('a grant that races the caller giving up is given back, never returned', async () => {
    const { clock, driver, acquire } = setup();
    const abort = new AbortController();
    driver.grantWhileAborting = abort;
    const attempt = outcome(acquire('a', 1_000, abort.signal));
    await clock.advance(0);
    expect(attempt.error).toBeInstanceOf(Error);
    expect((attempt.error as Error).message).toBe('caller gave up');
    expect(driver.holder('a')).toBeUndefined();
  });

  it('a claim that vanished while waiting is never reported held: the attempt queues again', async () => {
    const { clock, driver, acquire } = setup();
    await acquire('a', 0);
    const waiting = outcome(acquire('a', 10_000));
    await clock.advance(0);
    const lostClaim = driver.queues.get('a')?.[1] as number;
    // Its lease ran out: the claim is gone, and the holder's is too.
    driver.remove('a', lostClaim);
    driver.remove('a', driver.holder('a') as number);
    await clock.advance(0);
    expect(waiting.value).toMatchObject({ acquired: true });
    expect(driver.calls.enqueue).toBe(3);
    expect(driver.holder('a')).not.toBe(lostClaim);
  });

  it('claims that keep vanishing end in a TransportError, never in a refusal for a lock nobody holds', async () => {
    const { clock, cleanups } = setup();
    // Every claim is written and then ends at once (a session or lease that keeps expiring): the lock stays free.
    class VanishingQueue extends MemoryQueue {
      override async enqueue(claim: Claim, options: { readonly queue: boolean }): Promise<Standing<number>> {
        await super.enqueue(claim, options);
        this.remove(claim.name, claim.id);
        return this.check(claim);
      }
    }
    const vanishing = new VanishingQueue(clock);
    const tools: QueueTools = { clock, cleanups, cleanupHorizonMs: () => 10_000 };
    const request = {
      name: 'a',
      ownerId: 'o',
      ttlMs: 1_000,
      waitMs: 5_000,
      signal: new AbortController().signal,
    };
    const attempt = outcome(acquireInQueue(vanishing, request, tools));
    await clock.advance(0);
    expect(attempt.done).toBe(true);
    expect(attempt.value).toBeUndefined();
    expect(attempt.error).toBeInstanceOf(TransportError);
    expect((attempt.error as TransportError).message).toContain('vanished 5 times');
    expect(vanishing.calls.enqueue).toBe(5);
    expect(vanishing.holder('a')).toBeUndefined();
  });

  it('a semaphore whose claims keep vanishing is a TransportError to its caller, not no-free-permit', async () => {
    const clock = new FakeClock();
    const cleanups = new BackgroundRetries(clock);
    class VanishingQueue extends MemoryQueue {
      override async enqueue(claim: Claim, options: { readonly queue: boolean }): Promise<Standing<number>> {
        await super.enqueue(claim, options);
        this.remove(claim.name, claim.id);
        return this.check(claim);
      }
    }
    const vanishing = new VanishingQueue(clock);
    // Every permit is free; only the claims keep ending.
    class VanishingService extends MemoryLockService {
      override acquirePermit(request: PermitRequest): Promise<AcquireResult> {
        return acquireInQueue(vanishing, request, { clock, cleanups, cleanupHorizonMs: () => 10_000 });
      }
    }
    const client = new LockClient(new VanishingService({ clock }), { clock });
    const acquiring = outcome(client.semaphore('s', { permits: 2, ttlMs: 1_000 }).acquire({ waitMs: 2_000 }));
    await clock.advance(2_000);
    expect(acquiring.error).toBeInstanceOf(TransportError);
    expect(acquiring.error).not.toBeInstanceOf(AcquireTimeoutError);
    await client.close();
  });

  it('a write whose reply was lost is undone in the background, retried until it lands', async () => {
    const { clock, driver, cleanups, acquire } = setup();
    driver.loseNextEnqueueReply = true;
    driver.failLeaves = 2;
    await expect(acquire('a', 0)).rejects.toThrow('reply lost');
    expect(driver.queues.get('a')).toHaveLength(1);
    await clock.advance(5_000);
    expect(driver.calls.leave).toBe(3);
    expect(driver.queues.get('a')).toHaveLength(0);
    expect(cleanups.pending).toBe(0);
  });

  it('background clean-ups give up at their horizon and at close()', async () => {
    const { clock, driver, cleanups, acquire } = setup();
    driver.loseNextEnqueueReply = true;
    driver.failLeaves = Number.POSITIVE_INFINITY;
    await expect(acquire('a', 0)).rejects.toThrow('reply lost');
    await clock.advance(20_000);
    expect(cleanups.pending).toBe(0);
    const tries = driver.calls.leave;
    expect(tries).toBeGreaterThan(5);
    driver.loseNextEnqueueReply = true;
    await expect(acquire('b', 0)).rejects.toThrow('reply lost');
    await cleanups.close();
    await clock.advance(20_000);
    expect(driver.calls.leave).toBe(tries + 1);
  });

  it('close() waits at most closeWaitMs for a try that never answers, then settles', async () => {
    const clock = new FakeClock();
    const cleanups = new BackgroundRetries(clock, { closeWaitMs: 2_000 });
    let tries = 0;
    // A driver's leave that never answers (a connection that hangs): nothing may hold close() for ever.
    cleanups.run(() => {
      tries += 1;
      return new Promise(() => {});
    }, 60_000);
    const closing = outcome(cleanups.close());
    await clock.advance(1_999);
    expect(closing.done).toBe(false);
    await clock.advance(1);
    expect(closing.done).toBe(true);
    expect(closing.error).toBeUndefined();
    expect(tries).toBe(1);
    // A clean-up that settles in time is waited for, not the whole bound; nothing is left armed.
    const quick = new BackgroundRetries(clock);
    quick.run(() => clock.sleep(10), 60_000);
    const closingQuick = outcome(quick.close());
    await clock.advance(10);
    expect(closingQuick.done).toBe(true);
    expect(clock.pendingTimers).toBe(0);
    for (const closeWaitMs of [-1, Number.NaN, Number.POSITIVE_INFINITY, 2 ** 31]) {
      expect(() => new BackgroundRetries(clock, { closeWaitMs })).toThrow(InvalidArgumentError);
    }
  });

  it('a driver that can give up atomically keeps a lock handed to it at the last moment', async () => {
    const { clock, cleanups } = setup();
    // At the deadline the holder's lease has just been handed over to this claim: giving up keeps it.
    class HandingQueue extends MemoryQueue {
      async giveUp(claim: Claim): Promise<Standing<number>> {
        this.remove(claim.name, this.holder(claim.name) as number);
        return this.check(claim);
      }
    }
    const handing = new HandingQueue(clock);
    const tools: QueueTools = { clock, cleanups, cleanupHorizonMs: () => 10_000 };
    const request = (waitMs: number) => ({
      name: 'a',
      ownerId: 'o',
      ttlMs: 1_000,
      waitMs,
      signal: new AbortController().signal,
    });
    await acquireInQueue(handing, request(0), tools);
    const waiting = outcome(acquireInQueue(handing, request(300), tools));
    await clock.advance(300);
    expect(waiting.value).toMatchObject({ acquired: true });
  });
});
