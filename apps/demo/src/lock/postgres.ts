import { PostgresLockService } from '@dlock/postgres';
import pg from 'pg';
import type { ConnectedService } from './connected-service.js';
import { CONNECT_MS, within } from './deadline.js';

/**
 * A pg.Pool and the adapter on it, its tables made if missing (ensureSchema is safe from every worker at once).
 * The pool is small: each worker holds one lock at a time, plus the connection its service listens on.
 */
export async function connectPostgres(url: string): Promise<ConnectedService> {
  const label = hostLabel(url);
  const pool = new pg.Pool({ connectionString: url, max: 3, connectionTimeoutMillis: CONNECT_MS });
  pool.on('error', () => {}); // a connection lost while idle; the next statement opens another
  const service = new PostgresLockService({ pool });
  const end = (): void => {
    void service.close().finally(() => pool.end().catch(() => {}));
  };
  await within(pool.query('SELECT 1'), CONNECT_MS, `--lock: cannot reach PostgreSQL at ${label}`, end);
  await within(service.ensureSchema(), CONNECT_MS, `--lock: PostgreSQL at ${label}`, end);
  return {
    service,
    close: async () => {
      await service.close();
      await pool.end().catch(() => {});
    },
  };
}

/** host:port/db of a PostgreSQL URL, never its password. */
function hostLabel(url: string): string {
  try {
    const u = new URL(url);
    return `${u.hostname}:${u.port || '5432'}${u.pathname}`;
  } catch {
    return 'the given URL';
  }
}
