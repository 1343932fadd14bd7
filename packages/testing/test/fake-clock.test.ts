import { FakeClock } from '@dlock/testing';
import { describe, expect, it } from 'vitest';

describe('FakeClock', () => {
  it('fires due sleeps in time order, FIFO among equals, letting promises settle between them', async () => {
    const clock = new FakeClock();
    const log: string[] = [];
    const logAfter = (ms: number, label: string) =>
      clock.sleep(ms).then(async () => {
        log.push(`${label}@${clock.monotonic()}`);
        await Promise.resolve();
        log.push(`${label}.then`);
      });
    void logAfter(30, 'c');
    void logAfter(10, 'a');
    void logAfter(10, 'b');
    void logAfter(50, 'late');
    await clock.advance(40);
    expect(log).toEqual(['a@10', 'a.then', 'b@10', 'b.then', 'c@30', 'c.then']);
    expect(clock.monotonic()).toBe(40);
    expect(clock.pendingTimers).toBe(1);
  });

  it('runs sleeps scheduled by sleeps within the same advance', async () => {
    const clock = new FakeClock();
    const times: number[] = [];
    void (async () => {
      for (let i = 0; i < 5; i++) {
        await clock.sleep(100);
        times.push(clock.monotonic());
      }
    })();
    await clock.advance(1_000);
    expect(times).toEqual([100, 200, 300, 400, 500]);
  });

  it('jump() moves time without firing anything; overdue sleeps fire on the next advance', async () => {
    const clock = new FakeClock();
    let fired = false;
    void clock.sleep(100).then(() => {
      fired = true;
    });
    clock.jump(500);
    await Promise.resolve();
    expect(fired).toBe(false);
    expect(clock.monotonic()).toBe(500);
    await clock.advance(0);
    expect(fired).toBe(true);
  });

  it('stepWall() moves only the wall clock', () => {
    const clock = new FakeClock({ wallStart: 1_000_000 });
    clock.stepWall(-5_000);
    expect(clock.now()).toBe(995_000);
    expect(clock.monotonic()).toBe(0);
  });

  it('rejects an aborted sleep with the signal reason and forgets it', async () => {
    const clock = new FakeClock();
    const controller = new AbortController();
    const sleeping = clock.sleep(100, controller.signal);
    const reason = new Error('stop');
    controller.abort(reason);
    await expect(sleeping).rejects.toBe(reason);
    expect(clock.pendingTimers).toBe(0);
    await expect(clock.sleep(1, AbortSignal.abort(reason))).rejects.toBe(reason);
  });

  it('has a seeded, repeatable random()', () => {
    const a = new FakeClock({ seed: 42 });
    const b = new FakeClock({ seed: 42 });
    const c = new FakeClock({ seed: 43 });
    const seq = (clock: FakeClock) => Array.from({ length: 5 }, () => clock.random());
    const first = seq(a);
    expect(seq(b)).toEqual(first);
    expect(seq(c)).not.toEqual(first);
    for (const x of first) expect(x >= 0 && x < 1).toBe(true);
  });

  it('pauses one process view alone; its overdue sleeps fire after resume', async () => {
    const clock = new FakeClock();
    const paused = clock.process();
    const running = clock.process();
    const log: string[] = [];
    void paused.sleep(100).then(() => log.push(`paused@${clock.monotonic()}`));
    void running.sleep(200).then(() => log.push(`running@${clock.monotonic()}`));
    paused.pause();
    await clock.advance(300);
    expect(log).toEqual(['running@200']);
    paused.resume();
    await clock.advance(0);
    expect(log).toEqual(['running@200', 'paused@300']);
  });

  it('refuses negative steps and reports advanceUntil outcomes', async () => {
    const clock = new FakeClock();
    await expect(clock.advance(-1)).rejects.toThrow(RangeError);
    expect(() => clock.jump(-1)).toThrow(RangeError);
    let flag = false;
    void clock.sleep(50).then(() => {
      flag = true;
    });
    expect(await clock.advanceUntil(() => flag, 100, 10)).toBe(true);
    expect(clock.monotonic()).toBe(50);
    expect(await clock.advanceUntil(() => false, 100, 10)).toBe(false);
    expect(clock.monotonic()).toBe(150);
  });

  // A timer re-armed for a time already passed fires again at the same instant, for ever: advance() never returned,
  // and a test waiting on it hung until its timeout. In real time it is a busy loop, so it is a failure to report.
  it('stops an advance that keeps firing sleeps without time moving on, and says where', {
    timeout: 10_000,
  }, async () => {
    const clock = new FakeClock();
    let fired = 0;
    let spinning = true;
    const spin = (): void => {
      void clock.sleep(0).then(() => {
        fired += 1;
        if (spinning) spin();
      });
    };
    await clock.advance(100);
    spin();
    await expect(clock.advance(50)).rejects.toThrow(
      'FakeClock.advance: 10000 sleeps fired at monotonic 100 ms without time moving on: something re-arms a timer for a time already passed (a busy loop)',
    );
    expect(fired).toBe(10_000);
    expect(clock.monotonic()).toBe(100);
    // The clock is still usable: once the loop stops, time moves on and later sleeps fire.
    spinning = false;
    let later = false;
    void clock.sleep(30).then(() => {
      later = true;
    });
    await clock.advance(30);
    expect(later).toBe(true);
    expect(clock.monotonic()).toBe(130);
  });

  it('still fires thousands of sleeps due at one instant, and chains of sleeps that move time on', async () => {
    const clock = new FakeClock();
    let fired = 0;
    for (let i = 0; i < 5_000; i++) void clock.sleep(10).then(() => (fired += 1));
    let chained = 0;
    const chain = (): void => {
      void clock.sleep(1).then(() => {
        chained += 1;
        if (chained < 12_000) chain();
      });
    };
    chain();
    await clock.advance(12_000);
    expect(fired).toBe(5_000);
    expect(chained).toBe(12_000);
  });
});
