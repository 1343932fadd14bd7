import { describe, expect, it } from 'vitest';
import {
  FenceBrokenError,
  FenceBusyError,
  FenceConflictError,
  InvalidArgumentError,
  StaleFencingTokenError,
} from './errors.js';
import type { FenceCall, GuardVerdict, RetryableKind, TransactionDriver } from './gate-driver.js';
import { checkGate, runGate } from './run-gate.js';

/** Committed marks, and every step the driver was asked to take, in order. */
interface MemoryDb {
  readonly marks: Map<string, bigint>;
  readonly log: string[];
}

/** One open transaction: its writes stay here until commit. */
interface MemoryTx {
  readonly db: MemoryDb;
  readonly staged: Map<string, bigint>;
}

type Step = 'begin' | 'guard' | 'lockedMark' | 'commit';

interface DriverSetup {
  /**
   * `returning`: the guard says "accepted" exactly when it raised or kept the mark (PostgreSQL, SQLite).
   * `affected-rows`: an insert cannot be told apart from a refusal, so it says "read-mark" (MySQL).
   */
  readonly verdicts?: 'returning' | 'affected-rows';
  /** Throw this at that step instead of taking it. */
  readonly fail?: Partial<Record<Step, unknown>>;
  /** The locked read finds no row, as if it had been deleted under the lock. */
  readonly vanish?: boolean;
}

/** A database in a Map, with the guard's semantics: the mark only rises, and a token below it is refused. */
function memoryDriver(setup: DriverSetup = {}): TransactionDriver<MemoryDb, MemoryTx> {
  const step = (db: MemoryDb, name: Step) => {
    db.log.push(name);
    if (setup.fail?.[name] !== undefined) throw setup.fail[name];
  };
  const current = (tx: MemoryTx, resource: string) => tx.staged.get(resource) ?? tx.db.marks.get(resource);
  return {
    async guard(tx, call): Promise<GuardVerdict> {
      step(tx.db, 'guard');
      const mark = current(tx, call.resource);
      if (mark !== undefined && mark > call.token) return 'read-mark';
      tx.staged.set(call.resource, call.token);
      if (setup.verdicts === 'affected-rows' && mark === undefined) return 'read-mark';
      return 'accepted';
    },
    async lockedMark(tx, call) {
      step(tx.db, 'lockedMark');
      return setup.vanish ? null : (current(tx, call.resource) ?? null);
    },
    classify(error): RetryableKind {
      const code = (error as { code?: unknown }).code;
      if (code === 'CONFLICT') return 'conflict';
      if (code === 'BUSY') return 'busy';
      return undefined;
    },
    async transaction(db, call, body) {
      const tx: MemoryTx = { db, staged: new Map() };
      db.log.push(`begin ${call.isolationLevel ?? '-'} ${call.lockTimeoutMs ?? '-'}`);
      if (setup.fail?.begin !== undefined) throw setup.fail.begin;
      try {
        const value = await body(tx);
        step(db, 'commit');
        for (const [resource, mark] of tx.staged) db.marks.set(resource, mark);
        return value;
      } catch (error) {
        db.log.push('rollback');
        throw error;
      }
    },
  };
}

const newDb = (marks: Record<string, bigint> = {}): MemoryDb => ({
  marks: new Map(Object.entries(marks)),
  log: [],
});
const call = (token: bigint, resource = 'r'): FenceCall => ({ resource, token });
const rejection = (promise: Promise<unknown>) =>
  promise.then(
    () => {
      throw new Error('expected a rejection');
    },
    (error: unknown) => error,
  );
const driverError = (code: string) => Object.assign(new Error(code), { code });

