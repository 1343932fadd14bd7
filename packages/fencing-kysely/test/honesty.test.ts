import fc from 'fast-check';
import type { Kysely } from 'kysely';
import { describe, expect, it } from 'vitest';
import {
  checkFence,
  ensureFencingTable,
  FenceBrokenError,
  fenced,
  fencingMigration,
  fencingSql,
  highWaterMark,
  InvalidArgumentError,
  runFenced,
} from '../src/index.js';
import {
  ALL_KINDS,
  type protectedTable,
  rejection,
  run,
  type TestDb,
  uniqueName,
  withFencedTables,
} from './databases.js';

describe.each(ALL_KINDS)('a callback that ends the fenced transaction, on %s', (kind) => {
  const table = uniqueName('fence_hon');
  const data = uniqueName('data_hon');
  const scratch = uniqueName('ddl_hon');
  let t: TestDb;
  let writes: ReturnType<typeof protectedTable>;
  let db: Kysely<unknown>;
  let counter = 0;
  const fresh = () => `honesty/${counter++}`;
  const options = { table };

  withFencedTables(
    kind,
    options,
    data,
    (opened) => {
      ({ t, writes } = opened);
      db = t.db;
    },
    [scratch],
  );

  // Each variant but the last leaves the connection inside a transaction again when the callback returns. On
  // SQLite too: another connection can write between the callback's COMMIT and its BEGIN.
  const begin = kind === 'mariadb' ? 'START TRANSACTION' : 'BEGIN';
  // [name, what the callback does first, whether its later write ran outside any transaction and so stays]
  const variants: [string, (trx: Kysely<unknown>) => Promise<unknown>, boolean][] = [
    [
      'COMMIT, then BEGIN',
      async (trx) => {
        await run(trx, 'COMMIT');
        await run(trx, begin);
      },
      false,
    ],
    [
      'ROLLBACK, then BEGIN',
      async (trx) => {
        await run(trx, 'ROLLBACK');
        await run(trx, begin);
      },
      false,
    ],
    ['COMMIT alone', (trx) => run(trx, 'COMMIT'), true],
  ];
  // PGlite's protocol takes one statement per query.
  if (kind === 'postgres')
    variants.push(['COMMIT; BEGIN in one query', (trx) => run(trx, 'COMMIT; BEGIN'), false]);
  if (kind === 'mariadb') {
    // DDL commits the transaction implicitly on MySQL/MariaDB, and what follows runs in autocommit.
    variants.push([
      'DDL (an implicit commit)',
      (trx) => run(trx, `CREATE TABLE IF NOT EXISTS ${scratch} (id int)`),
      true,
    ]);
  }

  it.each(variants)(
    '%s: rolls back what is still open and rejects with FenceBrokenError',
    async (_, end, stays) => {
      const r = fresh();
      const error = await rejection(
        runFenced(
          db,
          r,
          5n,
          async (trx) => {
            await end(trx);
            await writes.insert(trx, r, 5n);
            return 'looks fine';
          },
          options,
        ),
      );
      expect(error).toBeInstanceOf(FenceBrokenError);
      expect(error).toMatchObject({
        code: 'FENCE_BROKEN',
        reason: 'transaction-ended',
        resource: r,
        retryable: false,
      });
      // A write in a transaction that never passed the gate is rolled back; one that ran in autocommit stays, and
      // the gate can only refuse to call it fenced.
      expect(await writes.tokens(db, r)).toEqual(stays ? [5n] : []);
      // The connection is usable and the gate works on it afterwards.
      expect(await runFenced(db, r, 6n, async () => 'ok', options)).toBe('ok');
    },
  );

  if (kind === 'postgres' || kind === 'pglite') {
    it('a callback that swallowed a failed statement: FenceBrokenError, nothing committed', async () => {
      const r = fresh();
      const error = await rejection(
        runFenced(
          db,
          r,
          4n,
          async (trx) => {
            await writes.insert(trx, r, 4n);
            await run(trx, 'SELECT 1/0').catch(() => undefined);
          },
          options,
        ),
      );
      expect(error).toBeInstanceOf(FenceBrokenError);
      expect(error).toMatchObject({ code: 'FENCE_BROKEN', reason: 'rolled-back' });
      expect(await highWaterMark(db, r, options)).toBeNull();
      expect(await writes.tokens(db, r)).toEqual([]);
    });
  }

  it('names that a collation or a normalisation would fold together keep one mark each', async () => {
    // Pairs a case-insensitive, accent-insensitive, PAD SPACE or Unicode-normalising comparison would treat as one.
    const pairs: [string, string][] = [
      ['a', 'A'],
      ['a', 'a '],
      ['\u00e9', 'e\u0301'],
      ['\u00e9', 'e'],
      ['stra\u00dfe', 'strasse'],
      ['\uff21', 'A'],
      ['\u212b', '\u00c5'],
      ['i', '\u0131'],
    ];
    for (const [low, high] of pairs) {
      const prefix = fresh();
      await runFenced(db, `${prefix}/${high}`, 100n, async () => 0, options);
      // The other name's first write is judged against no mark, not against 100.
      await runFenced(db, `${prefix}/${low}`, 5n, async () => 0, options);
      expect(await highWaterMark(db, `${prefix}/${low}`, options)).toBe(5n);
      expect(await highWaterMark(db, `${prefix}/${high}`, options)).toBe(100n);
    }
  });

  it('a table option of null is refused, not read as the default table', async () => {
    t.resetQueryCount();
    for (const bad of [{ table: null }, { schema: null }, { dialect: null }]) {
      expect(await rejection(runFenced(db, fresh(), 1n, async () => 0, bad as never))).toBeInstanceOf(
        InvalidArgumentError,
      );
      expect(await rejection(highWaterMark(db, fresh(), bad as never))).toBeInstanceOf(InvalidArgumentError);
    }
    expect(t.queryCount()).toBe(0);
  });

  it('an object shaped only partly like Kysely is refused as db or trx before its executeQuery runs', async () => {
    // With the dialect told, nothing but the shape check stood between such an object and the gate: runFenced
    // failed inside the gate with "db.transaction is not a function", and checkFence or fenced sent the guard
    // through the object's own executeQuery.
    const sent: string[] = [];
    const executeQuery = async (query: { sql: string }) => {
      sent.push(query.sql);
      return { rows: [] };
    };
    const method = () => undefined;
    const shapes: [string, object][] = [
      ['executeQuery and isTransaction false', { executeQuery, isTransaction: false }],
      ['executeQuery and isTransaction true', { executeQuery, isTransaction: true }],
      ['no transaction()', { executeQuery, isTransaction: false, getExecutor: method }],
      [
        'transaction not a function',
        { executeQuery, isTransaction: true, getExecutor: method, transaction: 1 },
      ],
      ['no getExecutor()', { executeQuery, isTransaction: true, transaction: method }],
      [
        'getters that throw',
        new Proxy(
          {},
          {
            get() {
              throw new Error('trap');
            },
          },
        ),
      ],
    ];
    const told = { ...options, dialect: t.dialect };
    for (const [label, shape] of shapes) {
      const junk = shape as never;
      const calls: [string, () => Promise<unknown>][] = [
        ['runFenced', () => runFenced(junk, fresh(), 1n, async () => 0, told)],
        ['fenced', () => fenced(junk, fresh(), 1n, async () => 0, told)],
        ['checkFence', () => checkFence(junk, fresh(), 1n, told)],
        ['highWaterMark', () => highWaterMark(junk, fresh(), told)],
        ['ensureFencingTable', () => ensureFencingTable(junk, told)],
        ['migration up', () => fencingMigration(told).up(junk)],
        ['migration down', () => fencingMigration(told).down(junk)],
      ];
      for (const [verb, call] of calls) {
        const error = await rejection(call());
        expect(error, `${verb}, ${label}`).toBeInstanceOf(InvalidArgumentError);
        expect((error as InvalidArgumentError).field, `${verb}, ${label}`).toBe(
          verb === 'checkFence' ? 'trx' : 'db',
        );
      }
    }
    // Every member present, but detecting the dialect through it fails: refused as well, not that failure.
    const detectFails = {
      executeQuery,
      isTransaction: false,
      transaction: method,
      getExecutor: () => {
        throw new TypeError('not an executor');
      },
    } as never;
    for (const call of [
      () => runFenced(detectFails, fresh(), 1n, async () => 0, options),
      () => highWaterMark(detectFails, fresh(), options),
      () => ensureFencingTable(detectFails, options),
    ]) {
      expect(await rejection(call())).toMatchObject({ code: 'INVALID_ARGUMENT', field: 'db' });
    }
    expect(sent).toEqual([]);
  });

  it('property: one junk argument to any public entry is InvalidArgumentError, and nothing reaches the database', async () => {
    const junk = fc.oneof(
      fc.anything(),
      fc.constantFrom<unknown>(
        null,
        undefined,
        Symbol('x'),
        () => 1,
        [],
        new Map(),
        10n,
        Number.NaN,
        '',
        'x'.repeat(1_000_000),
      ),
    );
    t.resetQueryCount();
    await fc.assert(
      fc.asyncProperty(
        fc.constantFrom('db', 'resource', 'token', 'fn', 'options'),
        junk,
        fc.constantFrom(
          'runFenced',
          'fenced',
          'checkFence',
          'highWaterMark',
          'ensureFencingTable',
          'migration',
          'fencingSql',
        ),
        async (position, value, verb) => {
          if (position === 'options' && value === undefined) return;
          if (position === 'fn' && typeof value === 'function') return;
          if (position === 'token' && ['bigint', 'number', 'string'].includes(typeof value)) {
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
          const a = {
            db,
            resource: 'junk/r',
            token: 1n,
            fn: async () => 'x',
            options,
            [position]: value,
          } as Record<'db' | 'resource' | 'token' | 'fn' | 'options', never>;
          let call: () => unknown;
          if (verb === 'runFenced') call = () => runFenced(a.db, a.resource, a.token, a.fn, a.options);
          else if (verb === 'fenced') call = () => fenced(a.db, a.resource, a.token, a.fn, a.options);
          else if (verb === 'checkFence') {
            if (position === 'fn') return;
            call = () => checkFence(a.db, a.resource, a.token, a.options);
          } else if (verb === 'highWaterMark') {
            if (position === 'fn' || position === 'token') return;
            call = () => highWaterMark(a.db, a.resource, a.options);
          } else if (verb === 'ensureFencingTable') {
            if (position !== 'db' && position !== 'options') return;
            call = () => ensureFencingTable(a.db, a.options);
          } else if (verb === 'migration') {
            if (position !== 'db' && position !== 'options') return;
            call = () => fencingMigration(a.options).up(a.db);
          } else {
            if (position !== 'options' && position !== 'resource') return;
            // The dialect argument takes the junk in the 'resource' position.
            call = () => fencingSql(position === 'resource' ? a.resource : t.dialect, a.options);
          }
          let error: unknown;
          try {
            await call();
          } catch (e) {
            error = e;
          }
          expect(error).toBeInstanceOf(InvalidArgumentError);
          expect(t.queryCount()).toBe(0);
        },
      ),
      { numRuns: 400 },
    );
  });
});
