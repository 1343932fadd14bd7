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
});
