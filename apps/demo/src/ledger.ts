import { ensureFencingTable, fenced, StaleFencingTokenError } from '@dlock/fencing-kysely';
import { PGlite } from '@electric-sql/pglite';
import { Kysely, PGliteDialect, PostgresDialect, type Transaction } from 'kysely';
import pg from 'pg';
import type { DbSpec } from './backends.js';
import { BackendError, oneLine } from './errors.js';
import type { DepositRef, RunKind } from './timeline.js';

const ACCOUNTS = 'dlock_demo_accounts';
/** The demo's own fencing table, so it never touches the marks of an application sharing the database. */
export const FENCING_TABLE = 'dlock_demo_fencing';

interface DemoDatabase {
  [ACCOUNTS]: { id: string; balance: number };
}

/** What the database answered to one statement, and what it did to the balance. */
export interface ReadOutcome {
  readonly accepted: boolean;
  readonly balance: number;
  /** Identifies the set of deposits this balance contains; a write names the version it was computed from. */
  readonly version: number;
  readonly highWaterMark: bigint | null;
}

export interface WriteOutcome {
  readonly accepted: boolean;
  readonly before: number;
  readonly stale: boolean;
  readonly highWaterMark: bigint | null;
  readonly erased: readonly DepositRef[];
}

/**
 * The database behind both runs: a table of accounts, and (for the fenced run) `@dlock/fencing-kysely`'s
 * high-water marks. It runs in the main thread; workers reach it through messages, like clients of a server.
 */
export class Ledger {
  readonly db: Kysely<DemoDatabase>;
  readonly #spec: DbSpec;
  readonly #created: { id: string; resource: string }[] = [];

  private constructor(db: Kysely<DemoDatabase>, spec: DbSpec) {
    this.db = db;
    this.#spec = spec;
  }

  /** Connects and creates the tables if needed. Fails with a one-line `BackendError` when the database is unreachable. */
  static async open(spec: DbSpec): Promise<Ledger> {
    let db: Kysely<DemoDatabase>;
    if (spec.kind === 'pglite') {
      db = new Kysely<DemoDatabase>({ dialect: new PGliteDialect({ pglite: new PGlite() }) });
    } else {
      await probePostgres(spec.url);
      // The probe above already answered "unreachable" quickly; from here on a slow connect is a busy machine, not
      // a dead server (a CI run once lost a scenario to a 5 s connect bound). Ledger calls run one at a time, so one
      // connection kept open for the whole run also spares the reconnects pg's 10 s idle default would cause.
      const pool = new pg.Pool({
        connectionString: spec.url,
        max: 2,
        idleTimeoutMillis: 0,
        connectionTimeoutMillis: 20_000,
      });
      pool.on('error', () => {}); // an idle client's error is reported by the next query that uses the pool
      db = new Kysely<DemoDatabase>({ dialect: new PostgresDialect({ pool }) });
    }
    try {
      await db.schema
        .createTable(ACCOUNTS)
        .ifNotExists()
        .addColumn('id', 'text', (c) => c.primaryKey())
        .addColumn('balance', 'integer', (c) => c.notNull())
        .execute();
      await ensureFencingTable(db, { table: FENCING_TABLE });
    } catch (error) {
      await db.destroy().catch(() => {});
      throw new BackendError(`database: could not create the demo tables: ${oneLine(error)}`);
    }
    return new Ledger(db, spec);
  }

  /** Opens an account with `balance`, for one run. The fenced run guards it with the mark of `resource`. */
  async openAccount(run: RunKind, id: string, resource: string, balance: number): Promise<Account> {
    await this.db.insertInto(ACCOUNTS).values({ id, balance }).execute();
    this.#created.push({ id, resource });
    return new Account(this.db, run, id, resource, balance);
  }

  async close(): Promise<void> {
    if (this.#spec.kind === 'postgres' && this.#created.length > 0) {
      // A shared server keeps no demo leftovers; the resources are unique per scenario, so no mark is reused.
      const marks = this.db as unknown as Kysely<Record<typeof FENCING_TABLE, { resource: string }>>;
      await this.db
        .deleteFrom(ACCOUNTS)
        .where(
          'id',
          'in',
          this.#created.map((c) => c.id),
        )
        .execute()
        .catch(() => {});
      await marks
        .deleteFrom(FENCING_TABLE)
        .where(
          'resource',
          'in',
          this.#created.map((c) => c.resource),
        )
        .execute()
        .catch(() => {});
    }
    await this.db.destroy();
  }
}

/**
 * One account of one run. Statements on it run one at a time, in arrival order, so the demo's bookkeeping (which
 * deposits a balance contains) matches the table exactly; the race it shows is between workers, across time.
 */
export class Account {
  readonly run: RunKind;
  readonly id: string;
  readonly resource: string;
  readonly #db: Kysely<DemoDatabase>;
  #queue: Promise<unknown> = Promise.resolve();
  /** Deposits contained in each balance version; the current version is the table's. */
  readonly #versions = new Map<number, readonly DepositRef[]>();
  #current = 0;
  #nextVersion = 1;
  #balance: number;
  #highestToken = 0n;
  #mark: bigint | null = null;

