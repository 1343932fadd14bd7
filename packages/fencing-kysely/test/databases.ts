import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { MYSQL_URL, PG_URL } from '@dlock/test-utils';
import { PGlite } from '@electric-sql/pglite';
import SqliteDatabase from 'better-sqlite3';
import {
  CompiledQuery,
  Kysely,
  type LogEvent,
  MysqlDialect,
  PGliteDialect,
  PostgresDialect,
  SqliteDialect,
} from 'kysely';
import { createPool as createMysqlPool } from 'mysql2';
import pg from 'pg';
import { afterAll, beforeAll } from 'vitest';
import { ensureFencingTable, type FencingDialectName, fencingMigration } from '../src/index.js';

export {
  isNonDecreasing,
  MYSQL_URL,
  maxOf,
  PG_URL,
  rejection,
  shuffle,
  takeRaceSlot,
  uniqueName,
} from '@dlock/test-utils';

/** A Kysely instance on a real database, plus what the tests need to know about it. */
export interface TestDb {
  readonly kind: TestDbKind;
  readonly dialect: FencingDialectName;
  readonly db: Kysely<unknown>;
  /**
   * True where every transaction gets its own server connection. SQLite (one better-sqlite3 connection per
   * Kysely) and PGlite (one in-process backend) serialise transactions inside Kysely instead.
   */
  readonly concurrent: boolean;
  /** Queries Kysely sent since the last `resetQueryCount()`; proves bad input never reaches the database. */
  queryCount(): number;
  resetQueryCount(): void;
  /** The SQL text of every query counted by `queryCount()`, in order; cleared with it. */
  queries(): readonly string[];
  /** Checked-out pool connections, where the driver's pool reports it (pg); undefined elsewhere. */
  checkedOut(): number | undefined;
  close(): Promise<void>;
}

export type TestDbKind = 'postgres' | 'mariadb' | 'sqlite' | 'pglite';
export const ALL_KINDS: readonly TestDbKind[] = ['postgres', 'mariadb', 'sqlite', 'pglite'];

export interface OpenOptions {
  /** Pool size for the server databases. */
  readonly connections?: number;
  /** SQLite only: an existing file, so several connections can share one database. */
  readonly sqliteFile?: string;
  /** SQLite only: busy timeout in ms (better-sqlite3's default is 5000). */
  readonly sqliteTimeoutMs?: number;
}

/** Opens a Kysely instance of the given kind. Each SQLite instance without `sqliteFile` gets a fresh temp dir. */
export async function openTestDb(kind: TestDbKind, options: OpenOptions = {}): Promise<TestDb> {
  let count = 0;
  let texts: string[] = [];
  const log = (event: LogEvent) => {
    if (event.level === 'query' || event.level === 'error') {
      count++;
      texts.push(event.query.sql);
    }
  };
  const counters = {
    queryCount: () => count,
    resetQueryCount: () => {
      count = 0;
      texts = [];
    },
    queries: () => texts,
  };
  const connections = options.connections ?? 5;
  switch (kind) {
    case 'postgres': {
      const pool = new pg.Pool({ connectionString: PG_URL, max: connections });
      pool.on('error', () => {});
      const db = new Kysely<unknown>({ dialect: new PostgresDialect({ pool }), log });
      return {
        kind,
        dialect: 'postgres',
        db,
        concurrent: true,
        ...counters,
        checkedOut: () => pool.totalCount - pool.idleCount,
        close: () => db.destroy(),
      };
    }
    case 'mariadb': {
      const pool = createMysqlPool({ uri: MYSQL_URL, connectionLimit: connections });
      const db = new Kysely<unknown>({ dialect: new MysqlDialect({ pool }), log });
      return {
        kind,
        dialect: 'mysql',
        db,
        concurrent: true,
        ...counters,
        checkedOut: () => undefined,
        close: () => db.destroy(),
      };
    }
    case 'sqlite': {
      let dir: string | undefined;
      let file = options.sqliteFile;
      if (file === undefined) {
        dir = mkdtempSync(join(tmpdir(), 'dlock-fencing-'));
        file = join(dir, 'test.db');
      }
      const database = new SqliteDatabase(file, { timeout: options.sqliteTimeoutMs ?? 5000 });
      database.pragma('journal_mode = WAL');
      const db = new Kysely<unknown>({ dialect: new SqliteDialect({ database }), log });
      return {
        kind,
        dialect: 'sqlite',
        db,
        concurrent: false,
        ...counters,
        checkedOut: () => undefined,
        close: async () => {
          await db.destroy();
          if (dir !== undefined) rmSync(dir, { recursive: true, force: true });
        },
      };
    }
    case 'pglite': {
      const pglite = new PGlite();
      const db = new Kysely<unknown>({ dialect: new PGliteDialect({ pglite }), log });
      return {
        kind,
        dialect: 'postgres',
        db,
        concurrent: false,
        ...counters,
        checkedOut: () => undefined,
        close: () => db.destroy(),
      };
    }
  }
}

