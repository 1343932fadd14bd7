import { rejection } from '@dlock/test-utils';
import fc from 'fast-check';
import type pg from 'pg';
import { describe, expect, it, vi } from 'vitest';
import {
  FenceBrokenError,
  FencingGate,
  fencingSql,
  InvalidArgumentError,
  type PgClientLike,
} from '../src/index.js';
import {
  checkedOut,
  committedTokens,
  countingPool,
  newClient,
  protectedWrite,
  uniqueName,
  withGate,
} from './helpers.js';

const fenceTable = uniqueName('fence_hon');
const dataTable = uniqueName('data_hon');
let pool: pg.Pool;
let gate: FencingGate;
let counter = 0;
const fresh = () => `honesty/${counter++}`;

withGate({ fenceTable, dataTable, poolSize: 5 }, (opened, openedGate) => {
  pool = opened;
  gate = openedGate;
});

const write = protectedWrite(dataTable);

/** `client`, appending the text of each query sent through it to `texts`. */
function recording(client: pg.Client, texts: string[]): PgClientLike {
  return {
    query: (text: string, values?: unknown[]) => {
      texts.push(text);
      return client.query(text, values);
    },
    getTransactionStatus: () => client.getTransactionStatus(),
  };
}

describe('a callback that ends the fenced transaction and opens another', () => {
  // Each variant leaves the client inside a transaction again when the callback returns, so the idle check cannot
  // see it: its last write ran in a transaction that never passed the gate.
  const variants: [string, (tx: PgClientLike) => Promise<unknown>][] = [
    ['COMMIT; BEGIN in one query', (tx) => tx.query('COMMIT; BEGIN')],
    [
      'COMMIT, then BEGIN',
      async (tx) => {
        await tx.query('COMMIT');
        await tx.query('BEGIN');
      },
    ],
    ['ROLLBACK; BEGIN in one query', (tx) => tx.query('ROLLBACK; BEGIN')],
  ];

  it.each(variants)('%s: rolls back what is still open and rejects with FenceBrokenError', async (_, end) => {
    const r = fresh();
    const error = await rejection(
      gate.runFenced(pool, r, 5n, async (tx) => {
        await end(tx);
        await write(r, 5n)(tx);
        return 'looks fine';
      }),
    );
    expect(error).toBeInstanceOf(FenceBrokenError);
    expect(error).toMatchObject({
      code: 'FENCE_BROKEN',
      reason: 'transaction-ended',
      resource: r,
      retryable: false,
    });
    // The write after the second BEGIN was not fenced and is rolled back, not committed as if it were.
    expect(await committedTokens(pool, dataTable, r)).toEqual([]);
    expect(checkedOut(pool)).toBe(0);
  });

  it('is caught on a client too, and leaves the client idle and usable', async () => {
    const client = await newClient();
    try {
      const r = fresh();
      const error = await rejection(
        gate.runFenced(client, r, 5n, async (tx) => {
          await tx.query('COMMIT; BEGIN');
          await write(r, 5n)(tx);
        }),
      );
      expect(error).toMatchObject({ code: 'FENCE_BROKEN', reason: 'transaction-ended' });
      expect(client.getTransactionStatus()).toBe('I');
      expect(await gate.runFenced(client, r, 6n, async () => 'ok')).toBe('ok');
    } finally {
      await client.end();
    }
  });

  it('costs no extra round trip on the happy path', async () => {
    const texts: string[] = [];
    const client = await newClient();
    const spy = recording(client, texts);
    try {
      await gate.runFenced(spy, fresh(), 1n, async () => 'ok');
      expect(texts).toHaveLength(3); // BEGIN, guard, the check merged with COMMIT
    } finally {
      await client.end();
    }
  });
});

describe('callback misuse is reported with a typed error', () => {
  it('a callback that ended the transaction and left the client idle: FenceBrokenError', async () => {
    const r = fresh();
    const error = await rejection(
      gate.runFenced(pool, r, 3n, async (tx) => {
        await tx.query('ROLLBACK');
        await write(r, 3n)(tx);
      }),
    );
    expect(error).toBeInstanceOf(FenceBrokenError);
    expect(error).toMatchObject({ code: 'FENCE_BROKEN', reason: 'transaction-ended' });
    expect(String(error)).toMatch(/ended the transaction/);
  });

  it('a callback that swallowed a failed statement: FenceBrokenError, nothing committed', async () => {
    const r = fresh();
    const error = await rejection(
      gate.runFenced(pool, r, 4n, async (tx) => {
        await write(r, 4n)(tx);
        await tx.query('SELECT 1/0').catch(() => undefined);
      }),
    );
    expect(error).toBeInstanceOf(FenceBrokenError);
    expect(error).toMatchObject({ code: 'FENCE_BROKEN', reason: 'rolled-back' });
    expect(String(error)).toMatch(/rolled back/);
    expect(await gate.highWaterMark(pool, r)).toBeNull();
    expect(await committedTokens(pool, dataTable, r)).toEqual([]);
  });
});

