import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { type Kysely, sql, type Transaction } from 'kysely';
import { createPool as createMysqlPool } from 'mysql2';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  ensureFencingTable,
  FenceBusyError,
  FenceConflictError,
  type FencedIsolationLevel,
  fenced,
  fencingMigration,
  highWaterMark,
  StaleFencingTokenError,
  withFenceRetry,
} from '../src/index.js';
import { MYSQL_URL, openTestDb, PG_URL, rejection, run, type TestDb, uniqueName } from './databases.js';

const noop = async () => undefined;
const settle = (p: Promise<unknown>) =>
  p.then(
    (value) => ({ ok: true as const, value, error: undefined }),
    (error: unknown) => ({ ok: false as const, value: undefined, error }),
  );

/** Polls until `check` says yes; a bounded condition wait, not a timer. */
async function until(check: () => Promise<boolean>, what: string): Promise<void> {
  for (let i = 0; i < 2000; i++) {
    if (await check()) return;
    await new Promise((resolve) => setImmediate(resolve));
  }
  throw new Error(`never happened: ${what}`);
}

describe('PostgreSQL (pg)', () => {
  const options = { table: uniqueName('fence_pgiso') };
  let t: TestDb;
  let db: Kysely<unknown>;
  let observer: pg.Pool;
  let counter = 0;
  const fresh = () => `pgiso/${counter++}`;
  const lockWaiters = async () => {
    const result = await observer.query<{ n: number }>(
      `SELECT count(*)::int AS n FROM pg_stat_activity
        WHERE wait_event_type = 'Lock' AND query LIKE '%' || $1 || '%' AND pid <> pg_backend_pid()`,
      [options.table],
    );
    return result.rows[0]?.n ?? 0;
  };

  beforeAll(async () => {
    t = await openTestDb('postgres', { connections: 4 });
    db = t.db;
    observer = new pg.Pool({ connectionString: PG_URL, max: 1 });
    await ensureFencingTable(db, options);
  });

  afterAll(async () => {
    await fencingMigration(options).down(db);
    await t.close();
    await observer.end();
  });

  /** Holds the fence row with `holder` while a second fenced() with `waiterOptions` queues behind it. */
  async function contend(r: string, holder: bigint, waiter: bigint, isolationLevel?: FencedIsolationLevel) {
    let queued: ReturnType<typeof settle> | undefined;
    await fenced(
      db,
      r,
      holder,
      async () => {
        const waiterOptions = isolationLevel === undefined ? options : { ...options, isolationLevel };
        queued = settle(fenced(db, r, waiter, async () => 'waiter wrote', waiterOptions));
        await until(async () => (await lockWaiters()) >= 1, 'waiter blocked on the fence row');
      },
      options,
    );
    return queued!;
  }

  it.each<FencedIsolationLevel>(['repeatable read', 'serializable'])(
    'under %s a concurrent raise aborts the queued writer with FenceConflictError',
    async (level) => {
      const r = fresh();
      await fenced(db, r, 1n, noop, options);
      const outcome = await contend(r, 5n, 6n, level);
      expect(outcome.error).toBeInstanceOf(FenceConflictError);
      expect(outcome.error).toMatchObject({ retryable: true, cause: { code: '40001' } });
      expect(await highWaterMark(db, r, options)).toBe(5n);
      expect(
        await withFenceRetry(() =>
          fenced(db, r, 6n, async () => 'retried', { ...options, isolationLevel: level }),
        ),
      ).toBe('retried');
      expect(t.checkedOut()).toBe(0);
    },
  );

  it('under read committed the queued writer is judged against the committed mark', async () => {
    const r = fresh();
    expect(await contend(r, 5n, 6n)).toMatchObject({ ok: true, value: 'waiter wrote' });
    expect((await contend(r, 7n, 6n)).error).toMatchObject({
      code: 'STALE_FENCING_TOKEN',
      highWaterMark: 7n,
    });
  });

  it('in a caller transaction whose snapshot predates a raise, the guard raises FenceConflictError', async () => {
    const r = fresh();
    await fenced(db, r, 1n, noop, options);
    const error = await rejection(
      db
        .transaction()
        .setIsolationLevel('repeatable read')
        .execute(async (trx) => {
          await sql`SELECT 1`.execute(trx); // takes the snapshot
          await fenced(db, r, 3n, noop, options);
          await fenced(trx, r, 4n, noop, options);
        }),
    );
    expect(error).toBeInstanceOf(FenceConflictError);
    expect(await highWaterMark(db, r, options)).toBe(3n);
  });

  it('lockTimeoutMs bounds the wait for a held fence row with FenceBusyError', async () => {
    const r = fresh();
    let waiter: Awaited<ReturnType<typeof settle>> | undefined;
    await fenced(
      db,
      r,
      5n,
      async () => {
        waiter = await settle(fenced(db, r, 6n, noop, { ...options, lockTimeoutMs: 50 }));
      },
      options,
    );
    expect(waiter?.error).toBeInstanceOf(FenceBusyError);
    expect(waiter?.error).toMatchObject({ cause: { code: '55P03' } });
    expect(await highWaterMark(db, r, options)).toBe(5n);
  });

  it('returns every pooled connection after success and after each kind of failure', async () => {
    const r = fresh();
    const outcomes = [
      () => fenced(db, r, 10n, noop, options),
      () => fenced(db, r, 9n, noop, options),
      () =>
        fenced(
          db,
          r,
          10n,
          async () => {
            throw new Error('app');
          },
          options,
        ),
      (() => fenced(db, r, 10n, (trx) => run(trx, 'SELECT 1/0'), options)) as () => Promise<unknown>,
      () => fenced(db, r, 0n, noop, options),
    ];
    const codes: string[] = [];
    for (const outcome of outcomes) {
      codes.push(
        await outcome().then(
          () => 'ok',
          (e: { code?: string }) => e.code ?? 'error',
        ),
      );
      expect(t.checkedOut()).toBe(0);
    }
    expect(codes).toEqual(['ok', 'STALE_FENCING_TOKEN', 'error', '22012', 'INVALID_ARGUMENT']);
  });
});