  constructor(db: Kysely<DemoDatabase>, run: RunKind, id: string, resource: string, balance: number) {
    this.#db = db;
    this.run = run;
    this.id = id;
    this.resource = resource;
    this.#balance = balance;
    this.#versions.set(0, []);
  }

  /** The deposits the current balance contains. */
  get deposits(): readonly DepositRef[] {
    return this.#versions.get(this.#current) ?? [];
  }

  get highWaterMark(): bigint | null {
    return this.#mark;
  }

  /** The balance in the table now (a plain read, after the run). */
  balance(): Promise<number> {
    return this.#serial(
      async () =>
        (
          await this.#db
            .selectFrom(ACCOUNTS)
            .select('balance')
            .where('id', '=', this.id)
            .executeTakeFirstOrThrow()
        ).balance,
    );
  }

  read(token: bigint): Promise<ReadOutcome> {
    return this.#serial(async () => {
      const select = async (trx: Kysely<DemoDatabase> | Transaction<DemoDatabase>) =>
        (await trx.selectFrom(ACCOUNTS).select('balance').where('id', '=', this.id).executeTakeFirstOrThrow())
          .balance;
      if (this.run === 'unfenced') {
        this.#saw(token);
        const balance = await select(this.#db);
        return { accepted: true, balance, version: this.#current, highWaterMark: null };
      }
      try {
        // The read goes through the gate too: it raises the mark, so a holder that read before this one can no
        // longer write. Fencing only the write would let an old holder's write land between a new holder's
        // read and its write, and the new holder would then overwrite it.
        const balance = await fenced(this.#db, this.resource, token, select, { table: FENCING_TABLE });
        this.#accepted(token);
        return { accepted: true, balance, version: this.#current, highWaterMark: this.#mark };
      } catch (error) {
        if (!(error instanceof StaleFencingTokenError)) throw error;
        this.#mark = error.highWaterMark;
        return { accepted: false, balance: this.#balance, version: this.#current, highWaterMark: this.#mark };
      }
    });
  }

  /** Stores `from + deposit.amount`, computed by a worker from the balance version `fromVersion`. */
  write(token: bigint, fromVersion: number, from: number, deposit: DepositRef): Promise<WriteOutcome> {
    return this.#serial(async () => {
      const to = from + deposit.amount;
      const update = async (trx: Transaction<DemoDatabase>) => {
        const row = await trx
          .selectFrom(ACCOUNTS)
          .select('balance')
          .where('id', '=', this.id)
          .forUpdate()
          .executeTakeFirstOrThrow();
        await trx.updateTable(ACCOUNTS).set({ balance: to }).where('id', '=', this.id).execute();
        return row.balance;
      };
      const stale = token < (this.run === 'unfenced' ? this.#highestToken : (this.#mark ?? 0n));
      let before: number;
      if (this.run === 'unfenced') {
        this.#saw(token);
        // A plain UPDATE, as an application without a gate would run it. (The SELECT only feeds the demo's report.)
        before = await this.#db.transaction().execute(update);
      } else {
        try {
          before = await fenced(this.#db, this.resource, token, update, { table: FENCING_TABLE });
          this.#accepted(token);
        } catch (error) {
          if (!(error instanceof StaleFencingTokenError)) throw error;
          this.#mark = error.highWaterMark;
          return {
            accepted: false,
            before: this.#balance,
            stale: true,
            highWaterMark: this.#mark,
            erased: [],
          };
        }
      }
      const inBefore = this.#versions.get(this.#current) ?? [];
      const inFrom = this.#versions.get(fromVersion) ?? [];
      const erased = inBefore.filter((d) => !inFrom.includes(d));
      const version = this.#nextVersion++;
      this.#versions.set(version, [...inFrom, deposit]);
      this.#current = version;
      this.#balance = to;
      return { accepted: true, before, stale, highWaterMark: this.#mark, erased };
    });
  }

  #saw(token: bigint): void {
    if (token > this.#highestToken) this.#highestToken = token;
  }

  #accepted(token: bigint): void {
    this.#saw(token);
    if (this.#mark === null || token > this.#mark) this.#mark = token;
  }

  #serial<T>(fn: () => Promise<T>): Promise<T> {
    const next = this.#queue.then(fn, fn);
    this.#queue = next.catch(() => {});
    return next;
  }
}

/** One connection attempt with a short bound, so an unreachable server is one clear line, not a hang. */
async function probePostgres(url: string): Promise<void> {
  const client = new pg.Client({ connectionString: url, connectionTimeoutMillis: 3_000 });
  client.on('error', () => {});
  try {
    await client.connect();
    await client.query('SELECT 1');
  } catch (error) {
    throw new BackendError(`database: cannot reach PostgreSQL at ${safeHost(url)}: ${oneLine(error)}`);
  } finally {
    await client.end().catch(() => {});
  }
}

function safeHost(url: string): string {
  try {
    const u = new URL(url);
    return `${u.hostname}:${u.port || '5432'}${u.pathname}`;
  } catch {
    return 'the given URL';
  }
}
