import { InvalidArgumentError, LockClient, MemoryLockService } from '@dlock/core';
import { validateOwnerId } from '@dlock/core/adapter';
import { FakeClock } from '@dlock/testing';
import { describe, expect, it } from 'vitest';
import { harness } from './harness.js';

type Loose = Parameters<LockClient['acquire']>[1];

describe('input validation at the public edge', () => {
  const badNames: [string, unknown][] = [
    ['empty', ''],
    ['number', 42],
    ['undefined', undefined],
    ['null', null],
    ['object', { toString: () => 'a' }],
    ['over 1024 UTF-8 bytes', 'é'.repeat(513)],
    ['lone surrogate', 'a\uD800b'],
  ];
  for (const [label, name] of badNames) {
    it(`rejects a name that is ${label}, before any network call`, async () => {
      const { client, faulty } = harness();
      const error = await client.acquire(name as string, { ttlMs: 1_000 }).catch((e: unknown) => e);
      expect(error).toBeInstanceOf(InvalidArgumentError);
      expect(error).toMatchObject({ code: 'INVALID_ARGUMENT', field: 'name' });
      expect(faulty.counts.attempted.acquire).toBe(0);
    });
  }

  it('accepts names of exactly 1024 UTF-8 bytes, with any content', async () => {
    const { client } = harness();
    await expect(client.acquire('é'.repeat(512), { ttlMs: 1_000 })).resolves.toBeDefined();
    await expect(client.acquire('{a} b/c\n🔒', { ttlMs: 1_000 })).resolves.toBeDefined();
  });

  const badOptions: [string, unknown, string][] = [
    ['missing options', undefined, 'options'],
    ['options not an object', 'x', 'options'],
    ['missing ttlMs', {}, 'options.ttlMs'],
    ['ttlMs a string', { ttlMs: '1000' }, 'options.ttlMs'],
    ['ttlMs NaN', { ttlMs: Number.NaN }, 'options.ttlMs'],
    ['ttlMs Infinity', { ttlMs: Number.POSITIVE_INFINITY }, 'options.ttlMs'],
    ['ttlMs fractional', { ttlMs: 1000.5 }, 'options.ttlMs'],
    ['ttlMs below 10', { ttlMs: 9 }, 'options.ttlMs'],
    ['ttlMs above 2^31-1', { ttlMs: 2 ** 31 }, 'options.ttlMs'],
    ['ttlMs a bigint', { ttlMs: 1000n }, 'options.ttlMs'],
    ['waitMs negative', { ttlMs: 1000, waitMs: -1 }, 'options.waitMs'],
    ['waitMs NaN', { ttlMs: 1000, waitMs: Number.NaN }, 'options.waitMs'],
    ['waitMs Infinity', { ttlMs: 1000, waitMs: Number.POSITIVE_INFINITY }, 'options.waitMs'],
    ['waitMs above 2^31-1', { ttlMs: 1000, waitMs: 2 ** 31 }, 'options.waitMs'],
    ['waitMs a string', { ttlMs: 1000, waitMs: '5' }, 'options.waitMs'],
    ['reentrant not boolean', { ttlMs: 1000, reentrant: 'yes' }, 'options.reentrant'],
    ['signal not an AbortSignal', { ttlMs: 1000, signal: {} }, 'options.signal'],
    ['onLost not a function', { ttlMs: 1000, onLost: 'log' }, 'options.onLost'],
  ];
  for (const [label, options, field] of badOptions) {
    it(`rejects acquire options with ${label}, naming ${field}`, async () => {
      const { client, faulty } = harness();
      for (const call of [
        () => client.acquire('a', options as Loose),
        () => client.tryAcquire('a', options as Loose),
        () => client.withLock('a', options as Loose, async () => 1),
      ]) {
        const error = await call().catch((e: unknown) => e);
        expect(error).toBeInstanceOf(InvalidArgumentError);
        expect((error as InvalidArgumentError).field).toBe(field);
      }
      expect(faulty.counts.attempted.acquire).toBe(0);
    });
  }

  it('accepts the boundary values of ttlMs and waitMs', async () => {
    const { client } = harness();
    await expect(client.acquire('min', { ttlMs: 10, waitMs: 0 })).resolves.toBeDefined();
    await expect(client.acquire('max', { ttlMs: 2 ** 31 - 1, waitMs: 2 ** 31 - 1 })).resolves.toBeDefined();
  });

  const badClientOptions: [string, unknown, string][] = [
    ['options not an object', 5, 'options'],
    ['driftFactor negative', { driftFactor: -0.1 }, 'options.driftFactor'],
    ['driftFactor above 0.5', { driftFactor: 0.6 }, 'options.driftFactor'],
    ['renewFailBudget zero', { renewFailBudget: 0 }, 'options.renewFailBudget'],
    ['renewFailBudget fractional', { renewFailBudget: 1.5 }, 'options.renewFailBudget'],
    ['retry not an object', { retry: 3 }, 'options.retry'],
    ['retry.baseMs zero', { retry: { baseMs: 0 } }, 'options.retry.baseMs'],
    ['retry.capMs below baseMs', { retry: { baseMs: 100, capMs: 50 } }, 'options.retry.capMs'],
    ['operationTimeoutMs zero', { operationTimeoutMs: 0 }, 'options.operationTimeoutMs'],
    ['operationTimeoutMs too large', { operationTimeoutMs: 2 ** 31 }, 'options.operationTimeoutMs'],
    ['ownerId empty', { ownerId: '' }, 'options.ownerId'],
    ['clock missing methods', { clock: { now: () => 0 } }, 'options.clock.monotonic'],
  ];
  for (const [label, options, field] of badClientOptions) {
    it(`rejects client options with ${label}`, () => {
      expect(() => new LockClient(new MemoryLockService(), options as never)).toThrow(
        expect.objectContaining({ code: 'INVALID_ARGUMENT', field }),
      );
    });
  }

  it('rejects a service that does not implement LockService', () => {
    expect(() => new LockClient({} as never)).toThrow(InvalidArgumentError);
    expect(() => new LockClient(null as never)).toThrow(InvalidArgumentError);
  });

  it('rejects bad onRelease and withLock arguments', async () => {
    const { client } = harness();
    expect(() => client.onRelease('a', 'cb' as never)).toThrow(
      expect.objectContaining({ field: 'callback' }),
    );
    expect(() => client.onRelease('', () => {})).toThrow(expect.objectContaining({ field: 'name' }));
    await expect(client.withLock('a', { ttlMs: 1_000 }, 'fn' as never)).rejects.toMatchObject({
      field: 'fn',
    });
  });
});