describe('MariaDB', () => {
  const options = { table: uniqueName('fence_myiso') };
  let t: TestDb;
  let db: Kysely<unknown>;
  let counter = 0;
  const fresh = () => `myiso/${counter++}`;

  beforeAll(async () => {
    t = await openTestDb('mariadb', { connections: 4 });
    db = t.db;
    await ensureFencingTable(db, options);
  });

  afterAll(async () => {
    await fencingMigration(options).down(db);
    await t.close();
  });

  it('judges a caller transaction by the newest mark, not by its REPEATABLE READ snapshot', async () => {
    const r = fresh();
    await fenced(db, r, 3n, noop, options);
    const seen: unknown[] = [];
    const error = await rejection(
      db.transaction().execute(async (trx) => {
        // The snapshot sees mark 3; another connection then raises it to 10.
        seen.push(await highWaterMark(trx, r, options));
        await fenced(db, r, 10n, noop, options);
        seen.push(await highWaterMark(trx, r, options));
        await fenced(trx, r, 5n, noop, options);
      }),
    );
    expect(seen).toEqual([3n, 3n]);
    expect(error).toBeInstanceOf(StaleFencingTokenError);
    expect(error).toMatchObject({ token: 5n, highWaterMark: 10n });
    expect(await highWaterMark(db, r, options)).toBe(10n);
  });

  it('accepts an equal token and reports a stale one whatever CLIENT_FOUND_ROWS says', async () => {
    // mysql2 sets CLIENT_FOUND_ROWS by default; this connection turns it off, so affected rows differ.
    const pool = createMysqlPool({ uri: MYSQL_URL, connectionLimit: 1, flags: ['-FOUND_ROWS'] });
    const { Kysely: K, MysqlDialect } = await import('kysely');
    const plain = new K<unknown>({ dialect: new MysqlDialect({ pool }) });
    try {
      const r = fresh();
      await fenced(plain, r, 4n, noop, options);
      await fenced(plain, r, 4n, noop, options);
      await expect(fenced(plain, r, 3n, noop, options)).rejects.toMatchObject({ highWaterMark: 4n });
      await fenced(plain, r, 5n, noop, options);
      expect(await highWaterMark(plain, r, options)).toBe(5n);
      // The same sequence through the default (FOUND_ROWS) connection agrees.
      await fenced(db, r, 5n, noop, options);
      await expect(fenced(db, r, 4n, noop, options)).rejects.toMatchObject({ highWaterMark: 5n });
    } finally {
      await plain.destroy();
    }
  });

  it("keeps one mark per name whatever character set the pool's connections use", async () => {
    const { Kysely: K, MysqlDialect } = await import('kysely');
    const open = (charset: string) =>
      new K<unknown>({
        dialect: new MysqlDialect({ pool: createMysqlPool({ uri: MYSQL_URL, connectionLimit: 1, charset }) }),
      });
    // cp1250 has none of these characters and utf8 (mb3) cannot hold the emoji; the default pool is utf8mb4.
    const cp1250 = open('CP1250_GENERAL_CI');
    const utf8mb3 = open('UTF8_GENERAL_CI');
    try {
      const prefix = fresh();
      const [japan, china] = [`${prefix}/日本`, `${prefix}/中国`];
      await fenced(cp1250, japan, 100n, noop, options);
      // A distinct name is a distinct resource: its first write is accepted, not judged against 日本's mark.
      await fenced(cp1250, china, 5n, noop, options);
      expect(await highWaterMark(cp1250, china, options)).toBe(5n);
      expect(await highWaterMark(db, japan, options)).toBe(100n);
      expect(await highWaterMark(db, china, options)).toBe(5n);

      // One name reaches one mark from every pool, so a stale token is refused through any of them.
      const smile = `${fresh()}/\u{1F600}`;
      await fenced(db, smile, 100n, noop, options);
      for (const other of [utf8mb3, cp1250]) {
        expect(await highWaterMark(other, smile, options)).toBe(100n);
        const error = await rejection(fenced(other, smile, 5n, noop, options));
        expect(error).toBeInstanceOf(StaleFencingTokenError);
        expect(error).toMatchObject({ token: 5n, highWaterMark: 100n });
      }
      // And the bytes stored are the name's UTF-8 bytes, as the 1024-byte limit counts them.
      const stored = await sql<{ bytes: string }>`SELECT HEX(resource) AS bytes FROM ${sql.table(
        options.table,
      )} WHERE last_token = 100 AND resource IN (${Buffer.from(japan)}, ${Buffer.from(smile)})`.execute(db);
      expect(stored.rows.map((r) => r.bytes).sort()).toEqual(
        [Buffer.from(japan).toString('hex'), Buffer.from(smile).toString('hex')]
          .map((h) => h.toUpperCase())
          .sort(),
      );
    } finally {
      await cp1250.destroy();
      await utf8mb3.destroy();
    }
  });

  it('a lock wait timeout (1205) on the fence row is FenceBusyError', async () => {
    const pool = createMysqlPool({ uri: MYSQL_URL, connectionLimit: 1 });
    pool.on('connection', (connection) => {
      connection.query('SET SESSION innodb_lock_wait_timeout = 1');
    });
    const { Kysely: K, MysqlDialect } = await import('kysely');
    const impatient = new K<unknown>({ dialect: new MysqlDialect({ pool }) });
    try {
      const r = fresh();
      let waiter: Awaited<ReturnType<typeof settle>> | undefined;
      await fenced(
        db,
        r,
        5n,
        async () => {
          waiter = await settle(fenced(impatient, r, 6n, noop, options));
        },
        options,
      );
      expect(waiter?.error).toBeInstanceOf(FenceBusyError);
      expect(waiter?.error).toMatchObject({ cause: { errno: 1205 } });
      expect(await highWaterMark(db, r, options)).toBe(5n);
    } finally {
      await impatient.destroy();
    }
  });

  it('under SERIALIZABLE a lock cycle between two fenced transactions aborts one with FenceConflictError', async () => {
    // Each transaction first fences its own resource, then (once both hold their row) the other's: a cycle
    // InnoDB must break by rolling one back with 1213, whichever request arrives second. No timing involved.
    const [a, b] = [fresh(), fresh()];
    await fenced(db, a, 1n, noop, options);
    await fenced(db, b, 1n, noop, options);
    let holding = 0;
    let bothHold!: () => void;
    const whenBothHold = new Promise<void>((resolve) => {
      bothHold = resolve;
    });
    const holdThenCross =
      (other: string, token: bigint, label: string) => async (trx: Transaction<unknown>) => {
        holding += 1;
        if (holding === 2) bothHold();
        await whenBothHold;
        await fenced(trx, other, token, noop, options);
        return label;
      };
    const serializable = { ...options, isolationLevel: 'serializable' as const };
    const outcomes = await Promise.all([
      settle(fenced(db, a, 2n, holdThenCross(b, 2n, 'first'), serializable)),
      settle(fenced(db, b, 3n, holdThenCross(a, 3n, 'second'), serializable)),
    ]);
    const conflicts = outcomes.filter((o) => o.error instanceof FenceConflictError);
    expect(conflicts).toHaveLength(1);
    expect(conflicts[0]?.error).toMatchObject({ retryable: true, cause: { errno: 1213 } });
    expect(outcomes.filter((o) => o.ok)).toHaveLength(1);
  });
});

