/** Names of the SQL dialects the gate speaks. PGlite and other PostgreSQL drivers use `'postgres'`. */
export type FencingDialectName = 'postgres' | 'mysql' | 'sqlite';

/**
 * The statements one dialect runs, exported for teams that run their own migrations or audit what touches their
 * database. Placeholders are the dialect's own (`$1` on PostgreSQL, `?` elsewhere); tokens travel as decimal
 * strings and are cast to a 64-bit integer in SQL, so no driver's number handling can round them.
 */
export interface FencingDialectSql {
  /** Idempotent DDL (`CREATE TABLE IF NOT EXISTS`). */
  readonly createTable: string;
  readonly dropTable: string;
  /** The guarded upsert; its parameters are listed in {@link guardParameters}. */
  readonly guard: string;
  /** How the guard's parameters are laid out: each entry is `resource` or `token`. */
  readonly guardParameters: readonly ('resource' | 'token')[];
  /** Reads the mark as text (parameter: resource). Not a lock; used by `highWaterMark()`. */
  readonly highWaterMark: string;
  /** Reads the mark the guard has just locked; on MySQL a locking read, so it sees the newest version. */
  readonly lockedHighWaterMark: string;
}

/** How a dialect's guard result reads: accepted for sure, or "read the locked mark to decide". */
export type GuardVerdict = 'accepted' | 'read-mark';

/** What a retry can cure, judged from a driver error. */
export type RetryableKind = 'conflict' | 'busy' | undefined;

/** One SQL dialect's part of the gate. Each lives in its own file with the same shape. */
export interface FencingDialect {
  readonly name: FencingDialectName;
  /** `schema` and `table` are already validated identifiers. */
  sql(table: string, schema: string | undefined): FencingDialectSql;
  /** Interprets the guard statement's result; see {@link GuardVerdict}. */
  verdict(result: { readonly rows: readonly unknown[]; readonly numAffectedRows?: bigint }): GuardVerdict;
  classify(error: unknown): RetryableKind;
}

export function errorProperty(error: unknown, key: 'code' | 'errno'): unknown {
  return typeof error === 'object' && error !== null ? (error as Record<string, unknown>)[key] : undefined;
}