describe('the in-process services refuse misspelt options too', () => {
  it('MemoryLockService and FaultyLockService name the unknown key and the one meant', async () => {
    const { FaultyLockService } = await import('@dlock/testing');
    expect(() => new MemoryLockService({ clok: 1 } as never)).toThrow(
      /options\.clok is not an option \(did you mean "clock"\?\)/,
    );
    expect(() => new MemoryLockService(null as never)).toThrow(InvalidArgumentError);
    const memory = new MemoryLockService();
    expect(() => new FaultyLockService(memory, { Clock: 1 } as never)).toThrow(/did you mean "clock"/);
    expect(() => new FaultyLockService(memory, null as never)).toThrow(InvalidArgumentError);
  });
});

describe('MemoryLockService called directly checks a semaphore limit', () => {
  // The lock contract covers names and metadata; a limit reaches only the permit calls, which no contract case
  // gives a bad one. Unchecked, -1 threw a RangeError from new Array, and 0 made a semaphore nobody can enter.
  it('refuses permits that are not an integer from 1 to MAX_PERMITS, before any state changes', async () => {
    const memory = new MemoryLockService();
    const ask = { name: 's', ownerId: 'o', ttlMs: 1_000, waitMs: 0, signal: new AbortController().signal };
    for (const permits of [0, -1, 1.5, Number.NaN, 10_001, '2']) {
      const invalid = (field: string) => ({ code: 'INVALID_ARGUMENT', field });
      await expect
        .soft(memory.acquirePermit({ ...ask, permits: permits as number }))
        .rejects.toMatchObject(invalid('request.permits'));
      await expect
        .soft(memory.availablePermits('s', permits as number))
        .rejects.toMatchObject(invalid('permits'));
      await expect
        .soft(memory.inspectPermits('s', permits as number))
        .rejects.toMatchObject(invalid('permits'));
    }
    // Nothing was taken or remembered: a limit of 2 is the semaphore's first.
    expect(await memory.inspectPermits('s', 2)).toEqual({ permits: 2, held: [], waiters: 0 });
  });
});

describe('owner ids: one rule for LockClient and for a service called directly', () => {
  // A lone surrogate has no UTF-8 form: a backend stored 'host\ud800:1' and inspect answered 'host\ufffd:1', an
  // owner id nobody has.
  const badOwnerIds: [string, unknown][] = [
    ['empty', ''],
    ['a lone surrogate', 'host\uD800:1'],
    ['257 UTF-16 units', 'o'.repeat(257)],
    ['a number', 42],
  ];

  for (const [label, ownerId] of badOwnerIds) {
    it(`LockClient refuses an ownerId that is ${label} at construction`, () => {
      const clock = new FakeClock();
      const memory = new MemoryLockService({ clock });
      expect(() => new LockClient(memory, { clock, ownerId: ownerId as string })).toThrow(
        expect.objectContaining({ code: 'INVALID_ARGUMENT', field: 'options.ownerId' }),
      );
      expect(() => validateOwnerId(ownerId, 'ownerId')).toThrow(InvalidArgumentError);
    });

    it(`MemoryLockService refuses an owner id that is ${label} on acquire and acquirePermit, taking nothing`, async () => {
      const clock = new FakeClock();
      const memory = new MemoryLockService({ clock });
      const ask = {
        name: 'a',
        ownerId: ownerId as string,
        ttlMs: 1_000,
        waitMs: 0,
        signal: new AbortController().signal,
      };
      const invalid = { code: 'INVALID_ARGUMENT', field: 'request.ownerId' };
      await expect(memory.acquire(ask)).rejects.toMatchObject(invalid);
      await expect(memory.acquirePermit({ ...ask, permits: 1 })).rejects.toMatchObject(invalid);
      expect(await memory.inspect('a')).toEqual({ held: false });
      expect(await memory.availablePermits('a', 1)).toBe(1);
    });
  }

  it('accepts 1 and 256 UTF-16 units, astral characters included', async () => {
    const clock = new FakeClock();
    const memory = new MemoryLockService({ clock });
    for (const ownerId of ['o', 'o'.repeat(256), '🔒'.repeat(128)]) {
      expect(new LockClient(memory, { clock, ownerId }).ownerId).toBe(ownerId);
      expect(validateOwnerId(ownerId, 'ownerId')).toBe(ownerId);
    }
  });
});
