import type { Clock, SleepOptions } from '@dlock/core';

/**
 * How many sleeps may fire at one instant within an `advance`. Past this, something re-arms a timer for a time already
 * passed: in real time a busy loop, here an advance that never returned and hung its test until the test timed out.
 */
const MAX_FIRINGS_AT_ONE_INSTANT = 10_000;

interface Timer {
  readonly dueAt: number;
  readonly seq: number;
  readonly process: FakeProcessClock | undefined;
  readonly fire: () => void;
}

/** Where a {@link FakeClock} starts. */
export interface FakeClockOptions {
  /** Initial wall-clock time (ms since the epoch). Default 1_700_000_000_000. */
  readonly wallStart?: number;
  /** Seed of `random()`. Default 1. */
  readonly seed?: number;
}

/**
 * Time that moves only when a test says so. Nothing sleeps for real.
 *
 * - `advance(ms)` moves time forward, firing due sleeps in time order and letting promises settle after each one.
 *   It rejects, leaving time where it stopped, once 10,000 sleeps have fired at one instant: a busy loop.
 * - `jump(ms)` moves time forward without firing anything: a stop-the-world pause. Overdue sleeps fire on the next
 *   `advance` (use `advance(0)` to resume at once).
 * - `stepWall(ms)` moves only the wall clock (`now()`), like an NTP step; monotonic time is untouched.
 * - `process()` gives a clock that shares this timeline but can be paused alone, modelling one paused process
 *   among several.
 */
export class FakeClock implements Clock {
  #monotonic = 0;
  #wallOffset: number;
  #seq = 0;
  #timers: Timer[] = [];
  #random: () => number;

  constructor(options: FakeClockOptions = {}) {
    this.#wallOffset = options.wallStart ?? 1_700_000_000_000;
    this.#random = mulberry32(options.seed ?? 1);
  }

  now(): number {
    return this.#wallOffset + this.#monotonic;
  }

  monotonic(): number {
    return this.#monotonic;
  }

  random(): number {
    return this.#random();
  }

  sleep(ms: number, signal?: AbortSignal, _options?: SleepOptions): Promise<void> {
    return this.schedule(ms, signal, undefined);
  }

  /** Number of sleeps not yet fired. */
  get pendingTimers(): number {
    return this.#timers.length;
  }

  /**
   * Moves time forward by `ms`, firing every sleep that comes due, in order. Rejects, with time left at that instant,
   * when 10,000 sleeps fire at one instant (something keeps re-arming a timer for a time already passed).
   */
  async advance(ms: number): Promise<void> {
    if (!(ms >= 0)) throw new RangeError(`advance(ms) needs ms >= 0, got ${ms}`);
    const target = this.#monotonic + ms;
    let instant = Number.NaN;
    let firedAtInstant = 0;
    for (;;) {
      await settle();
      const next = this.#nextDue(target);
      if (!next) break;
      const at = Math.max(this.#monotonic, next.dueAt);
      firedAtInstant = at === instant ? firedAtInstant + 1 : 1;
      instant = at;
      if (firedAtInstant > MAX_FIRINGS_AT_ONE_INSTANT) {
        throw new Error(
          `FakeClock.advance: ${MAX_FIRINGS_AT_ONE_INSTANT} sleeps fired at monotonic ${at} ms without time moving on: ` +
            'something re-arms a timer for a time already passed (a busy loop)',
        );
      }
      this.#timers.splice(this.#timers.indexOf(next), 1);
      this.#monotonic = at;
      next.fire();
    }
    this.#monotonic = target;
    await settle();
  }

  /** Advances in steps of `stepMs` until `predicate()` holds or `maxMs` has passed; returns whether it held. */
  async advanceUntil(predicate: () => boolean, maxMs: number, stepMs = 1): Promise<boolean> {
    const end = this.#monotonic + maxMs;
    while (!predicate()) {
      if (this.#monotonic >= end) return false;
      await this.advance(Math.min(stepMs, end - this.#monotonic));
    }
    return true;
  }

  /** A pause: time passes, nothing runs. */
  jump(ms: number): void {
    if (!(ms >= 0)) throw new RangeError(`jump(ms) needs ms >= 0, got ${ms}`);
    this.#monotonic += ms;
  }

  /** A wall-clock step (either direction); monotonic time does not move. */
  stepWall(ms: number): void {
    this.#wallOffset += ms;
  }

  /** A clock for one simulated process on this timeline, which can be paused and resumed on its own. */
  process(): FakeProcessClock {
    return new FakeProcessClock(this);
  }

  /** @internal */
  schedule(
    ms: number,
    signal: AbortSignal | undefined,
    process: FakeProcessClock | undefined,
  ): Promise<void> {
    return new Promise<void>((resolve, reject) => {
      if (signal?.aborted) {
        reject(signal.reason);
        return;
      }
      const onAbort = (): void => {
        const index = this.#timers.indexOf(timer);
        if (index >= 0) this.#timers.splice(index, 1);
        reject(signal?.reason);
      };
      const timer: Timer = {
        dueAt: this.#monotonic + Math.max(0, Number.isFinite(ms) ? ms : 0),
        seq: this.#seq++,
        process,
        fire: () => {
          signal?.removeEventListener('abort', onAbort);
          resolve();
        },
      };
      this.#timers.push(timer);
      signal?.addEventListener('abort', onAbort, { once: true });
    });
  }

  #nextDue(limit: number): Timer | undefined {
    let best: Timer | undefined;
    for (const timer of this.#timers) {
      if (timer.dueAt > limit || timer.process?.paused) continue;
      if (!best || timer.dueAt < best.dueAt || (timer.dueAt === best.dueAt && timer.seq < best.seq))
        best = timer;
    }
    return best;
  }
}

/**
 * One simulated process's view of a {@link FakeClock}. While paused, none of its sleeps fire (its renewals and its
 * work are frozen together, as in a GC pause or SIGSTOP); time keeps moving, so on `resume()` everything overdue
 * fires at the next `advance`.
 */
export class FakeProcessClock implements Clock {
  #paused = false;
  readonly #timeline: FakeClock;

  constructor(timeline: FakeClock) {
    this.#timeline = timeline;
  }

  /** True between `pause()` and `resume()`. */
  get paused(): boolean {
    return this.#paused;
  }

  /** Freezes this process: none of its sleeps fire, however far the timeline advances, until `resume()`. */
  pause(): void {
    this.#paused = true;
  }

  /**
   * Unfreezes this process. Sleeps that came due while it was paused fire on the timeline's next `advance` (use
   * `advance(0)` to run them at once).
   */
  resume(): void {
    this.#paused = false;
  }

  now(): number {
    return this.#timeline.now();
  }

  monotonic(): number {
    return this.#timeline.monotonic();
  }

  random(): number {
    return this.#timeline.random();
  }

  sleep(ms: number, signal?: AbortSignal, _options?: SleepOptions): Promise<void> {
    return this.#timeline.schedule(ms, signal, this);
  }
}

/** Lets every queued promise reaction run: microtasks drain completely before an immediate fires. */
async function settle(): Promise<void> {
  await new Promise<void>((resolve) => setImmediate(resolve));
  await new Promise<void>((resolve) => setImmediate(resolve));
}

function mulberry32(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}
