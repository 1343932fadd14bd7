import { InvalidArgumentError, LockClient, MemoryLockService } from '@dlock/core';
import { describe, expect, it } from 'vitest';
import { harness } from './harness.js';

// An options object that throws when read (a Proxy trap, a getter, a revoked Proxy) is the caller's mistake: it gets
// the same typed error as any other bad option, never the raw error from inside the caller's object.
function hostileOptions(known: Record<string, unknown>): [string, object][] {
  const revocable = Proxy.revocable({ ...known }, {});
  revocable.revoke();
  const getterKey = Object.keys(known)[0] ?? 'ttlMs';
  return [
    [
      'ownKeys trap throws',
      new Proxy(
        { ...known },
        {
          ownKeys: () => {
            throw new Error('ownKeys trap');
          },
        },
      ),
    ],
    [
      'get trap throws',
      new Proxy(
        { ...known },
        {
          get: () => {
            throw new Error('get trap');
          },
        },
      ),
    ],
    [
      'getter throws',
      Object.defineProperty({ ...known }, getterKey, {
        enumerable: true,
        get: () => {
          throw new Error('getter');
        },
      }),
    ],
    ['revoked Proxy', revocable.proxy],
  ];
}

function expectTyped(error: unknown): void {
  expect(error).toBeInstanceOf(InvalidArgumentError);
  expect(error).toMatchObject({ code: 'INVALID_ARGUMENT' });
  expect((error as InvalidArgumentError).field.startsWith('options')).toBe(true);
}

async function settle(call: () => unknown): Promise<unknown> {
  try {
    await call();
  } catch (error) {
    return error;
  }
  return undefined;
}

describe('options that throw when read', () => {
  for (const [label, options] of hostileOptions({ ttlMs: 1_000 })) {
    it(`${label}: acquire and tryAcquire reject with InvalidArgumentError before any call`, async () => {
      const { client, faulty } = harness();
      expectTyped(await settle(() => client.acquire('a', options as never)));
      expectTyped(await settle(() => client.tryAcquire('a', options as never)));
      expect(faulty.counts.attempted.acquire).toBe(0);
      await client.close();
    });
  }

  for (const [label, options] of hostileOptions({ operationTimeoutMs: 1_000 })) {
    it(`${label}: LockClient and MemoryLockService constructors throw InvalidArgumentError`, () => {
      expectTyped(settleSync(() => new LockClient(new MemoryLockService(), options as never)));
      expectTyped(settleSync(() => new MemoryLockService(options as never)));
    });
  }

  for (const [label, options] of hostileOptions({ permits: 2, ttlMs: 1_000 })) {
    it(`${label}: semaphore() throws InvalidArgumentError`, async () => {
      const { client } = harness();
      expectTyped(settleSync(() => client.semaphore('s', options as never)));
      await client.close();
    });
  }

  for (const [label, options] of hostileOptions({ waitMs: 0 })) {
    it(`${label}: a semaphore's and an election's calls reject with InvalidArgumentError`, async () => {
      const { client } = harness();
      const semaphore = client.semaphore('s', { permits: 2, ttlMs: 1_000 });
      expectTyped(await settle(() => semaphore.acquire(options as never)));
      const election = client.election('e', { ttlMs: 1_000 });
      expectTyped(await settle(() => election.campaign(options as never)));
      expectTyped(await settle(() => election.runWhileLeader(async () => {}, options as never)));
      expectTyped(
        await settle(() =>
          election
            .observe(options as never)
            [Symbol.asyncIterator]()
            .next(),
        ),
      );
      expectTyped(settleSync(() => client.election('e2', options as never)));
      await client.close();
    });
  }
});

function settleSync(call: () => unknown): unknown {
  try {
    call();
  } catch (error) {
    return error;
  }
  return undefined;
}
