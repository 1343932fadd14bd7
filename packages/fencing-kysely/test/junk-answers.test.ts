import type { Kysely, KyselyPlugin, QueryResult } from 'kysely';
import { describe, expect, it } from 'vitest';
import { checkFence, highWaterMark, InvalidArgumentError, runFenced } from '../src/index.js';
import {
  ALL_KINDS,
  type protectedTable,
  rejection,
  type TestDb,
  uniqueName,
  withFencedTables,
} from './databases.js';

/**
 * A real Kysely instance whose answers a plugin replaces: it passes every shape check, and each statement still
 * runs on the database (the guard writes its mark), but what `executeQuery` resolves to is `junk`. Kysely's own
 * BEGIN, COMMIT and ROLLBACK go through its driver, not through plugins, so the transaction still ends for real.
 */
function answering(db: Kysely<unknown>, junk: unknown): Kysely<unknown> {
  const plugin: KyselyPlugin = {
    transformQuery: (args) => args.node,
    transformResult: async () => junk as QueryResult<never>,
  };
  return db.withPlugin(plugin);
}

/** Like {@link answering}, but only the `nth` statement (from 1) sent through the instance gets `junk`. */
function answeringNth(db: Kysely<unknown>, nth: number, junk: unknown): Kysely<unknown> {
  let sent = 0;
  const plugin: KyselyPlugin = {
    transformQuery: (args) => args.node,
    transformResult: async (args) => (++sent === nth ? (junk as QueryResult<never>) : args.result),
  };
  return db.withPlugin(plugin);
}

/** What `executeQuery` may not answer: no result, no rows array, rows that are not rows, a row of another table. */
const JUNK: readonly [string, unknown][] = [
  ['undefined', undefined],
  ['null', null],
  ['a string', 'x'],
  ['{}', {}],
  ["{ rows: 'x' }", { rows: 'x' }],
  ['{ rows: [1] }', { rows: [1] }],
  ['a row without the expected column', { rows: [{ other: '7' }] }],
  // The columns the gate reads are text (the mark, PostgreSQL's transaction id), or any value (SQLite's accepted).
  ['columns that are numbers or null', { rows: [{ txid: 7, accepted: null, last_token: 7 }] }],
  ['columns that are bigints or undefined', { rows: [{ txid: 7n, accepted: undefined, last_token: 7n }] }],
  [
    'rows behind a Proxy that throws',
    {
      rows: new Proxy([], {
        get() {
          throw new Error('trap');
        },
      }),
    },
  ],
  [
    'a row behind a Proxy that throws',
    {
      rows: [
        new Proxy(
          {},
          {
            get() {
              throw new Error('trap');
            },
            has() {
              throw new Error('trap');
            },
          },
        ),
      ],
    },
  ],
];

