import fc from 'fast-check';
import { describe, expect, it, vi } from 'vitest';
import * as api from './index.js';
import { InvalidArgumentError } from './index.js';

/** Calls `f` and returns what it threw, sync or async. */
async function thrown(f: () => unknown): Promise<unknown> {
  try {
    await f();
  } catch (error) {
    return error;
  }
  return undefined;
}

const junk = fc.oneof(
  fc.anything(),
  fc.constantFrom<unknown>(
    null,
    undefined,
    Symbol('x'),
    10n,
    Number.NaN,
    '',
    [],
    new Map(),
    Object.create(null),
  ),
);

function driver(log: string[]) {
  return {
    guard: async () => {
      log.push('guard');
      return 'accepted' as const;
    },
    lockedMark: async () => {
      log.push('lockedMark');
      return 1n;
    },
    classify: () => undefined,
    transaction: async <T>(_db: unknown, _call: unknown, body: (tx: unknown) => Promise<T>) => {
      log.push('transaction');
      return body({});
    },
  };
}

describe('every public function refuses junk with InvalidArgumentError, before any driver step', () => {
  it('runGate and checkGate: junk driver, call or fn', async () => {
    await fc.assert(
      fc.asyncProperty(fc.constantFrom('driver', 'call', 'fn'), junk, async (position, value) => {
        const log: string[] = [];
        const args: Partial<Record<'driver' | 'call' | 'fn', unknown>> = {
          driver: driver(log),
          call: { resource: 'r', token: 1n },
          fn: async () => 'x',
          [position]: value,
        };
        const run = await thrown(() =>
          api.runGate(args.driver as never, null, args.call as never, args.fn as never),
        );
        expect(run).toBeInstanceOf(InvalidArgumentError);
        if (position !== 'fn') {
          const check = await thrown(() => api.checkGate(args.driver as never, {}, args.call as never));
          expect(check).toBeInstanceOf(InvalidArgumentError);
        }
        expect(log).toEqual([]);
      }),
      { numRuns: 300 },
    );
  });

  it('a call with a wrong field or an unknown key never reaches the driver', async () => {
    const bad: unknown[] = [
      { resource: 'r', token: 1 },
      { resource: 'r', token: 0n },
      { resource: '', token: 1n },
      { resource: 'r', token: 1n, lockTimeoutMs: '5' },
      { resource: 'r', token: 1n, isolationLevel: 'chaos' },
      { resource: 'r', token: 1n, lockTimeoutMS: 5 },
    ];
    for (const call of bad) {
      const log: string[] = [];
      expect(await thrown(() => api.runGate(driver(log), null, call as never, async () => 1))).toBeInstanceOf(
        InvalidArgumentError,
      );
      expect(log).toEqual([]);
    }
  });

  it('the helpers: junk in any argument is InvalidArgumentError, never a TypeError', async () => {
    const calls: ((x: unknown) => unknown)[] = [
      (x) => api.parseFencingToken(x),
      (x) => api.parseFencingToken(x, x as never),
      (x) => api.assertResource(x),
      (x) => api.assertIdentifier(x, 'name'),
      (x) => api.assertCallback(x),
      (x) => api.parseFence(x, 1n),
      (x) => api.parseFence('r', x),
      (x) => api.parseIsolationLevel(x === undefined ? null : x),
      (x) => api.parseLockTimeoutMs(x === undefined ? null : x),
      (x) => api.rejectUnknownKeys({ a: 1 }, 'options', x as never),
      (x) => api.closestKey(x as never, ['table']),
      (x) => api.closestKey('tabel', x as never),
      (x) => api.quoteIdentifier(x as never),
      (x) => api.postgresFencingStatements(x as never, undefined),
      (x) => api.postgresFencingStatements('t', (x === undefined ? null : x) as never),
      (x) => api.postgresLockTimeout(x as never),
      (x) => api.createTableRacingOthers(x as never),
      (x) => api.markFromRows(x as never),
      (x) => api.withFenceRetry(x as never),
      (x) => api.withFenceRetry(async () => 1, { maxAttempts: x as never }),
      (x) => api.withFenceRetry(async () => 1, { baseDelayMs: x as never }),
    ];
    await fc.assert(
      fc.asyncProperty(fc.nat({ max: calls.length - 1 }), junk, async (which, value) => {
        const error = await thrown(() => calls[which]?.(value));
        // Some junk is valid in some places ('' as a name, a function as a callback); it must then not throw at all.
        if (error !== undefined) {
          expect(error).toBeInstanceOf(InvalidArgumentError);
          expect(error).not.toBeInstanceOf(TypeError);
        }
      }),
      { numRuns: 3000 },
    );
  });

  it('a 1 MB resource name is refused from its length, without reading its characters', () => {
    const name = 'é'.repeat(1_000_000);
    const reads = vi.spyOn(String.prototype, 'charCodeAt');
    const scans = vi.spyOn(String.prototype, 'includes');
    let error: unknown;
    let counted: number[] = [];
    try {
      api.assertResource(name);
    } catch (e) {
      error = e;
    } finally {
      // Read before the restore, which clears the spies' records.
      counted = [reads.mock.calls.length, scans.mock.calls.length];
      reads.mockRestore();
      scans.mockRestore();
    }
    expect(error).toBeInstanceOf(InvalidArgumentError);
    expect(counted).toEqual([0, 0]);
  });

  it('a 1 MB unknown option key is neither compared nor copied into the error', () => {
    const key = 'k'.repeat(1_000_000);
    let error: unknown;
    try {
      api.rejectUnknownKeys({ [key]: 1 }, 'options', ['table']);
    } catch (e) {
      error = e;
    }
    expect(error).toBeInstanceOf(InvalidArgumentError);
    expect((error as Error).message.length).toBeLessThan(300);
    expect((error as InvalidArgumentError).field.length).toBeLessThan(100);
  });
});

describe('the error classes', () => {
  it('build their message from any value without throwing', () => {
    fc.assert(
      fc.property(fc.anything(), fc.constantFrom<unknown>(Symbol('s'), Object.create(null)), (a, b) => {
        for (const value of [a, b]) {
          const errors = [
            new api.StaleFencingTokenError(value as never, value as never, value as never),
            new api.FenceConflictError(value as never, value),
            new api.FenceBusyError(value as never, value),
            new api.FenceBrokenError(value as never, 'row-vanished', value as never),
            new api.InvalidArgumentError(value as never, value as never),
          ];
          for (const error of errors) {
            expect(typeof error.message).toBe('string');
            expect(api.isDLockError(error)).toBe(true);
          }
        }
      }),
      { numRuns: 200 },
    );
  });
});