describe('SQLite with several connections to one file', () => {
  const options = { table: 'dlock_fencing' };
  let dir: string;
  let first: TestDb;
  let second: TestDb;

  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), 'dlock-fencing-multi-'));
    const file = join(dir, 'shared.db');
    first = await openTestDb('sqlite', { sqliteFile: file });
    // better-sqlite3 waits for a busy database synchronously, which would block the event loop the other
    // connection needs to finish; a zero busy timeout makes the second writer fail fast instead.
    second = await openTestDb('sqlite', { sqliteFile: file, sqliteTimeoutMs: 0 });
    await ensureFencingTable(first.db, options);
  });

  afterAll(async () => {
    await first.close();
    await second.close();
    rmSync(dir, { recursive: true, force: true });
  });

  it('a writer on another connection gets FenceBusyError while the gate holds the write lock', async () => {
    let busy: Awaited<ReturnType<typeof settle>> | undefined;
    await fenced(
      first.db,
      'shared',
      5n,
      async () => {
        busy = await settle(fenced(second.db, 'shared', 6n, async () => 'second wrote', options));
      },
      options,
    );
    expect(busy?.error).toBeInstanceOf(FenceBusyError);
    expect(busy?.error).toMatchObject({ cause: { code: 'SQLITE_BUSY' } });
    expect(await highWaterMark(second.db, 'shared', options)).toBe(5n);
    // Once the first transaction committed, the second connection sees its mark and is fenced by it.
    await expect(fenced(second.db, 'shared', 4n, noop, options)).rejects.toMatchObject({ highWaterMark: 5n });
    expect(await fenced(second.db, 'shared', 6n, async () => 'second wrote', options)).toBe('second wrote');
    expect(await highWaterMark(first.db, 'shared', options)).toBe(6n);
  });

  it('accepts only serializable as an isolation level', async () => {
    await expect(
      fenced(first.db, 'shared', 7n, noop, { ...options, isolationLevel: 'repeatable read' }),
    ).rejects.toMatchObject({ code: 'INVALID_ARGUMENT', field: 'options.isolationLevel' });
    await fenced(first.db, 'shared', 7n, noop, { ...options, isolationLevel: 'serializable' });
    expect(await highWaterMark(first.db, 'shared', options)).toBe(7n);
  });
});