export function run(db: Kysely<unknown>, sqlText: string, parameters: unknown[] = []) {
  return db.executeQuery(CompiledQuery.raw(sqlText, parameters));
}

/** The protected table: `seq` records the order in which writers got past the gate. */
export function protectedTable(dialect: FencingDialectName, name: string) {
  const q = dialect === 'mysql' ? `\`${name}\`` : `"${name}"`;
  const create = {
    postgres: `CREATE TABLE ${q} (seq bigserial PRIMARY KEY, resource text NOT NULL, token bigint NOT NULL)`,
    mysql: `CREATE TABLE ${q} (seq BIGINT AUTO_INCREMENT PRIMARY KEY, resource VARCHAR(255) NOT NULL, token BIGINT NOT NULL) ENGINE=InnoDB`,
    sqlite: `CREATE TABLE ${q} (seq INTEGER PRIMARY KEY AUTOINCREMENT, resource TEXT NOT NULL, token INTEGER NOT NULL)`,
  }[dialect];
  const p = (n: number) => (dialect === 'postgres' ? `$${n}` : '?');
  const cast = { postgres: 'bigint', mysql: 'SIGNED', sqlite: 'INTEGER' }[dialect];
  const text = { postgres: 'text', mysql: 'CHAR', sqlite: 'TEXT' }[dialect];
  return {
    create: (db: Kysely<unknown>) => run(db, create),
    drop: (db: Kysely<unknown>) => run(db, `DROP TABLE IF EXISTS ${q}`),
    insert: (db: Kysely<unknown>, resource: string, token: bigint) =>
      run(db, `INSERT INTO ${q} (resource, token) VALUES (${p(1)}, CAST(${p(2)} AS ${cast}))`, [
        resource,
        token.toString(),
      ]),
    async tokens(db: Kysely<unknown>, resource: string): Promise<bigint[]> {
      const result = await run(
        db,
        `SELECT CAST(token AS ${text}) AS token FROM ${q} WHERE resource = ${p(1)} ORDER BY seq`,
        [resource],
      );
      return (result.rows as { token: string }[]).map((row) => BigInt(row.token));
    },
  };
}

/** What `withFencedTables` opened: the database and its protected table. */
export interface FencedTables {
  readonly t: TestDb;
  readonly writes: ReturnType<typeof protectedTable>;
}

/**
 * Before a describe block's tests, opens a database of `kind` with the fencing table `options.table` and the
 * protected table `data`, and hands them to `opened`; after them, drops both tables and each of `alsoDrop`, and
 * closes the database.
 */
export function withFencedTables(
  kind: TestDbKind,
  options: { readonly table: string },
  data: string,
  opened: (tables: FencedTables) => void,
  alsoDrop: readonly string[] = [],
): void {
  let tables: FencedTables;
  beforeAll(async () => {
    const t = await openTestDb(kind);
    tables = { t, writes: protectedTable(t.dialect, data) };
    await ensureFencingTable(t.db, options);
    await tables.writes.create(t.db);
    opened(tables);
  });
  afterAll(async () => {
    const { t, writes } = tables;
    await fencingMigration(options).down(t.db);
    await writes.drop(t.db);
    for (const name of alsoDrop) await run(t.db, `DROP TABLE IF EXISTS ${name}`);
    await t.close();
  });
}
