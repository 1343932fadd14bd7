import { createTableRacingOthers, rejectUnknownKeys } from '@dlock/fencing-common';
import { CompiledQuery, type Kysely } from 'kysely';
import {
  assertKysely,
  detectDialect,
  FENCING_OPTION_KEYS,
  type FencingTableOptions,
  fencingSql,
} from './options.js';

/**
 * A row of the fence table, to add to your `Database` interface if you query it yourself. Read marks with
 * `highWaterMark()` instead where you can: the gate never reads them through this type.
 *
 * Column types as the drivers return them: `last_token` is a string on `pg` (int8), a number or string on
 * mysql2, a number or bigint on better-sqlite3, a bigint on PGlite; use `BigInt(row.last_token)`. On MySQL,
 * `resource` is VARBINARY and comes back as a Buffer, and the table has a `write_count` column the guard needs.
 *
 * @example
 * ```ts
 * interface Database { orders: OrderTable; dlock_fencing: FencingTable }
 * ```
 */
export interface FencingTable {
  /** The resource name, the primary key. */
  resource: string;
  /** The high-water mark: the highest token accepted for `resource`. */
  last_token: string | number | bigint;
}

/**
 * The shape of a Kysely `Migration`, declared here so it fits every Kysely version's migrator (0.29 moved the
 * type to `kysely/migration`).
 */
export interface FencingMigration {
  /** Creates the fence table if it is missing; safe to run again. */
  up<DB>(db: Kysely<DB>): Promise<void>;
  /** Drops the fence table if it exists, and every mark in it. */
  down<DB>(db: Kysely<DB>): Promise<void>;
}

/**
 * A Kysely migration that creates (and on `down`, drops) the fence table. The dialect is detected from the `db`
 * the migrator passes in unless `options.dialect` says otherwise. `up` is idempotent. A misspelt option key throws
 * here, when the migration list is built, rather than when the migrator runs it.
 *
 * @example
 * ```ts
 * const migrator = new Migrator({ db, provider: { getMigrations: async () => ({
 *   '0001_dlock_fencing': fencingMigration(),
 * }) } });
 * await migrator.migrateToLatest();
 * ```
 */
export function fencingMigration(options: FencingTableOptions = {}): FencingMigration {
  rejectUnknownKeys(options, 'options', FENCING_OPTION_KEYS);
  return {
    up: (db) => ensureFencingTable(db, options),
    async down(db) {
      // Checked before `db.executeQuery` is read: written inline, the method is looked up before its argument.
      const { dropTable } = tableSql(db, options);
      await db.executeQuery(CompiledQuery.raw(dropTable));
    },
  };
}

/** Creates the fence table if it is missing; the same statement as {@link fencingMigration}'s `up`. */
export async function ensureFencingTable<DB>(
  db: Kysely<DB>,
  options: FencingTableOptions = {},
): Promise<void> {
  rejectUnknownKeys(options, 'options', FENCING_OPTION_KEYS);
  assertKysely(db, 'db');
  const { createTable } = tableSql(db, options);
  // Only PostgreSQL can lose a concurrent creation race; elsewhere the helper simply runs the statement once.
  await createTableRacingOthers(() => db.executeQuery(CompiledQuery.raw(createTable)));
}

function tableSql<DB>(db: Kysely<DB>, options: FencingTableOptions) {
  assertKysely(db, 'db');
  const { dialect, ...location } = options;
  // Only `undefined` asks for detection; fencingSql refuses a `null` dialect.
  return fencingSql(dialect === undefined ? detectDialect(db) : dialect, location);
}
