import { MemoryLockService } from '@dlock/core';
import { FakeClock } from '@dlock/testing';
import { afterEach, describe, expect, it } from 'vitest';

const signal = new AbortController().signal;

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

  // A callback that throws or rejects is the contract's case (packages/testing, run on MemoryLockService there).
  it('a callback that returns a thenable whose then throws reaches no one: the others still run', async () => {
    process.on('uncaughtException', record);
    process.on('unhandledRejection', record);
    const clock = new FakeClock();
    const memory = new MemoryLockService({ clock });
    const heard: string[] = [];
    memory.watch('a', () => heard.push('released'));
    // As a JavaScript caller's callback may return.
    memory.watchChanges('a', (() => ({
      // biome-ignore lint/suspicious/noThenProperty: a thenable whose then throws is the input under test
      then() {
        throw new Error('then broke');
      },
    })) as () => void);
    memory.watchChanges('a', () => heard.push('changed'));
    const taken = await memory.acquire({ name: 'a', ownerId: 'o', ttlMs: 1_000, waitMs: 0, signal });
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