describe.each(ALL_KINDS)('an executeQuery that answers junk, on %s', (kind) => {
  const table = uniqueName('fence_junk');
  const data = uniqueName('data_junk');
  const options = { table };
  let t: TestDb;
  let writes: ReturnType<typeof protectedTable>;
  withFencedTables(kind, options, data, (opened) => {
    ({ t, writes } = opened);
  });
  let counter = 0;
  const fresh = () => `junk/${counter++}`;

  it.each(JUNK)(
    '%s: runFenced rejects with InvalidArgumentError (db) and rolls the guard back',
    async (_, junk) => {
      const r = fresh();
      let ran = false;
      const error = await rejection(
        runFenced(
          answering(t.db, junk),
          r,
          5n,
          async (trx) => {
            ran = true;
            await writes.insert(trx, r, 5n);
          },
          options,
        ),
      );
      expect(error).toBeInstanceOf(InvalidArgumentError);
      expect(error).toMatchObject({ code: 'INVALID_ARGUMENT', field: 'db' });
      expect((error as Error).message).toMatch(/executeQuery\(\)/);
      expect(ran).toBe(false);
      // The guard's upsert ran on the database; the rollback took its mark away.
      expect(await highWaterMark(t.db, r, options)).toBeNull();
      expect(await writes.tokens(t.db, r)).toEqual([]);
    },
  );

  it.each(JUNK)('%s: checkFence and highWaterMark reject with InvalidArgumentError', async (_, junk) => {
    const r = fresh();
    await runFenced(t.db, r, 3n, async () => undefined, options);
    const junkDb = answering(t.db, junk);
    const inside = await rejection(
      junkDb.transaction().execute(async (trx) => {
        await checkFence(trx, r, 9n, options);
      }),
    );
    expect(inside).toMatchObject({ code: 'INVALID_ARGUMENT', field: 'trx' });
    expect(await highWaterMark(t.db, r, options)).toBe(3n);
    expect(await rejection(highWaterMark(junkDb, r, options))).toMatchObject({
      code: 'INVALID_ARGUMENT',
      field: 'db',
    });
  });

  if (kind === 'postgres' || kind === 'pglite') {
    it.each([
      ['a number', { rows: [{ txid: 7 }] }],
      ['no row', { rows: [] }],
    ])(
      'a transaction id read after the callback as %s is InvalidArgumentError, not a transaction it ended',
      async (_, junk) => {
        const r = fresh();
        let ran = false;
        // The guard (1st statement) answers for real; the callback sends none, so the 2nd is the id read before COMMIT.
        const error = await rejection(
          runFenced(
            answeringNth(t.db, 2, junk),
            r,
            5n,
            async () => {
              ran = true;
            },
            options,
          ),
        );
        expect(ran).toBe(true);
        expect(error).toBeInstanceOf(InvalidArgumentError);
        expect(error).toMatchObject({ code: 'INVALID_ARGUMENT', field: 'db' });
        expect(await highWaterMark(t.db, r, options)).toBeNull();
      },
    );
  }

  /**
   * The real instance behind a handle that passes the shape check but whose `transaction()` answers `junk`: every
   * other member is the real one, so the dialect is detected and a statement would reach the database.
   */
  const withTransaction = (transaction: () => unknown): Kysely<unknown> =>
    ({
      executeQuery: t.db.executeQuery.bind(t.db),
      getExecutor: t.db.getExecutor.bind(t.db),
      isTransaction: false,
      transaction,
    }) as unknown as Kysely<unknown>;
  const TRANSACTIONS: readonly [string, () => unknown][] = [
    ['undefined', () => undefined],
    ['a builder without execute', () => ({})],
    ['an execute that answers a value, not a promise', () => ({ execute: () => 'done' })],
    ['an execute that resolves without running the gate', () => ({ execute: async () => 'done' })],
    [
      'an execute that hands the gate no transaction',
      () => ({ execute: (body: (trx: unknown) => unknown) => body(undefined) }),
    ],
    [
      'an execute that resolves though the fenced work failed',
      () => ({
        execute: (body: (trx: unknown) => Promise<unknown>) =>
          t.db.transaction().execute((trx) => body(trx).catch(() => 'swallowed')),
      }),
    ],
  ];

  it.each(TRANSACTIONS)(
    'a transaction() that answers %s: runFenced rejects with InvalidArgumentError (db)',
    async (label, transaction) => {
      const r = fresh();
      // A stale token: the gate refuses it, so only a swallowed refusal could look like success.
      await runFenced(t.db, r, 9n, async () => undefined, options);
      let ran = false;
      const error = await rejection(
        runFenced(
          withTransaction(transaction),
          r,
          5n,
          async (trx) => {
            ran = true;
            await writes.insert(trx, r, 5n);
          },
          options,
        ),
      );
      expect(error, label).toBeInstanceOf(InvalidArgumentError);
      expect(error, label).toMatchObject({ code: 'INVALID_ARGUMENT', field: 'db' });
      expect(ran, label).toBe(false);
      expect(await highWaterMark(t.db, r, options)).toBe(9n);
      expect(await writes.tokens(t.db, r)).toEqual([]);
    },
  );

  if (kind !== 'sqlite') {
    it('a transaction() whose builder has no setIsolationLevel, with isolationLevel set: InvalidArgumentError (db)', async () => {
      const r = fresh();
      let ran = false;
      const error = await rejection(
        runFenced(
          withTransaction(() => ({ execute: async () => 'done' })),
          r,
          5n,
          async () => {
            ran = true;
          },
          { ...options, isolationLevel: 'serializable' },
        ),
      );
      expect(error).toBeInstanceOf(InvalidArgumentError);
      expect(error).toMatchObject({ code: 'INVALID_ARGUMENT', field: 'db' });
      expect((error as Error).message).toMatch(/setIsolationLevel/);
      expect(ran).toBe(false);
      expect(await highWaterMark(t.db, r, options)).toBeNull();
    });
  }
});
