import type pg from 'pg';
import { describe, expect, it } from 'vitest';
import { FencingGate, fencingSql, InvalidArgumentError, type PgPoolClientLike } from '../src/index.js';
import { checkedOut, countingPool, uniqueName, withGate } from './helpers.js';

const fenceTable = uniqueName('fence_hyg');
let pool: pg.Pool;
let gate: FencingGate;

withGate({ fenceTable, poolSize: 3 }, (opened, openedGate) => {
  pool = opened;
  gate = openedGate;
});

describe('bad input is refused before any SQL', () => {
  const badTokens: unknown[] = [
    0,
    -1,
    1.5,
    Number.NaN,
    2 ** 53,
    0n,
    -5n,
    2n ** 63n,
    '',
    '-1',
    '1e3',
    ' 1',
    '0x1',
    null,
    undefined,
    {},
    true,
  ];
  const badResources: unknown[] = ['', 'x'.repeat(1025), '\ud800', 'a\u0000b', 7, null, undefined];

  it.each(badTokens.map((t) => [String(t), t]))('token %s', async (_label, token) => {
    const { db, counts } = countingPool(pool);
    const calls = [
      gate.run(db, 'r', token as bigint, async () => undefined),
      gate.check(db as unknown as PgPoolClientLike, 'r', token as bigint),
    ];
    for (const call of calls)
      await expect(call).rejects.toMatchObject({ code: 'INVALID_ARGUMENT', field: 'token' });
    expect(counts).toEqual({ queries: 0, connects: 0 });
  });

  it.each(badResources.map((r) => [JSON.stringify(r)?.slice(0, 20) ?? 'undefined', r]))(
    'resource %s',
    async (_label, resource) => {
      const { db, counts } = countingPool(pool);
      const calls = [
        gate.run(db, resource as string, 1n, async () => undefined),
        gate.check(db as unknown as PgPoolClientLike, resource as string, 1n),
        gate.highWaterMark(db, resource as string),
      ];
      for (const call of calls)
        await expect(call).rejects.toMatchObject({ code: 'INVALID_ARGUMENT', field: 'resource' });
      expect(counts).toEqual({ queries: 0, connects: 0 });
    },
  );

  it('run options and callback', async () => {
    const { db, counts } = countingPool(pool);
    const bad: [unknown, string][] = [
      [{ isolationLevel: 'read uncommitted' }, 'options.isolationLevel'],
      [{ isolationLevel: 'toString' }, 'options.isolationLevel'],
      [{ lockTimeoutMs: 0 }, 'options.lockTimeoutMs'],
      [{ lockTimeoutMs: 1.5 }, 'options.lockTimeoutMs'],
      [{ lockTimeoutMs: '100; DROP TABLE x' }, 'options.lockTimeoutMs'],
    ];
    for (const [options, field] of bad) {
      await expect(gate.run(db, 'r', 1n, async () => undefined, options as object)).rejects.toMatchObject({
        field,
      });
    }
    await expect(gate.run(db, 'r', 1n, 'not a function' as never)).rejects.toBeInstanceOf(
      InvalidArgumentError,
    );
    expect(counts).toEqual({ queries: 0, connects: 0 });
  });
});

