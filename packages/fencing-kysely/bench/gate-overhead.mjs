// Gated write vs the same write in a plain transaction, per dialect, serial, on the BUILT package.
//   pnpm --filter @dlock/fencing-kysely build && pnpm --filter @dlock/fencing-kysely bench
// Env: DLOCK_TEST_PG_URL, DLOCK_TEST_MYSQL_URL, BENCH_N (default 2000 per variant),
//      BENCH_DIALECTS (default "postgres,mariadb,sqlite,pglite").
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { PGlite } from '@electric-sql/pglite';
import SqliteDatabase from 'better-sqlite3';
import { CompiledQuery, Kysely, MysqlDialect, PGliteDialect, PostgresDialect, SqliteDialect } from 'kysely';
import { createPool } from 'mysql2';
import pg from 'pg';
import { ensureFencingTable, fenced, fencingMigration } from '../dist/index.js';

const n = Number(process.env.BENCH_N ?? 2000);
const wanted = (process.env.BENCH_DIALECTS ?? 'postgres,mariadb,sqlite,pglite').split(',');
const pgUrl = process.env.DLOCK_TEST_PG_URL ?? 'postgres://postgres@127.0.0.1:5432/test';
const myUrl = process.env.DLOCK_TEST_MYSQL_URL ?? 'mysql://root@127.0.0.1:3306/test';
const suffix = `${process.pid}`;
const table = `bench_fence_${suffix}`;
const data = `bench_data_${suffix}`;

const setups = {
  postgres: () => ({
    db: new Kysely({
      dialect: new PostgresDialect({ pool: new pg.Pool({ connectionString: pgUrl, max: 1 }) }),
    }),
    create: `CREATE TABLE ${data} (id bigserial PRIMARY KEY, v int NOT NULL)`,
    insert: `INSERT INTO ${data} (v) VALUES ($1)`,
  }),
  mariadb: () => ({
    db: new Kysely({ dialect: new MysqlDialect({ pool: createPool({ uri: myUrl, connectionLimit: 1 }) }) }),
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

async function measure(fn, count) {
  const samples = new Float64Array(count);
  const start = process.hrtime.bigint();
  for (let i = 0; i < count; i++) {
    const t0 = process.hrtime.bigint();
    await fn(i);
    samples[i] = Number(process.hrtime.bigint() - t0) / 1e3;
  }
  return { samples, totalS: Number(process.hrtime.bigint() - start) / 1e9 };
}

function summarize(runs) {
  const all = Float64Array.from(runs.flatMap((r) => [...r.samples])).sort();
  const total = runs.reduce((s, r) => s + r.totalS, 0);
  const pct = (p) => all[Math.min(all.length - 1, Math.floor(p * all.length))];
  return { ops: all.length / total, p50: pct(0.5), p99: pct(0.99) };
}

const row = (name, s) =>
  `  ${name.padEnd(20)} ${s.ops.toFixed(0).padStart(7)} ops/s   p50 ${s.p50.toFixed(0).padStart(5)} µs   p99 ${s.p99.toFixed(0).padStart(5)} µs`;

console.log(`Node ${process.version}, N=${n} per variant`);
for (const name of wanted) {
  const setup = setups[name]();
  const { db } = setup;
  const options = { table };
  const write = (trx, i) => trx.executeQuery(CompiledQuery.raw(setup.insert, [i]));
  let token = 0n;
  const plain = (i) => db.transaction().execute((trx) => write(trx, i));
  const gated = (i) => fenced(db, 'bench', ++token, (trx) => write(trx, i), options);
  try {
    await db.executeQuery(CompiledQuery.raw(setup.create));
    await ensureFencingTable(db, options);
    await measure(plain, 200);
    await measure(gated, 200);
    const runs = { plain: [], gated: [] };
    for (let done = 0; done < n; done += 500) {
      const size = Math.min(500, n - done);
      runs.plain.push(await measure(plain, size));
      runs.gated.push(await measure(gated, size));
    }
    const p = summarize(runs.plain);
    const g = summarize(runs.gated);
    console.log(`${name}${setup.note ? ` (${setup.note})` : ''}`);
    console.log(row('plain transaction', p));
    console.log(row('fenced()', g));
    console.log(
      `  overhead: p50 +${(g.p50 - p.p50).toFixed(0)} µs (${((g.p50 / p.p50 - 1) * 100).toFixed(0)}%), throughput ${((g.ops / p.ops - 1) * 100).toFixed(0)}%`,
    );
  } finally {
    await db.executeQuery(CompiledQuery.raw(`DROP TABLE IF EXISTS ${data}`));
    await fencingMigration(options).down(db);
    await db.destroy();
    setup.cleanup?.();
  }
}
