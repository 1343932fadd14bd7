// Gated write vs the same write in a plain transaction, per dialect, serial, on the BUILT package.
//   pnpm --filter @dlock/fencing-kysely build && pnpm --filter @dlock/fencing-kysely bench
// Env: DLOCK_TEST_PG_URL, DLOCK_TEST_MYSQL_URL, BENCH_N (default 2000 per variant),
//      BENCH_DIALECTS (default "postgres,mariadb,sqlite,pglite").
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { compareAlternating, formatOverhead, formatRow, MYSQL_URL, PG_URL } from '@dlock/test-utils';
import { PGlite } from '@electric-sql/pglite';
import SqliteDatabase from 'better-sqlite3';
import { CompiledQuery, Kysely, MysqlDialect, PGliteDialect, PostgresDialect, SqliteDialect } from 'kysely';
import { createPool } from 'mysql2';
import pg from 'pg';
import { ensureFencingTable, fencingMigration, runFenced } from '../dist/index.js';

const n = Number(process.env.BENCH_N ?? 2000);
const wanted = (process.env.BENCH_DIALECTS ?? 'postgres,mariadb,sqlite,pglite').split(',');
const suffix = `${process.pid}`;
const table = `bench_fence_${suffix}`;
const data = `bench_data_${suffix}`;

const setups = {
  postgres: () => ({
    db: new Kysely({
      dialect: new PostgresDialect({ pool: new pg.Pool({ connectionString: PG_URL, max: 1 }) }),
    }),
    create: `CREATE TABLE ${data} (id bigserial PRIMARY KEY, v int NOT NULL)`,
    insert: `INSERT INTO ${data} (v) VALUES ($1)`,
  }),
  mariadb: () => ({
    db: new Kysely({
      dialect: new MysqlDialect({ pool: createPool({ uri: MYSQL_URL, connectionLimit: 1 }) }),
    }),
    create: `CREATE TABLE ${data} (id BIGINT AUTO_INCREMENT PRIMARY KEY, v INT NOT NULL) ENGINE=InnoDB`,
    insert: `INSERT INTO ${data} (v) VALUES (?)`,
  }),
  sqlite: () => {
    const dir = mkdtempSync(join(tmpdir(), 'dlock-bench-'));
    const database = new SqliteDatabase(join(dir, 'bench.db'));
    database.pragma('journal_mode = WAL');
    return {
      db: new Kysely({ dialect: new SqliteDialect({ database }) }),
      create: `CREATE TABLE ${data} (id INTEGER PRIMARY KEY, v INTEGER NOT NULL)`,
      insert: `INSERT INTO ${data} (v) VALUES (?)`,
      cleanup: () => rmSync(dir, { recursive: true, force: true }),
      note: 'file in tmpdir, WAL',
    };
  },
  pglite: () => ({
    db: new Kysely({ dialect: new PGliteDialect({ pglite: new PGlite() }) }),
    create: `CREATE TABLE ${data} (id bigserial PRIMARY KEY, v int NOT NULL)`,
    insert: `INSERT INTO ${data} (v) VALUES ($1)`,
    note: 'in-memory',
  }),
};

console.log(`Node ${process.version}, N=${n} per variant`);
for (const name of wanted) {
  const setup = setups[name]();
  const { db } = setup;
  const options = { table };
  const write = (trx, i) => trx.executeQuery(CompiledQuery.raw(setup.insert, [i]));
  let token = 0n;
  const plain = (i) => db.transaction().execute((trx) => write(trx, i));
  const gated = (i) => runFenced(db, 'bench', ++token, (trx) => write(trx, i), options);
  try {
    await db.executeQuery(CompiledQuery.raw(setup.create));
    await ensureFencingTable(db, options);
    const { baseline: p, variant: g } = await compareAlternating(plain, gated, n);
    console.log(`${name}${setup.note ? ` (${setup.note})` : ''}`);
    console.log(`  ${formatRow('plain transaction', p, 20)}`);
    console.log(`  ${formatRow('runFenced()', g, 20)}`);
    console.log(`  ${formatOverhead(p, g)}`);
  } finally {
    await db.executeQuery(CompiledQuery.raw(`DROP TABLE IF EXISTS ${data}`));
    await fencingMigration(options).down(db);
    await db.destroy();
    setup.cleanup?.();
  }
}