describe('misspelt option keys are refused, naming the key meant, before any SQL', () => {
  function expectRefusal(error: unknown, field: string, meant: string | undefined): void {
    expect(error).toBeInstanceOf(InvalidArgumentError);
    expect(error).toMatchObject({ code: 'INVALID_ARGUMENT', field });
    const message = (error as Error).message;
    if (meant === undefined) expect(message).not.toContain('did you mean');
    else expect(message).toContain(`(did you mean "${meant}"?)`);
  }

  function thrown(call: () => unknown): unknown {
    try {
      call();
    } catch (error) {
      return error;
    }
    throw new Error('expected a throw');
  }

  const tableCases: [object, string, string | undefined][] = [
    [{ tabel: fenceTable }, 'options.tabel', 'table'],
    [{ Table: fenceTable }, 'options.Table', 'table'],
    [{ table: fenceTable, schemaName: 'public' }, 'options.schemaName', 'schema'],
    [{ table: fenceTable, isolationLevel: 'serializable' }, 'options.isolationLevel', undefined],
  ];

  it.each(tableCases)('new FencingGate(%o) and fencingSql', (options, field, meant) => {
    expectRefusal(
      thrown(() => new FencingGate(options as never)),
      field,
      meant,
    );
    expectRefusal(
      thrown(() => fencingSql(options as never)),
      field,
      meant,
    );
  });

  it('new FencingGate(null) is refused as not an object', () => {
    expectRefusal(
      thrown(() => new FencingGate(null as never)),
      'options',
      undefined,
    );
  });

  const runCases: [unknown, string, string | undefined][] = [
    [{ lockTimeoutMS: 50 }, 'options.lockTimeoutMS', 'lockTimeoutMs'],
    [{ lockTimeout: 50 }, 'options.lockTimeout', 'lockTimeoutMs'],
    [{ timeoutMs: 50 }, 'options.timeoutMs', 'lockTimeoutMs'],
    [
      { isolationLevel: 'serializable', isolation_level: 'serializable' },
      'options.isolation_level',
      'isolationLevel',
    ],
    [
      { isolationLevel: 'serializable', isolationLvl: 'serializable' },
      'options.isolationLvl',
      'isolationLevel',
    ],
    [{ table: fenceTable }, 'options.table', undefined],
    [null, 'options', undefined],
    ['serializable', 'options', undefined],
  ];

  it.each(runCases)('gate.run with options %o', async (options, field, meant) => {
    const { db, counts } = countingPool(pool);
    let ran = false;
    const error = await gate
      .run(
        db,
        `hygiene/${uniqueName('keys')}`,
        1n,
        async () => {
          ran = true;
        },
        options as never,
      )
      .then(
        () => undefined,
        (e: unknown) => e,
      );
    expectRefusal(error, field, meant);
    expect(ran).toBe(false);
    expect(counts).toEqual({ queries: 0, connects: 0 });
  });

  it('the correctly spelt options still run', async () => {
    const r = `hygiene/${uniqueName('keys-ok')}`;
    const spelt = new FencingGate({ table: fenceTable, schema: 'public' });
    await spelt.run(pool, r, 3n, async () => undefined, {
      isolationLevel: 'serializable',
      lockTimeoutMs: 1000,
    });
    expect(await gate.highWaterMark(pool, r)).toBe(3n);
  });
});

describe('pooled clients are always released', () => {
  async function idleBaseline(): Promise<number> {
    await pool.query('SELECT 1');
    expect(checkedOut(pool)).toBe(0);
    return pool.idleCount;
  }

  it('after success, stale token, thrown error, failed statement, swallowed failure and bad input', async () => {
    const r = `hygiene/${uniqueName('r')}`;
    const baseline = await idleBaseline();
    const outcomes: Array<() => Promise<unknown>> = [
      () => gate.run(pool, r, 10n, async () => 'ok'),
      () => gate.run(pool, r, 9n, async () => 'stale'),
      () =>
        gate.run(pool, r, 10n, async () => {
          throw new Error('app error');
        }),
      () => gate.run(pool, r, 10n, (tx) => tx.query('SELECT * FROM no_such_table_anywhere')),
      () => gate.run(pool, r, 10n, (tx) => tx.query('SELECT 1/0').catch(() => undefined)),
      () => gate.run(pool, r, -1n, async () => undefined),
    ];
    const settled = [];
    for (const outcome of outcomes) {
      settled.push(
        await outcome().then(
          () => 'fulfilled',
          (e: { code?: string }) => e.code ?? 'error',
        ),
      );
      expect(checkedOut(pool)).toBe(0);
      expect(pool.idleCount).toBe(baseline);
    }
    expect(settled).toEqual([
      'fulfilled',
      'STALE_FENCING_TOKEN',
      'error',
      '42P01',
      'FENCE_BROKEN',
      'INVALID_ARGUMENT',
    ]);
    expect(await gate.highWaterMark(pool, r)).toBe(10n);
  });

  it('destroys, rather than reuses, a client whose connection died mid-transaction', async () => {
    const r = `hygiene/${uniqueName('dead')}`;
    const baseline = await idleBaseline();
    const total = pool.totalCount;
    const error = await gate
      .run(pool, r, 1n, (tx) => tx.query('SELECT pg_terminate_backend(pg_backend_pid())'))
      .then(
        () => undefined,
        (e: unknown) => e,
      );
    expect(error).toBeInstanceOf(Error);
    expect(checkedOut(pool)).toBe(0);
    expect(pool.totalCount).toBe(total - 1);
    expect(pool.idleCount).toBe(baseline - 1);
    // The pool still works and the killed transaction left no mark behind.
    expect(await gate.highWaterMark(pool, r)).toBeNull();
  });
});
