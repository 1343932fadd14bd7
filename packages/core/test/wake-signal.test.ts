import { FakeClock } from '@dlock/testing';
import { describe, expect, it } from 'vitest';
import { CallDeadlines } from '../src/bounded-call.js';
import { linkSignals, unlessAborted, WakeSignal } from '../src/wake-signal.js';
import { outcome } from './harness.js';

describe('WakeSignal on a shared deadline timer', () => {
  const setup = () => {
    const clock = new FakeClock();
    return { clock, deadlines: new CallDeadlines(clock), wake: new WakeSignal() };
  };

  it('returns early on a notice, and keeps a notice that came before the wait', async () => {
    const { clock, deadlines, wake } = setup();
    const waiting = outcome(wake.wait(clock, 1_000, new AbortController().signal, deadlines));
    await clock.advance(10);
    wake.notify();
    await clock.advance(0);
    expect(waiting.done).toBe(true);
    expect(clock.monotonic()).toBe(10);
    wake.notify();
    await wake.wait(clock, 1_000, new AbortController().signal, deadlines);
    expect(clock.monotonic()).toBe(10);
  });

  it('returns after ms without a notice, on the one shared timer', async () => {
    const { clock, deadlines, wake } = setup();
    const signal = new AbortController().signal;
    const a = outcome(wake.wait(clock, 300, signal, deadlines));
    const b = outcome(new WakeSignal().wait(clock, 500, signal, deadlines));
    // One timer for both waits, armed for the earlier one.
    expect(clock.pendingTimers).toBe(1);
    await clock.advance(299);
    expect(a.done).toBe(false);
    await clock.advance(1);
    expect(a.done).toBe(true);
    expect(b.done).toBe(false);
    await clock.advance(200);
    expect(b.done).toBe(true);
    expect(a.error).toBeUndefined();
  });

  it('rejects with the signal reason on abort, and with the reason the timer is stopped with', async () => {
    const { clock, deadlines, wake } = setup();
    const abort = new AbortController();
    const aborted = outcome(wake.wait(clock, 1_000, abort.signal, deadlines));
    const reason = new Error('gave up');
    abort.abort(reason);
    await clock.advance(0);
    expect(aborted.error).toBe(reason);
    const stopped = outcome(new WakeSignal().wait(clock, 1_000, new AbortController().signal, deadlines));
    const closed = new Error('closed');
    deadlines.stop(closed);
    await clock.advance(0);
    expect(stopped.error).toBe(closed);
  });
});

describe('unlessAborted', () => {
  it('settles like the promise, or with the signal reason as soon as it aborts', async () => {
    await expect(unlessAborted(Promise.resolve(1), new AbortController().signal)).resolves.toBe(1);
    const abort = new AbortController();
    const never = unlessAborted(new Promise(() => {}), abort.signal);
    const reason = new Error('stop');
    abort.abort(reason);
    await expect(never).rejects.toBe(reason);
    await expect(unlessAborted(Promise.resolve(1), abort.signal)).rejects.toBe(reason);
  });
});

describe('linkSignals with many calls in flight', () => {
  it('links 50 callers to one close signal without a MaxListenersExceededWarning', async () => {
    const warnings: string[] = [];
    const onWarning = (warning: Error): void => {
      warnings.push(warning.name);
    };
    process.on('warning', onWarning);
    const close = new AbortController();
    const links = Array.from({ length: 50 }, () => linkSignals(new AbortController().signal, close.signal));
    await new Promise((resolve) => setImmediate(resolve));
    process.off('warning', onWarning);
    expect(warnings).not.toContain('MaxListenersExceededWarning');
    close.abort(new Error('closed'));
    expect(links.every((link) => link.signal.aborted)).toBe(true);
    for (const link of links) link.dispose();
  });
});