describe('runGate', () => {
  it('admits a first, an equal and a higher token, committing the mark with the write', async () => {
    const db = newDb();
    const driver = memoryDriver();
    expect(await runGate(driver, db, call(5n), async () => 'first')).toBe('first');
    expect(await runGate(driver, db, call(5n), async () => 'equal')).toBe('equal');
    expect(await runGate(driver, db, call(7n), async () => 'higher')).toBe('higher');
    expect(db.marks.get('r')).toBe(7n);
    expect(db.log.filter((s) => s === 'commit')).toHaveLength(3);
    expect(db.log).not.toContain('lockedMark');
  });

  it('runs the guard first and the callback in the same transaction, with the call settings', async () => {
    const db = newDb();
    const seen: string[] = [];
    await runGate(
      memoryDriver(),
      db,
      { ...call(1n), isolationLevel: 'serializable', lockTimeoutMs: 50 },
      async (tx) => {
        seen.push(tx.staged.get('r') === 1n ? 'guard passed in this transaction' : 'no guard');
        db.log.push('fn');
      },
    );
    expect(seen).toEqual(['guard passed in this transaction']);
    expect(db.log).toEqual(['begin serializable 50', 'guard', 'fn', 'commit']);
  });

  it('refuses a stale token before the callback, rolling back and naming the mark that beat it', async () => {
    const db = newDb({ r: 10n });
    let ran = false;
    const error = await rejection(
      runGate(memoryDriver(), db, call(9n), async () => {
        ran = true;
      }),
    );
    expect(error).toBeInstanceOf(StaleFencingTokenError);
    expect(error).toMatchObject({ resource: 'r', token: 9n, highWaterMark: 10n, retryable: false });
    expect(ran).toBe(false);
    expect(db.log).toEqual(['begin - -', 'guard', 'lockedMark', 'rollback']);
    expect(db.marks.get('r')).toBe(10n);
  });

  it('admits a write whose guard could not tell an insert from a refusal, once the mark equals its token', async () => {
    const db = newDb();
    const driver = memoryDriver({ verdicts: 'affected-rows' });
    expect(await runGate(driver, db, call(4n), async () => 'inserted')).toBe('inserted');
    expect(db.log).toEqual(['begin - -', 'guard', 'lockedMark', 'commit']);
    expect(await rejection(runGate(driver, db, call(3n), async () => 'stale'))).toMatchObject({
      code: 'STALE_FENCING_TOKEN',
      highWaterMark: 4n,
    });
    expect(db.marks.get('r')).toBe(4n);
  });

  it('never calls a vanished row stale', async () => {
    const db = newDb({ r: 10n });
    const error = await rejection(runGate(memoryDriver({ vanish: true }), db, call(9n), async () => 0));
    expect(error).not.toBeInstanceOf(StaleFencingTokenError);
    expect(error).toBeInstanceOf(FenceBrokenError);
    expect(error).toMatchObject({
      code: 'FENCE_BROKEN',
      reason: 'row-vanished',
      resource: 'r',
      retryable: false,
    });
    expect(String(error)).toMatch(/vanished while locked/);
    expect(db.log.at(-1)).toBe('rollback');
  });

  it('rolls the mark back with a failed callback and passes its error through unchanged', async () => {
    const db = newDb({ r: 1n });
    const boom = new Error('app');
    const error = await rejection(
      runGate(memoryDriver(), db, call(2n), async () => {
        throw boom;
      }),
    );
    expect(error).toBe(boom);
    expect(db.marks.get('r')).toBe(1n);
  });

  it.each<[string, Step | 'fn', string, 'FenceConflictError' | 'FenceBusyError' | 'unchanged']>([
    ['a conflict at BEGIN', 'begin', 'CONFLICT', 'FenceConflictError'],
    ['a conflict in the guard', 'guard', 'CONFLICT', 'FenceConflictError'],
    ['a conflict in the locked read', 'lockedMark', 'CONFLICT', 'FenceConflictError'],
    ['a conflict in the callback', 'fn', 'CONFLICT', 'FenceConflictError'],
    ['a conflict at COMMIT', 'commit', 'CONFLICT', 'FenceConflictError'],
    ['a lock timeout while the transaction opens', 'begin', 'BUSY', 'FenceBusyError'],
    ['a lock timeout in the guard', 'guard', 'BUSY', 'FenceBusyError'],
    ['a lock timeout in the locked read', 'lockedMark', 'BUSY', 'FenceBusyError'],
    ['a lock timeout in the callback', 'fn', 'BUSY', 'unchanged'],
    ['a lock timeout at COMMIT', 'commit', 'BUSY', 'unchanged'],
    ['an unclassified error in the guard', 'guard', 'OTHER', 'unchanged'],
    ['an unclassified error at COMMIT', 'commit', 'OTHER', 'unchanged'],
  ])('maps %s', async (_label, where, code, expected) => {
    const cause = driverError(code);
    const db = newDb({ r: 5n });
    // The locked read only happens on a refusal, so that case uses a stale token.
    const token = where === 'lockedMark' ? 4n : 6n;
    const driver = memoryDriver(where === 'fn' ? {} : { fail: { [where]: cause } });
    const error = await rejection(
      runGate(driver, db, call(token), async () => {
        if (where === 'fn') throw cause;
      }),
    );
    if (expected === 'unchanged') {
      expect(error).toBe(cause);
    } else {
      expect(error).toBeInstanceOf(expected === 'FenceConflictError' ? FenceConflictError : FenceBusyError);
      expect(error).toMatchObject({ resource: 'r', retryable: true, cause });
    }
    expect(db.marks.get('r')).toBe(5n);
  });
});

