// Gated write vs the same write in a plain transaction, one connection, serial, on the BUILT package.
//   pnpm --filter @dlock/fencing-pg build && pnpm --filter @dlock/fencing-pg bench
// Env: DLOCK_TEST_PG_URL (default postgres://postgres@127.0.0.1:5432/test), BENCH_N (default 3000 per variant).
import { compareAlternating, formatOverhead, formatRow, PG_URL } from '@dlock/test-utils';
import pg from 'pg';
import { FencingGate } from '../dist/index.js';

const n = Number(process.env.BENCH_N ?? 3000);
const suffix = `${process.pid}`;
const data = `bench_data_${suffix}`;
const pool = new pg.Pool({ connectionString: PG_URL, max: 1 });
const gate = new FencingGate({ table: `bench_fence_${suffix}` });

const write = (tx, i) => tx.query(`INSERT INTO ${data} (v) VALUES ($1)`, [i]);

async function plain(i) {
  const client = await pool.connect();
  try {
    await client.query('BEGIN');
    await write(client, i);
    await client.query('COMMIT');
  } catch (error) {
    await client.query('ROLLBACK');
    throw error;
  } finally {
    client.release();
  }
}

let token = 0n;
const gated = (i) => gate.runFenced(pool, 'bench', ++token, (tx) => write(tx, i));

try {
  await pool.query(`CREATE TABLE ${data} (id bigserial PRIMARY KEY, v int NOT NULL)`);
  await gate.ensureSchema(pool);
  const { baseline: p, variant: g } = await compareAlternating(plain, gated, n, { warmup: 300 });
  console.log(
    `PostgreSQL ${(await pool.query('SHOW server_version')).rows[0].server_version}, Node ${process.version}, N=${n} per variant`,
  );
  console.log(formatRow('plain transaction', p));
  console.log(formatRow('gate.run (fenced)', g));
  console.log(formatOverhead(p, g));
} finally {
  await pool.query(`DROP TABLE IF EXISTS ${data}`);
  await pool.query(gate.sql.dropTable);
  await pool.end();
}
