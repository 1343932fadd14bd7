import { MemoryLockService } from '@dlock/core';
import { FakeClock } from '@dlock/testing';
import { afterEach, describe, expect, it } from 'vitest';

const request = (name: string) => ({
  name,
  ownerId: 'o',
  ttlMs: 1_000,
  waitMs: 0,
  signal: new AbortController().signal,
});

describe('MemoryLockService watch callbacks', () => {
  const uncaught: unknown[] = [];
  const record = (error: unknown): void => {
    uncaught.push(error);
  };
  afterEach(() => {
    process.off('uncaughtException', record);
    process.off('unhandledRejection', record);
    uncaught.length = 0;
  });

  it('a callback that throws reaches no one: the process goes on and the other callbacks still run', async () => {
    process.on('uncaughtException', record);
    const clock = new FakeClock();
    const memory = new MemoryLockService({ clock });
    const heard: string[] = [];
    // Called directly (watch and watchChanges are public), not through LockClient, which guards its own.
    memory.watch('a', () => {
      throw new Error('watch callback broke');
    });
    memory.watch('a', () => heard.push('released'));
    memory.watchChanges('a', () => {
      throw new Error('change callback broke');
    });
    memory.watchChanges('a', () => heard.push('changed'));
    const taken = await memory.acquire(request('a'));
    if (!taken.acquired) throw new Error('not acquired');
    expect(
      await memory.release({
        name: 'a',
        ownerId: 'o',
        ownershipToken: taken.grant.ownershipToken,
        fencingToken: taken.grant.fencingToken,
      }),
    ).toBe(true);
    // Let the microtasks (and a macrotask turn, where an uncaught exception is reported) run.
    await new Promise((resolve) => setImmediate(resolve));
    expect(uncaught).toEqual([]);
    expect(heard).toEqual(['changed', 'changed', 'released']);
  });

  it('an async callback that rejects reaches no one either: no unhandled rejection, the others still run', async () => {
    // Typed to return nothing, an async callback type-checks all the same; its rejected promise, left alone, is an
    // unhandled rejection, on which Node ends the process by default.
    process.on('unhandledRejection', record);
    const clock = new FakeClock();
    const memory = new MemoryLockService({ clock });
    const heard: string[] = [];
    memory.watch('a', async () => {
      throw new Error('async watch callback broke');
    });
    memory.watch('a', () => heard.push('released'));
    memory.watchChanges('a', async () => {
      throw new Error('async change callback broke');
    });
    // A thenable whose then throws, as a JavaScript caller's callback may return.
    memory.watchChanges('a', (() => ({
      // biome-ignore lint/suspicious/noThenProperty: a thenable whose then throws is the input under test
      then() {
        throw new Error('then broke');
      },
    })) as () => void);
    memory.watchChanges('a', () => heard.push('changed'));
    const taken = await memory.acquire(request('a'));
    if (!taken.acquired) throw new Error('not acquired');
    expect(
      await memory.release({
        name: 'a',
        ownerId: 'o',
        ownershipToken: taken.grant.ownershipToken,
        fencingToken: taken.grant.fencingToken,
      }),
    ).toBe(true);
    await new Promise((resolve) => setImmediate(resolve));
    expect(uncaught).toEqual([]);
    expect(heard).toEqual(['changed', 'changed', 'released']);
  });
});
