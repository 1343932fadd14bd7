// Gated write vs the same write in a plain transaction, one connection, serial, on the BUILT package.
//   pnpm --filter @dlock/fencing-pg build && pnpm --filter @dlock/fencing-pg bench
// Env: DLOCK_TEST_PG_URL (default postgres://postgres@127.0.0.1:5432/test), BENCH_N (default 3000 per variant).
import pg from 'pg';
import { FencingGate } from '../dist/index.js';

const url = process.env.DLOCK_TEST_PG_URL ?? 'postgres://postgres@127.0.0.1:5432/test';
const n = Number(process.env.BENCH_N ?? 3000);
const suffix = `${process.pid}`;
const data = `bench_data_${suffix}`;
const pool = new pg.Pool({ connectionString: url, max: 1 });
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
const gated = (i) => gate.run(pool, 'bench', ++token, (tx) => write(tx, i));

async function measure(fn, count) {
  const samples = new Float64Array(count);
  const start = process.hrtime.bigint();
  for (let i = 0; i < count; i++) {
    const t0 = process.hrtime.bigint();
    await fn(i);
    samples[i] = Number(process.hrtime.bigint() - t0) / 1e3;
  }
  const totalS = Number(process.hrtime.bigint() - start) / 1e9;
  return { samples, totalS };
}

function summarize(runs) {
  const all = Float64Array.from(runs.flatMap((r) => [...r.samples])).sort();
  const total = runs.reduce((s, r) => s + r.totalS, 0);
  const pct = (p) => all[Math.min(all.length - 1, Math.floor(p * all.length))];
  return { ops: all.length / total, p50: pct(0.5), p99: pct(0.99) };
}

try {
  await pool.query(`CREATE TABLE ${data} (id bigserial PRIMARY KEY, v int NOT NULL)`);
  await gate.ensureSchema(pool);
  await measure(plain, 300);
  await measure(gated, 300);
  // Alternate blocks so drift (autovacuum, page cache) hits both variants alike.
  const runs = { plain: [], gated: [] };
  const block = 500;
  for (let done = 0; done < n; done += block) {
    const size = Math.min(block, n - done);
    runs.plain.push(await measure(plain, size));
    runs.gated.push(await measure(gated, size));
  }
  const p = summarize(runs.plain);
  const g = summarize(runs.gated);
  const row = (name, s) =>
    `${name.padEnd(22)} ${s.ops.toFixed(0).padStart(7)} ops/s   p50 ${s.p50.toFixed(0).padStart(5)} µs   p99 ${s.p99.toFixed(0).padStart(5)} µs`;
  console.log(
    `PostgreSQL ${(await pool.query('SHOW server_version')).rows[0].server_version}, Node ${process.version}, N=${n} per variant`,
  );
  console.log(row('plain transaction', p));
  console.log(row('gate.run (fenced)', g));
  console.log(
    `overhead: p50 +${(g.p50 - p.p50).toFixed(0)} µs (${((g.p50 / p.p50 - 1) * 100).toFixed(0)}%), throughput ${((g.ops / p.ops - 1) * 100).toFixed(0)}%`,
  );
} finally {
  await pool.query(`DROP TABLE IF EXISTS ${data}`);
  await pool.query(gate.sql.dropTable);
  await pool.end();
}