describe('junk arguments to every public entry', () => {
  const junk = fc.oneof(
    fc.anything(),
    fc.constantFrom<unknown>(null, undefined, Symbol('x'), () => 1, [], new Map(), 10n, Number.NaN, ''),
  );

  function expectTyped(error: unknown) {
    expect(error).toBeInstanceOf(InvalidArgumentError);
    expect(error).not.toBeInstanceOf(TypeError);
  }

  it('runFenced(null) and friends: InvalidArgumentError, not TypeError', async () => {
    const fn = async () => 'x';
    expectTyped(await rejection(gate.runFenced(null as never, 'r', 1n, fn)));
    expectTyped(await rejection(gate.runFenced(42 as never, 'r', 1n, fn)));
    expectTyped(await rejection(gate.runFenced({} as never, 'r', 1n, fn)));
    expectTyped(await rejection(gate.checkFence(null as never, 'r', 1n)));
    expectTyped(await rejection(gate.highWaterMark(undefined as never, 'r')));
    expectTyped(await rejection(gate.ensureSchema('postgres://' as never)));
  });

  it('a 1 MB resource name is refused without reading it all', async () => {
    const { db, counts } = countingPool(pool);
    const name = 'x'.repeat(1_000_000);
    const reads = vi.spyOn(String.prototype, 'charCodeAt');
    try {
      expectTyped(await rejection(gate.runFenced(db, name, 1n, async () => 'x')));
      expectTyped(await rejection(gate.highWaterMark(db, `${name}é`)));
      expect(reads.mock.calls.length).toBeLessThan(4096);
    } finally {
      reads.mockRestore();
    }
    expect(counts).toEqual({ queries: 0, connects: 0 });
  });

  it('property: one junk argument anywhere is always InvalidArgumentError, and nothing reaches the server', async () => {
    const { db, counts } = countingPool(pool);
    const valid = { db, resource: 'junk/r', token: 1n, fn: async () => 'x', options: {} } as const;
    await fc.assert(
      fc.asyncProperty(
        fc.constantFrom('db', 'resource', 'token', 'fn', 'options'),
        junk,
        fc.constantFrom('runFenced', 'run', 'checkFence', 'check', 'highWaterMark', 'ensureSchema'),
        async (position, value, verb) => {
          const a: Record<'db' | 'resource' | 'token' | 'fn' | 'options', unknown> = {
            ...valid,
            [position]: value,
          };
          // Junk that happens to be valid for the position is not junk; skip those draws.
          if (position === 'options' && value === undefined) return;
          if (position === 'fn' && typeof value === 'function') return;
          if (
            position === 'token' &&
            (typeof value === 'bigint' || typeof value === 'number' || typeof value === 'string')
          ) {
            if (/^[0-9]{1,19}$/.test(String(value)) && BigInt(String(value)) >= 1n) return;
          }
          if (
            position === 'resource' &&
            typeof value === 'string' &&
            value.length > 0 &&
            value.length < 100
          ) {
            if (!value.includes('\u0000') && !/[\uD800-\uDFFF]/.test(value)) return;
          }
          if (
            position === 'options' &&
            typeof value === 'object' &&
            value !== null &&
            !Array.isArray(value)
          ) {
            if (Object.keys(value).length === 0) return;
          }
          const g = gate as unknown as Record<string, (...args: unknown[]) => Promise<unknown>>;
          let call: () => Promise<unknown>;
          if (verb === 'runFenced' || verb === 'run') {
            call = () => g[verb]!(a.db, a.resource, a.token, a.fn, a.options);
          } else if (verb === 'checkFence' || verb === 'check') {
            if (position === 'fn' || position === 'options') return;
            // A pool is refused here anyway; junk in the client position is what is under test.
            call = () => g[verb]!(position === 'db' ? a.db : { query: db.query }, a.resource, a.token);
          } else if (verb === 'highWaterMark') {
            if (position !== 'db' && position !== 'resource') return;
            call = () => g[verb]!(a.db, a.resource);
          } else {
            if (position !== 'db') return;
            call = () => g[verb]!(a.db);
          }
          let error: unknown;
          try {
            await call();
          } catch (e) {
            error = e;
          }
          expectTyped(error);
          expect(counts).toEqual({ queries: 0, connects: 0 });
        },
      ),
      { numRuns: 400 },
    );
  });

  it('property: junk to the constructor and fencingSql is InvalidArgumentError', () => {
    fc.assert(
      fc.property(junk, (value) => {
        if (value === undefined) return;
        if (
          typeof value === 'object' &&
          value !== null &&
          !Array.isArray(value) &&
          Object.keys(value).length === 0
        ) {
          return;
        }
        for (const make of [() => new FencingGate(value as never), () => fencingSql(value as never)]) {
          let error: unknown;
          try {
            make();
          } catch (e) {
            error = e;
          }
          expectTyped(error);
        }
      }),
      { numRuns: 300 },
    );
  });

  it('junk to a table option is InvalidArgumentError', () => {
    for (const value of [null, 5, {}, [], Symbol('t'), 'a b', 'x'.repeat(10_000)]) {
      expect(() => new FencingGate({ table: value as never })).toThrow(InvalidArgumentError);
      expect(() => new FencingGate({ schema: value as never })).toThrow(InvalidArgumentError);
    }
  });
});

