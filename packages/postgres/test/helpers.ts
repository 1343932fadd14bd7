import { type ChildProcess, fork } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { PostgresLockService, type PostgresLockServiceOptions } from '@dlock/postgres';
import { PG_URL, uniqueName } from '@dlock/test-utils';
import { PGlite } from '@electric-sql/pglite';
import pg from 'pg';
import { afterAll, beforeAll } from 'vitest';

export { PG_URL, uniqueName };

export function newPool(max = 10): pg.Pool {
  const pool = new pg.Pool({ connectionString: PG_URL, max });
  // A backend killed on purpose (or by a server restart) surfaces on idle clients as pool errors.
  pool.on('error', () => {});
  return pool;
}

/** Runs one statement the service sends (the `run` it is given), or fails or delays it. */
export type StatementHook = (
  config: pg.QueryConfig,
  run: () => Promise<pg.QueryResult>,
) => Promise<pg.QueryResult>;

/**
 * `real` as the service sees it, every statement it sends passed through `hook`: a query config, sent with the
 * pool's `query` or on a client it took with `connect` (the LISTEN connection's own text statements pass as they are).
 */
export function hooked(real: pg.Pool, hook: StatementHook): pg.Pool {
  const bound = <T extends object>(target: T, key: string | symbol): unknown => {
    const value = Reflect.get(target, key, target);
    return typeof value === 'function' ? value.bind(target) : value;
  };
  const client = (connection: pg.PoolClient): pg.PoolClient =>
    new Proxy(connection, {
      get(target, key) {
        if (key !== 'query') return bound(target, key);
        return (query: string | pg.QueryConfig, values?: unknown[]) =>
          typeof query === 'string' ? target.query(query, values) : hook(query, () => target.query(query));
      },
    });
  return new Proxy(real, {
    get(target, key) {
      if (key === 'query') {
        return (query: string | pg.QueryConfig, values?: unknown[]) =>
          typeof query === 'string' ? target.query(query, values) : hook(query, () => target.query(query));
      }
      if (key === 'connect') return async () => client(await target.connect());
      return bound(target, key);
    },
  });
}

/**
 * Resolves once a statement whose text matches `pattern` (SQL LIKE) waits for a lock on the server, looking every
 * 10 ms for up to `maxMs`: how a test knows the call it holds up is queued on a row lock, not merely sent.
 */
export async function waitingOnLock(pool: pg.Pool, pattern: string, maxMs: number): Promise<void> {
  for (let waited = 0; waited < maxMs; waited += 10) {
    const result = await pool.query<{ n: number }>(
      `SELECT count(*)::int AS n FROM pg_stat_activity
        WHERE datname = current_database() AND wait_event_type = 'Lock' AND query LIKE $1`,
      [pattern],
    );
    if ((result.rows[0]?.n ?? 0) > 0) return;
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
  throw new Error(`no statement like ${pattern} waited for a lock`);
}

/**
 * A schema of its own for one test file, created with the tables, and dropped by `drop()`: files never share rows.
 */
export async function privateSchema(
  pool: pg.Pool,
  prefix = 'dlock_pg_test',
): Promise<{ readonly schema: string; drop(): Promise<void> }> {
  const schema = uniqueName(prefix).toLowerCase();
  const service = new PostgresLockService({ pool, schema, listen: false });
  await service.ensureSchema();
  await service.close();
  return {
    schema,
    drop: async () => {
      await pool.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
    },
  };
}

/** One embedded database with the tables in place (PGlite takes a moment to start: share it within a file). */
export async function embedded(): Promise<PGlite> {
  const db = await PGlite.create();
  const service = new PostgresLockService({ pool: db });
  await service.ensureSchema();
  await service.close();
  return db;
}

/**
 * {@link privateSchema} for the test file that calls it: made before its tests, dropped after them, and the pool
 * ended then. `name` is the schema's once the tests run.
 */
export function usePrivateSchema(pool: pg.Pool, prefix?: string): { readonly name: string } {
  const tables = { name: '' };
  let drop = async (): Promise<void> => {};
  beforeAll(async () => {
    const made = await privateSchema(pool, prefix);
    tables.name = made.schema;
    drop = made.drop;
  });
  afterAll(async () => {
    await drop();
    await pool.end();
  });
  return tables;
}

export type ServiceOptions = Omit<PostgresLockServiceOptions, 'pool'>;

/**
 * Forks `fixtures/<fixture>` with `args` and an IPC channel. `next(type, ms)` resolves with the first message of that
 * type the process sent, looking every 10 ms, and rejects naming `who` and every message so far after `ms`.
 */
export function forkFixture<M extends { readonly type: string }>(
  fixture: string,
  args: readonly string[],
  who: string,
): { readonly child: ChildProcess; next(type: M['type'], ms: number): Promise<M> } {
  const child = fork(fileURLToPath(new URL(`./fixtures/${fixture}`, import.meta.url)), args, {
    execArgv: [],
    stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
  });
  const messages: M[] = [];
  child.on('message', (m: M) => messages.push(m));
  const next = (type: M['type'], ms: number): Promise<M> =>
    new Promise((resolve, reject) => {
      const end = Date.now() + ms;
      const look = (): void => {
        const found = messages.find((m) => m.type === type);
        if (found) resolve(found);
        else if (Date.now() > end)
          reject(new Error(`no "${type}" from the ${who} within ${ms} ms: ${JSON.stringify(messages)}`));
        else setTimeout(look, 10);
      };
      look();
    });
  return { child, next };
}