describe('checkGate', () => {
  it('fences a transaction it did not open, leaving commit and rollback to the caller', async () => {
    const db = newDb({ r: 3n });
    const tx: MemoryTx = { db, staged: new Map() };
    const driver = memoryDriver();
    await checkGate(driver, tx, call(4n));
    expect(tx.staged.get('r')).toBe(4n);
    expect(await rejection(checkGate(driver, tx, call(3n)))).toMatchObject({
      code: 'STALE_FENCING_TOKEN',
      token: 3n,
      highWaterMark: 4n,
    });
    expect(db.log).toEqual(['guard', 'guard', 'lockedMark']);
    expect(db.marks.get('r')).toBe(3n);
  });

  it.each<[Step, string, typeof FenceConflictError | typeof FenceBusyError | undefined]>([
    ['guard', 'CONFLICT', FenceConflictError],
    ['guard', 'BUSY', FenceBusyError],
    ['lockedMark', 'BUSY', FenceBusyError],
    ['guard', 'OTHER', undefined],
  ])('maps an error in %s with code %s', async (where, code, expected) => {
    const cause = driverError(code);
    const tx: MemoryTx = { db: newDb({ r: 5n }), staged: new Map() };
    const error = await rejection(checkGate(memoryDriver({ fail: { [where]: cause } }), tx, call(4n)));
    if (expected === undefined) expect(error).toBe(cause);
    else expect(error).toBeInstanceOf(expected);
    if (expected !== undefined) expect(error).toMatchObject({ cause, resource: 'r' });
  });
});

describe('a driver step answering outside its contract', () => {
  it('a lockedMark that resolves to anything but a bigint or null refuses the write, never admits it', async () => {
    // An undefined mark compared as "not above the token", so a stale write went through and was committed.
    for (const answer of [undefined, 9, '9', { last_token: '9' }]) {
      const db = newDb({ r: 9n });
      const driver = { ...memoryDriver(), lockedMark: async () => answer as never };
      let ran = false;
      const error = await rejection(
        runGate(driver, db, call(4n), async () => {
          ran = true;
        }),
      );
      expect(error, String(answer)).toBeInstanceOf(InvalidArgumentError);
      expect(error).toMatchObject({ field: 'driver.lockedMark' });
      expect(ran).toBe(false);
      expect(db.marks.get('r')).toBe(9n);
      expect(db.log).toContain('rollback');
      const tx: MemoryTx = { db, staged: new Map() };
      expect(await rejection(checkGate(driver, tx, call(4n)))).toBeInstanceOf(InvalidArgumentError);
    }
  });

  it('a classify that throws leaves the error it was asked about as the one reported', async () => {
    const cause = driverError('OTHER');
    const driver = {
      ...memoryDriver({ fail: { guard: cause } }),
      classify: (): RetryableKind => {
        throw new TypeError('classify broke');
      },
    };
    expect(await rejection(runGate(driver, newDb(), call(4n), async () => 1))).toBe(cause);
    const tx: MemoryTx = { db: newDb(), staged: new Map() };
    expect(await rejection(checkGate(driver, tx, call(4n)))).toBe(cause);
  });
});
