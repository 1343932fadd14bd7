import { TransportError } from '@dlock/core';
import { unlessAborted } from '@dlock/core/adapter';
import { FakeClock } from '@dlock/testing';
import { describe, expect, it, vi } from 'vitest';
import type { CallOptionsLike } from './client-like.js';
import { EtcdRequests, type RequestOptions } from './requests.js';

/** One bounded request, as the service makes them (formerly `withDeadline(what, timeoutMs, call, onLate, signal)`). */
function withDeadline<T>(
  what: string,
  timeoutMs: number,
  call: (options: CallOptionsLike) => Promise<T>,
  onLate?: (value: T) => void,
  signal?: AbortSignal,
): Promise<T> {
  const options: RequestOptions<T> = { timeoutMs, signal, ...(onLate ? { onLate } : {}) };
  return new EtcdRequests(new FakeClock(), timeoutMs).run(what, call, options);
}

/** A call whose answer the test hands out by hand. */
function manualCall<T>(): { call: () => Promise<T>; answer: (value: T) => void } {
  let answer: (value: T) => void = () => {};
  return {
    call: () =>
      new Promise<T>((resolve) => {
        answer = resolve;
      }),
    answer: (value) => answer(value),
  };
}

describe('withDeadline with a signal', () => {
  it('settles with the reason the moment the signal aborts, and hands a later answer to onLate', async () => {
    const { call, answer } = manualCall<string>();
    const onLate = vi.fn();
    const controller = new AbortController();
    const reason = new TransportError('core gave up');
    const pending = withDeadline('test', 60_000, call, onLate, controller.signal);
    controller.abort(reason);
    await expect(pending).rejects.toBe(reason);
    answer('landed');
    await Promise.resolve();
    expect(onLate).toHaveBeenCalledWith('landed');
  });

  it('makes no call at all once the signal has aborted', async () => {
    const call = vi.fn(() => Promise.resolve('never'));
    const controller = new AbortController();
    controller.abort(new TransportError('gone'));
    await expect(withDeadline('test', 60_000, call, undefined, controller.signal)).rejects.toBeInstanceOf(
      TransportError,
    );
    expect(call).not.toHaveBeenCalled();
  });

  it('answers as usual when the signal does not abort', async () => {
    const controller = new AbortController();
    await expect(
      withDeadline('test', 60_000, () => Promise.resolve(7), undefined, controller.signal),
    ).resolves.toBe(7);
    controller.abort();
  });
});

describe('unlessAborted', () => {
  it('rejects with the reason when the signal aborts first, and otherwise settles as the promise does', async () => {
    const controller = new AbortController();
    const never = new Promise<number>(() => {});
    const pending = unlessAborted(never, controller.signal);
    controller.abort('stop');
    await expect(pending).rejects.toBe('stop');
    await expect(unlessAborted(Promise.resolve(1), new AbortController().signal)).resolves.toBe(1);
    await expect(
      unlessAborted(Promise.reject(new Error('no')), new AbortController().signal),
    ).rejects.toThrow('no');
  });
});
