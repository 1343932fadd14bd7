import { StaleFencingTokenError as CommonStale, isDLockError } from '@dlock/fencing-common';
import SqliteDatabase from 'better-sqlite3';
import { type Generated, Kysely, SqliteDialect } from 'kysely';
import { describe, expect, it } from 'vitest';

// Imports the package by name, so this runs the built dist through its exports map, as users get it.
const built = await import('@dlock/fencing-kysely');

interface Database {
  dlock_fencing: import('@dlock/fencing-kysely').FencingTable;
  notes: { id: Generated<number>; body: string };
}

describe('the built package', () => {
  it('is typed end to end: the callback gets a Transaction of the caller’s Database', async () => {
    const db = new Kysely<Database>({
      dialect: new SqliteDialect({ database: new SqliteDatabase(':memory:') }),
    });
    try {
      await built.ensureFencingTable(db);
      await db.schema
        .createTable('notes')
        .addColumn('id', 'integer', (c) => c.primaryKey().autoIncrement())
        .addColumn('body', 'text', (c) => c.notNull())
        .execute();
      const inserted = await built.fenced(db, 'notes', 2n, (trx) =>
        trx.insertInto('notes').values({ body: 'fenced write' }).returning('id').executeTakeFirstOrThrow(),
      );
      expect(inserted.id).toBe(1);
      await expect(
        built.fenced(db, 'notes', 3n, async () => undefined, { lockTimeoutMS: 50 } as never),
      ).rejects.toMatchObject({ code: 'INVALID_ARGUMENT', field: 'options.lockTimeoutMS' });
      const error = await built
        .fenced(db, 'notes', 1n, (trx) => trx.insertInto('notes').values({ body: 'stale' }).execute())
        .catch((e: unknown) => e);
      expect(error).toBeInstanceOf(built.StaleFencingTokenError);
      expect(built.StaleFencingTokenError).toBe(CommonStale);
      expect(isDLockError(error)).toBe(true);
      const marks = await db.selectFrom('dlock_fencing').select(['resource', 'last_token']).execute();
      expect(marks.map((m) => [m.resource, BigInt(m.last_token)])).toEqual([['notes', 2n]]);
      expect(await db.selectFrom('notes').select('body').execute()).toEqual([{ body: 'fenced write' }]);
      // The migration takes the caller's typed Kysely as well as the Migrator's untyped one.
      await built.fencingMigration().down(db);
      await expect(db.selectFrom('dlock_fencing').selectAll().execute()).rejects.toThrow(/no such table/);
    } finally {
      await db.destroy();
    }
  });
});
