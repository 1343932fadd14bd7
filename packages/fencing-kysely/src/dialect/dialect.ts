import type { GuardVerdict, RetryableKind } from '@dlock/fencing-common';

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
  /** Drops the fence table if it exists (`DROP TABLE IF EXISTS`), and every mark in it. */
  readonly dropTable: string;
  /** The guarded upsert; its parameters are listed in {@link guardParameters}. */
  readonly guard: string;
  /**
   * How the guard's parameters are laid out: each entry is `resource` or `token`. On MySQL bind the resource as
   * its UTF-8 bytes (a `Buffer`), as the gate does, so the connection's character set cannot alter it.
   */
  readonly guardParameters: readonly ('resource' | 'token')[];
  /** Reads the mark as text (parameter: resource). Not a lock; used by `highWaterMark()`. */
  readonly highWaterMark: string;
  /** Reads the mark the guard has just locked; on MySQL a locking read, so it sees the newest version. */
  readonly lockedHighWaterMark: string;
}

/**
 * One SQL dialect's part of the gate: what to say and how to read the answers. How to send it is the driver's
 * (`kysely-driver.ts`). Each dialect lives in its own file with the same shape.
 */
export interface FencingDialect {
  readonly name: FencingDialectName;
  /** `schema` and `table` are already validated identifiers. */
  sql(table: string, schema: string | undefined): FencingDialectSql;
  /** The column every row the guard returns carries; absent where it returns none (MySQL counts affected rows). */
  readonly guardColumn?: string;
  /** Interprets the guard statement's result; see `GuardVerdict`. */
  verdict(result: { readonly rows: readonly unknown[]; readonly numAffectedRows?: bigint }): GuardVerdict;
  classify(error: unknown): RetryableKind;
  /**
   * The value bound wherever a statement takes the resource; absent where the string itself is bound. MySQL binds
   * the name's UTF-8 bytes, so the connection's character set cannot change which row a name reaches.
   */
  resourceParameter?(resource: string): unknown;
  /** The statement that bounds lock waits for the rest of the transaction; absent where there is none. */
  lockTimeout?(ms: number): string;
  /**
   * How `runFenced` proves, after the callback and before Kysely commits, that the connection is still in the
   * transaction its guard ran in: a callback that sent COMMIT or ROLLBACK and then BEGIN (or, on MySQL, ran DDL,
   * which commits implicitly) would otherwise have its later writes committed as if they were fenced.
   */
  readonly sameTransaction: SameTransactionCheck;
}

/**
 * `'transaction-id'`: the guard's row carries the transaction id (`txid`) and `statement` reads the current one;
 * they must be equal. `'savepoint'`: `set` runs when the transaction opens and `release` before commit; ending the
 * transaction discards the savepoint, so `release` then fails in a way `isMissing` recognises. `reopen`, where
 * set, is sent (its failure ignored) before rejecting, so the rollback Kysely sends next has a transaction to end.
 */
export type SameTransactionCheck =
  | { readonly kind: 'transaction-id'; readonly statement: string }
  | {
      readonly kind: 'savepoint';
      readonly set: string;
      readonly release: string;
      isMissing(error: unknown): boolean;
      readonly reopen?: string;
    };
