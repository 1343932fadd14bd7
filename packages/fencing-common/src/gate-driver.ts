import { InvalidArgumentError } from './errors.js';
import type { IsolationLevel } from './transaction-settings.js';

/** A validated fence: the resource and the token that must not be below its mark. */
export interface Fence {
  /** The resource name, checked by `assertResource`: 1..1024 UTF-8 bytes, no NUL. */
  readonly resource: string;
  /** The fencing token, in 1..2^63-1. */
  readonly token: bigint;
}

/**
 * One validated call of a gate: the fence, and how a transaction the gate opens is set up. A driver applies each
 * setting in whichever step its database takes it (PostgreSQL's `lock_timeout` can travel with BEGIN or be the
 * first statement before the guard); settings that do not apply are left `undefined` by the caller.
 */
export interface FenceCall extends Fence {
  /** Isolation level of a transaction the gate opens; `undefined` leaves the database's default. */
  readonly isolationLevel?: IsolationLevel | undefined;
  /**
   * Longest wait for a row lock, in ms (an integer in 1..2147483647), for the rest of a transaction the gate opens;
   * `undefined` leaves the database's setting.
   */
  readonly lockTimeoutMs?: number | undefined;
}

/**
 * How a guard statement's result reads: accepted for sure, or "read the locked mark to decide" (the statement did
 * not say, as on MySQL's insert path, or it refused the token and the mark goes into the error).
 */
export type GuardVerdict = 'accepted' | 'read-mark';

/**
 * What a retry can cure, judged from a driver error: `'conflict'` the database aborted the transaction to keep it
 * serializable (or broke a deadlock); `'busy'` a lock wait ran past its bound; `undefined` anything else.
 */
export type RetryableKind = 'conflict' | 'busy' | undefined;

/**
 * The atomic steps one database offers the gate, inside a transaction `Tx` that is already open. The algorithm
 * around them (guard, read the mark, stale error, error classification) is `checkGate`'s and
 * `runGate`'s, so every gate behaves alike; a driver only speaks its database.
 */
export interface GateDriver<Tx> {
  /**
   * Runs the guarded upsert for `call`: it raises the mark to the token when the token is not below it, and in
   * every case leaves the fence row locked by `tx` until the transaction ends.
   */
  guard(tx: Tx, call: FenceCall): Promise<GuardVerdict>;
  /** Reads the mark of the row `guard` has just locked, seeing its newest version; `null` if there is no row. */
  lockedMark(tx: Tx, call: FenceCall): Promise<bigint | null>;
  /** Says whether a driver error is one a retry of the whole transaction can cure. Must not throw. */
  classify(error: unknown): RetryableKind;
}

/** A driver that can also open the transaction on a database handle `Db`. */
export interface TransactionDriver<Db, Tx> extends GateDriver<Tx> {
  /**
   * Opens a transaction on `db` set up as `call` says, runs `body` in it and commits when `body` resolves. When
   * `body` or the commit fails it rolls back and rejects with that failure; a commit the database turned into a
   * rollback must reject too, never resolve.
   */
  transaction<T>(db: Db, call: FenceCall, body: (tx: Tx) => Promise<T>): Promise<T>;
}

/** Reads `code` or `errno` from whatever a driver threw, for {@link GateDriver.classify}. */
export function errorProperty(error: unknown, key: 'code' | 'errno'): unknown {
  return typeof error === 'object' && error !== null ? (error as Record<string, unknown>)[key] : undefined;
}

/**
 * The mark from the rows of a mark query: every dialect reads it as text into a column named `last_token`, because
 * drivers return a 64-bit integer as a string, a number that may have lost digits, or a bigint.
 */
export function markFromRows(rows: readonly unknown[]): bigint | null {
  if (!Array.isArray(rows)) throw new InvalidArgumentError('rows', 'must be an array of rows');
  const row: unknown = rows[0];
  if (row === undefined) return null;
  const mark =
    typeof row === 'object' && row !== null ? (row as { last_token?: unknown }).last_token : undefined;
  // The column is read as text; anything else means the statement or the table is not the gate's.
  if (typeof mark !== 'string' || !/^[0-9]{1,19}$/.test(mark)) {
    throw new InvalidArgumentError('rows', 'must hold a last_token column of decimal text');
  }
  return BigInt(mark);
}
