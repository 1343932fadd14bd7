/**
 * The PostgreSQL every subject of the suite uses (DLOCK_BENCH_PG_URL, default the local test database), pools that
 * count what goes over the wire, and a schema per subject, dropped when the subject closes.
 */
import pg from 'pg';
import { ENDPOINTS } from '../lib/index.mjs';

export const PG_URL = ENDPOINTS.postgres;

/** A pool; `statements` counts every statement sent through it, `rowsUpdated` the rows its UPDATEs changed. */
export function countingPool(max) {
  const pool = new pg.Pool({ connectionString: PG_URL, max });
  pool.on('error', () => {});
  const counts = { statements: 0, rowsUpdated: 0 };
  const tally = (text, result) => {
    if (/^\s*UPDATE/i.test(text)) counts.rowsUpdated += result.rowCount ?? 0;
    return result;
  };
  const query = (config, values) => {
    counts.statements += 1;
    const text = typeof config === 'string' ? config : config.text;
    const sent = typeof config === 'string' ? pool.query(config, values) : pool.query(config);
    return sent.then((result) => tally(text, result));
  };
  /** A connection of its own (the advisory-lock subject), its statements counted too. */
  const connect = async () => {
    const client = await pool.connect();
    return {
      client,
      query: (text, values) => {
        counts.statements += 1;
        return client.query(text, values);
      },
    };
  };
  return { pool, counts, query, connect, wrapped: { query, connect: () => pool.connect() } };
}

export async function serverVersion() {
  const client = new pg.Client({ connectionString: PG_URL });
  await client.connect();
  try {
    const { rows } = await client.query(
      "SELECT current_setting('server_version') AS v, current_setting('synchronous_commit') AS s",
    );
    return { version: rows[0].v, synchronousCommit: rows[0].s };
  } finally {
    await client.end();
  }
}

export async function dropSchema(schema) {
  const client = new pg.Client({ connectionString: PG_URL });
  await client.connect();
  try {
    await client.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
  } finally {
    await client.end();
  }
}