describe('one client, two runFenced calls at once', () => {
  it('refuses the second before it sends anything: the first one COMMIT or ROLLBACK would end both', async () => {
    const client = await newClient();
    const texts: string[] = [];
    const spy = recording(client, texts);
    try {
      const r = fresh();
      const first = gate.runFenced(spy, r, 1n, write(r, 1n));
      const second = await rejection(gate.runFenced(spy, r, 2n, write(r, 2n)));
      expect(second).toBeInstanceOf(InvalidArgumentError);
      expect(second).toMatchObject({ code: 'INVALID_ARGUMENT', field: 'db' });
      await first;
      expect(texts.filter((t) => t.startsWith('BEGIN'))).toHaveLength(1);
      expect(await committedTokens(pool, dataTable, r)).toEqual([1n]);
      // Once the first has settled, the client takes the next call.
      await gate.runFenced(spy, r, 2n, write(r, 2n));
      expect(await committedTokens(pool, dataTable, r)).toEqual([1n, 2n]);
    } finally {
      await client.end();
    }
  });
});

describe('a pool the gate cannot recognise', () => {
  it('is refused when the wrapper kept only query (no connect, nothing a client has)', async () => {
    // `{ query }` over a pool: each statement may take another pooled connection, so runFenced's BEGIN can leave a
    // connection idle in a transaction for the next user and checkFence's guard commits on its own, fencing
    // nothing, while both calls report success. Nothing in its shape says it is one connection.
    let queries = 0;
    const wrapper = {
      query: (text: string, values?: unknown[]) => {
        queries++;
        return pool.query(text, values);
      },
    };
    const r = fresh();
    for (const call of [
      () => gate.runFenced(wrapper, r, 5n, async () => 'looks fine'),
      () => gate.checkFence(wrapper, r, 5n),
    ]) {
      const error = await rejection(call());
      expect(error).toBeInstanceOf(InvalidArgumentError);
      expect(error).toMatchObject({
        code: 'INVALID_ARGUMENT',
        message: expect.stringMatching(/one connection/),
      });
    }
    expect(queries).toBe(0);
    expect(await gate.highWaterMark(pool, r)).toBeNull();
    // A plain-object wrapper of one client passes once it says what a client says (its transaction status).
    const client = await newClient();
    try {
      const wrapped: PgClientLike = {
        query: (text: string, values?: unknown[]) => client.query(text, values),
        getTransactionStatus: () => client.getTransactionStatus(),
      };
      expect(await gate.runFenced(wrapped, r, 5n, async () => 'ok')).toBe('ok');
    } finally {
      await client.end();
    }
    expect(await gate.highWaterMark(pool, r)).toBe(5n);
  });

  it('is refused by runFenced and checkFence instead of being used as one connection', async () => {
    // A wrapper that kept query and connect but not idleCount: each of its queries may take another connection,
    // so a guard sent through it commits in autocommit and fences nothing.
    let queries = 0;
    const wrapper = {
      query: (text: string, values?: unknown[]) => {
        queries++;
        return pool.query(text, values);
      },
      connect: () => pool.connect(),
    };
    const r = fresh();
    for (const call of [
      () => gate.runFenced(wrapper, r, 5n, async () => 'looks fine'),
      () => gate.checkFence(wrapper, r, 5n),
    ]) {
      const error = await rejection(call());
      expect(error).toBeInstanceOf(InvalidArgumentError);
      expect(error).toMatchObject({ code: 'INVALID_ARGUMENT' });
    }
    expect(queries).toBe(0);
    expect(await gate.highWaterMark(pool, r)).toBeNull();
    // Real clients, pooled or not, still pass.
    const client = await newClient();
    try {
      expect(await gate.runFenced(client, r, 5n, async () => 'ok')).toBe('ok');
    } finally {
      await client.end();
    }
    const pooled = await pool.connect();
    try {
      await pooled.query('BEGIN');
      await gate.checkFence(pooled, r, 6n);
      await pooled.query('COMMIT');
    } finally {
      pooled.release();
    }
    expect(await gate.highWaterMark(pool, r)).toBe(6n);
  });
});
