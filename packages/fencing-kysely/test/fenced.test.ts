import type { Kysely } from 'kysely';
import { Migrator } from 'kysely/migration';
import { describe, expect, it } from 'vitest';
import {
  checkFence,
  ensureFencingTable,
  type FencedOptions,
  fenced,
  fencingMigration,
  fencingSql,
  highWaterMark,
  InvalidArgumentError,
  MAX_FENCING_TOKEN,
  runFenced,
  StaleFencingTokenError,
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
import { verbScript } from './verb-script.js';

describe.each(ALL_KINDS)('fenced() on %s', (kind) => {
  const table = uniqueName('fence');
  const data = uniqueName('data');
  let t: TestDb;
  let writes: ReturnType<typeof protectedTable>;
  let db: Kysely<unknown>;
  let counter = 0;
  const fresh = () => `fenced/${counter++}`;
  const options = { table };

  withFencedTables(kind, options, data, (opened) => {
    ({ t, writes } = opened);
    db = t.db;
  });

  it('accepts the first token, an equal one and a higher one, raising the mark', async () => {
    const r = fresh();
    await fenced(db, r, 5n, (trx) => writes.insert(trx, r, 5n), options);
    await fenced(db, r, '5', (trx) => writes.insert(trx, r, 5n), options);
    expect(await highWaterMark(db, r, options)).toBe(5n);
    await fenced(db, r, 7, (trx) => writes.insert(trx, r, 7n), options);
    expect(await highWaterMark(db, r, options)).toBe(7n);
    expect(await writes.tokens(db, r)).toEqual([5n, 5n, 7n]);
  });

  it('rejects a stale token before the mutation runs; nothing of it is visible', async () => {
    const r = fresh();
    await fenced(db, r, 10n, (trx) => writes.insert(trx, r, 10n), options);
    let ran = false;
    const error = await rejection(
      fenced(
        db,
        r,
        9n,
        async (trx) => {
          ran = true;
          await writes.insert(trx, r, 9n);
        },
        options,
      ),
    );
    expect(error).toBeInstanceOf(StaleFencingTokenError);
    expect(error).toMatchObject({ code: 'STALE_FENCING_TOKEN', resource: r, token: 9n, highWaterMark: 10n });
    expect(ran).toBe(false);
    expect(await highWaterMark(db, r, options)).toBe(10n);
    expect(await writes.tokens(db, r)).toEqual([10n]);
  });

  it('rolls the mark back with a failed mutation, for a new and for an existing resource', async () => {
    const r = fresh();
    const boom = new Error('mutation failed');
    const failing = (token: bigint) => async (trx: Kysely<unknown>) => {
      await writes.insert(trx, r, token);
      throw boom;
    };
    expect(await rejection(fenced(db, r, 3n, failing(3n), options))).toBe(boom);
    expect(await highWaterMark(db, r, options)).toBeNull();
    await fenced(db, r, 3n, (trx) => writes.insert(trx, r, 3n), options);
    expect(await rejection(fenced(db, r, 8n, failing(8n), options))).toBe(boom);
    expect(await highWaterMark(db, r, options)).toBe(3n);
    expect(await writes.tokens(db, r)).toEqual([3n]);
  });

  // PostgreSQL aborts a transaction at the first failed statement; the other databases carry on with it.
  if (kind === 'postgres' || kind === 'pglite') {
    it('refuses to report success when the callback swallowed a failed statement', async () => {
      const r = fresh();
      const error = await rejection(
        fenced(
          db,
          r,
          4n,
          async (trx) => {
            await writes.insert(trx, r, 4n);
            await run(trx, 'SELECT 1/0').catch(() => undefined);
            return 'looks fine';
          },
          options,
        ),
      );
      expect(error).toBeInstanceOf(Error);
      expect(await highWaterMark(db, r, options)).toBeNull();
      expect(await writes.tokens(db, r)).toEqual([]);
    });
  }

  it('returns the callback value and stores the largest int64 token exactly', async () => {
    const r = fresh();
    expect(await fenced(db, r, MAX_FENCING_TOKEN - 1n, async () => 'ok', options)).toBe('ok');
    expect(await fenced(db, r, MAX_FENCING_TOKEN.toString(), async () => 42, options)).toBe(42);
    expect(await highWaterMark(db, r, options)).toBe(MAX_FENCING_TOKEN);
    await expect(fenced(db, r, MAX_FENCING_TOKEN - 1n, async () => 0, options)).rejects.toMatchObject({
      highWaterMark: MAX_FENCING_TOKEN,
    });
  });

  it('fences a Transaction the caller opened; on a stale token the caller rolls back', async () => {
    const r = fresh();
    await db.transaction().execute(async (trx) => {
      const value = await fenced(
        trx,
        r,
        4n,
        async (inner) => {
          expect(inner).toBe(trx);
          await writes.insert(inner, r, 4n);
          return 'in caller transaction';
        },
        options,
      );
      expect(value).toBe('in caller transaction');
    });
    const stale = await rejection(
      db.transaction().execute(async (trx) => {
        await writes.insert(trx, r, 1n); // a write before the gate: must vanish with the rollback
        await fenced(trx, r, 3n, async () => undefined, options);
      }),
    );
    expect(stale).toMatchObject({ code: 'STALE_FENCING_TOKEN', highWaterMark: 4n, token: 3n });
    expect(await writes.tokens(db, r)).toEqual([4n]);
    expect(await highWaterMark(db, r, options)).toBe(4n);
  });

  it('also fences a controlled transaction', async () => {
    const r = fresh();
    const trx = await db.startTransaction().execute();
    await fenced(trx, r, 2n, (inner) => writes.insert(inner, r, 2n), options);
    await trx.commit().execute();
    expect(await highWaterMark(db, r, options)).toBe(2n);
  });

  it('refuses an isolation level for a transaction it did not open', async () => {
    await db.transaction().execute(async (trx) => {
      await expect(
        fenced(trx, fresh(), 1n, async () => undefined, { ...options, isolationLevel: 'serializable' }),
      ).rejects.toMatchObject({ code: 'INVALID_ARGUMENT', field: 'options.isolationLevel' });
    });
  });

  it('refuses every bad input before any query reaches the database', async () => {
    const badTokens: unknown[] = [
      0,
      -1,
      1.5,
      Number.NaN,
      2 ** 53,
      0n,
      2n ** 63n,
      '',
      '-1',
      '1e3',
      ' 1',
      null,
      {},
    ];
    const badResources: unknown[] = ['', 'x'.repeat(1025), '\udc00', 'a\u0000b', 1, null];
    const badOptions: [object, string][] = [
      [{ table: 'x"; DROP TABLE y; --' }, 'options.table'],
      [{ table: '' }, 'options.table'],
      [{ schema: 'a.b' }, 'options.schema'],
      [{ dialect: 'oracle' }, 'options.dialect'],
      [{ isolationLevel: 'read uncommitted' }, 'options.isolationLevel'],
      [{ lockTimeoutMs: -1 }, 'options.lockTimeoutMs'],
    ];
    t.resetQueryCount();
    for (const token of badTokens) {
      await expect(fenced(db, 'r', token as bigint, async () => undefined, options)).rejects.toMatchObject({
        code: 'INVALID_ARGUMENT',
        field: 'token',
      });
    }
    for (const resource of badResources) {
      await expect(fenced(db, resource as string, 1n, async () => undefined, options)).rejects.toMatchObject({
        field: 'resource',
      });
      await expect(highWaterMark(db, resource as string, options)).rejects.toMatchObject({
        field: 'resource',
      });
    }
    for (const [bad, field] of badOptions) {
      await expect(fenced(db, 'r', 1n, async () => undefined, { ...options, ...bad })).rejects.toMatchObject({
        field,
      });
    }
    await expect(fenced(db, 'r', 1n, null as never, options)).rejects.toBeInstanceOf(InvalidArgumentError);
    expect(t.queryCount()).toBe(0);
  });

  it('refuses a misspelt option key in every call before any query, naming the key meant', async () => {
    const r = fresh();
    let ran = false;
    const body = async () => {
      ran = true;
    };
    const fencedCases: [unknown, string, string | undefined][] = [
      [{ ...options, lockTimeoutMS: 50 }, 'options.lockTimeoutMS', 'lockTimeoutMs'],
      [{ ...options, lock_timeout_ms: 50 }, 'options.lock_timeout_ms', 'lockTimeoutMs'],
      [{ ...options, isolation: 'serializable' }, 'options.isolation', 'isolationLevel'],
      [{ ...options, dialekt: t.dialect }, 'options.dialekt', 'dialect'],
      [{ tabel: table }, 'options.tabel', 'table'],
      [{ ...options, tableName: 'other' }, 'options.tableName', 'table'],
      [{ ...options, retries: 3 }, 'options.retries', undefined],
      [null, 'options', undefined],
    ];
    const expectRefusal = (error: unknown, field: string, meant: string | undefined) => {
      expect(error).toBeInstanceOf(InvalidArgumentError);
      expect(error).toMatchObject({ code: 'INVALID_ARGUMENT', field });
      const message = (error as Error).message;
      if (meant === undefined) expect(message).not.toContain('did you mean');
      else expect(message).toContain(`(did you mean "${meant}"?)`);
    };
    t.resetQueryCount();
    for (const [bad, field, meant] of fencedCases) {
      expectRefusal(await rejection(fenced(db, r, 1n, body, bad as FencedOptions)), field, meant);
    }
    const tableCases: [unknown, string, string][] = [
      [{ tabel: table }, 'options.tabel', 'table'],
      [{ ...options, schma: 'main' }, 'options.schma', 'schema'],
    ];
    for (const [bad, field, meant] of tableCases) {
      expectRefusal(await rejection(highWaterMark(db, r, bad as FencedOptions)), field, meant);
      expectRefusal(await rejection(ensureFencingTable(db, bad as FencedOptions)), field, meant);
      expectRefusal(
        await rejection(Promise.resolve().then(() => fencingMigration(bad as FencedOptions))),
        field,
        meant,
      );
      expectRefusal(
        await rejection(Promise.resolve().then(() => fencingSql(t.dialect, bad as FencedOptions))),
        field,
        meant,
      );
    }
    expect(ran).toBe(false);
    expect(t.queryCount()).toBe(0);
    expect(await highWaterMark(db, r, options)).toBeNull();
  });

  it('accepts one fenced() options object shared by every call', async () => {
    const r = fresh();
    const shared: FencedOptions = {
      table,
      dialect: t.dialect,
      isolationLevel: 'serializable',
      ...(t.dialect === 'postgres' ? { lockTimeoutMs: 5000 } : {}),
    };
    await ensureFencingTable(db, shared);
    await fenced(db, r, 2n, (trx) => writes.insert(trx, r, 2n), shared);
    expect(await highWaterMark(db, r, shared)).toBe(2n);
    expect(fencingSql(t.dialect, shared).guard).toBe(fencingSql(t.dialect, { table }).guard);
    expect(typeof fencingMigration(shared).up).toBe('function');
    expect(await writes.tokens(db, r)).toEqual([2n]);
  });

  it('detects the dialect, and speaks the one it is told', async () => {
    expect(fencingSql(t.dialect, options).guard).toBe(fencingSql(t.dialect, { table }).guard);
    const r = fresh();
    await fenced(db, r, 1n, async () => undefined, { ...options, dialect: t.dialect });
    expect(await highWaterMark(db, r, { ...options, dialect: t.dialect })).toBe(1n);
  });

  it("creates the table idempotently, also through Kysely's Migrator", async () => {
    const other = { table: uniqueName('fence_mig') };
    const bookkeeping = [uniqueName('kysely_migration'), uniqueName('kysely_migration_lock')] as const;
    const migrator = new Migrator({
      db,
      migrationTableName: bookkeeping[0],
      migrationLockTableName: bookkeeping[1],
      provider: { getMigrations: async () => ({ '0001_dlock_fencing': fencingMigration(other) }) },
    });
    expect((await migrator.migrateToLatest()).error).toBeUndefined();
    await ensureFencingTable(db, other); // idempotent on top of the migration
    await fenced(db, 'm', 6n, async () => undefined, other);
    expect(await highWaterMark(db, 'm', other)).toBe(6n);
    expect((await migrator.migrateDown()).error).toBeUndefined();
    await fencingMigration(other).down(db); // and down is idempotent too
    await expect(run(db, fencingSql(t.dialect, other).highWaterMark, ['m'])).rejects.toBeTruthy();
    for (const name of bookkeeping) await db.schema.dropTable(name).ifExists().execute();
  });

  // The verbs both gates share. Added beside the tests above so they reuse this database: another PGlite start
  // per file costs seconds on a loaded machine.
  describe('runFenced and checkFence', () => {
    it('fence exactly like fenced(), which stays as a deprecated alias: same outcomes, same SQL', async () => {
      const context = { t, options, writes };
      const modern = await verbScript(context, 'runFenced/checkFence');
      const deprecated = await verbScript(context, 'fenced (deprecated)');
      expect(deprecated).toEqual(modern);

      const outcomes = modern.map((step) => step.outcome);
      expect(outcomes.slice(0, 2)).toEqual([{ value: 'wrote' }, { value: 'wrote' }]);
      expect(outcomes[2]).toMatchObject({ code: 'STALE_FENCING_TOKEN', token: 4n, highWaterMark: 5n });
      expect(outcomes[3]).toMatchObject({ error: 'Error', message: 'app failure' });
      expect(outcomes[4]).toEqual({ value: 'wrote' });
      expect(outcomes[5]).toMatchObject({ code: 'INVALID_ARGUMENT', field: 'options.lockTimeoutMS' });
      expect(outcomes[6]).toMatchObject({ code: 'INVALID_ARGUMENT', field: 'fn' });
      expect(outcomes[7]).toEqual({ value: 'wrote' });
      expect(outcomes[8]).toMatchObject({ code: 'STALE_FENCING_TOKEN', token: 8n, highWaterMark: 9n });
      expect(outcomes[9]).toMatchObject({ code: 'INVALID_ARGUMENT', field: 'options.isolationLevel' });
      expect(outcomes[10]).toEqual({ value: 9n });
      expect(outcomes[11]).toEqual({ value: [5n, 5n, 7n, 9n] });
      // Refused input reaches no database.
      expect(modern[5]?.sql).toEqual([]);
      expect(modern[6]?.sql).toEqual([]);
    });

    it('runFenced refuses a Transaction, which it could not commit, before any query', async () => {
      const r = fresh();
      await db.transaction().execute(async (trx) => {
        t.resetQueryCount();
        const error = await rejection(runFenced(trx, r, 1n, async () => undefined, options));
        expect(error).toMatchObject({
          code: 'INVALID_ARGUMENT',
          field: 'db',
          message: expect.stringContaining('checkFence()'),
        });
        expect(t.queryCount()).toBe(0);
      });
      expect(await highWaterMark(db, r, options)).toBeNull();
    });

    it('checkFence refuses a Kysely instance that is not a transaction, and bad input, before any query', async () => {
      const r = fresh();
      t.resetQueryCount();
      expect(await rejection(checkFence(db as never, r, 1n, options))).toMatchObject({
        code: 'INVALID_ARGUMENT',
        field: 'trx',
      });
      expect(t.queryCount()).toBe(0);
      await db.transaction().execute(async (trx) => {
        t.resetQueryCount();
        for (const [resource, token, field] of [
          ['', 1n, 'resource'],
          [r, 0n, 'token'],
          [r, '1e3', 'token'],
        ] as const) {
          expect(await rejection(checkFence(trx, resource, token, options))).toMatchObject({ field });
        }
        expect(await rejection(checkFence(trx, r, 1n, { ...options, tabel: 'x' } as never))).toMatchObject({
          field: 'options.tabel',
        });
        expect(t.queryCount()).toBe(0);
      });
      expect(await highWaterMark(db, r, options)).toBeNull();
    });

    it('checkFence fences a controlled transaction', async () => {
      const r = fresh();
      const trx = await db.startTransaction().execute();
      await checkFence(trx, r, 3n, options);
      await writes.insert(trx, r, 3n);
      await trx.commit().execute();
      expect(await highWaterMark(db, r, options)).toBe(3n);
      expect(await writes.tokens(db, r)).toEqual([3n]);
    });
  });
});

describe('fencingSql', () => {
  it('quotes names per dialect and refuses unknown dialects', () => {
    expect(fencingSql('postgres', { schema: 'app', table: 'Marks' }).guard).toContain('"app"."Marks"');
    expect(fencingSql('mysql', { schema: 'app', table: 'Marks' }).guard).toContain('`app`.`Marks`');
    expect(fencingSql('sqlite', { table: 'Marks' }).guard).toContain('"Marks"');
    expect(() => fencingSql('oracle' as never)).toThrow(InvalidArgumentError);
    expect(() => fencingSql('mysql', { table: 'a`b' })).toThrow(InvalidArgumentError);
  });

  it('refuses a dialect option that contradicts the dialect argument, and accepts one that agrees', () => {
    const shared: FencedOptions = { table: 'Marks', dialect: 'mysql' };
    expect(() => fencingSql('postgres', shared)).toThrow(
      expect.objectContaining({ code: 'INVALID_ARGUMENT', field: 'options.dialect' }),
    );
    expect(fencingSql('mysql', shared).guard).toBe(fencingSql('mysql', { table: 'Marks' }).guard);
  });
});
