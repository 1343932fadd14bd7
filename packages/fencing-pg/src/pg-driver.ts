import {
  classifyPostgresError,
  type FenceCall,
  markFromRows,
  postgresLockTimeout,
  type TransactionDriver,
} from '@dlock/fencing-common';
import { isPool, type PgClientLike, type PgQueryable, type PgQueryResultLike } from './client-like.js';
import type { FencingSql } from './sql.js';

/**
 * The gate's steps on node-postgres. The algorithm around them (guard, mark, stale error, error mapping) lives in
 * `@dlock/fencing-common`; this file only says how pg runs a statement and a transaction.
 */
export function pgDriver(sql: FencingSql): TransactionDriver<PgQueryable, PgClientLike> {
  return {
    async guard(client, call) {
      const accepted = await client.query(sql.guard, [call.resource, call.token.toString()]);
      // One row back: accepted. Zero rows: the row exists, is locked by this transaction and holds a larger token.
      return accepted.rows.length === 1 ? 'accepted' : 'read-mark';
    },
    lockedMark: (client, call) => readMark(client, sql.highWaterMark, call.resource),
    classify: classifyPostgresError,
    async transaction(db, call, body) {
      const begin = beginStatement(call);
      if (!isPool(db)) return inTransaction(db, begin, call.resource, body);
      const client = await db.connect();
      // A backend that dies while we hold its client makes pg emit 'error', which would crash the process with
      // no listener attached; the same failure already reaches us as a rejected query, so the event can be dropped.
      const ignore = () => {};
      client.on?.('error', ignore);
      const broken: { error?: Error } = {};
      try {
        return await inTransaction(client, begin, call.resource, body, broken);
      } finally {
        client.removeListener?.('error', ignore);
        client.release(broken.error);
      }
    },
  };
}

/** The stored mark; the statement reads it as text, because pg returns int8 as a string. */
export async function readMark(db: PgQueryable, text: string, resource: string): Promise<bigint | null> {
  return markFromRows((await db.query(text, [resource])).rows);
}

/** BEGIN; `body`; COMMIT, or ROLLBACK on any failure. A ROLLBACK that fails itself is kept in `broken`. */
async function inTransaction<T>(
  client: PgClientLike,
  begin: string,
  resource: string,
  body: (tx: PgClientLike) => Promise<T>,
  broken: { error?: Error } = {},
): Promise<T> {
  let value: T;
  let commit: PgQueryResultLike;
  try {
    await client.query(begin);
    value = await body(client);
    // An idle client here means the callback sent COMMIT or ROLLBACK itself (a helper with its own transaction,
    // say). Our COMMIT would then only warn and report success, while the mark was undone or the fence row
    // unlocked early and the callback's later statements ran in autocommit, unfenced. pg reads the status from
    // the ReadyForQuery that settled the last query, so after a statement that succeeded it is current.
    if (client.getTransactionStatus?.() === 'I') {
      throw new Error(
        `the callback ended the transaction fenced on "${resource}" itself (COMMIT or ROLLBACK on its client): ` +
          'what it ran after that was not fenced',
      );
    }
    commit = await client.query('COMMIT');
  } catch (error) {
    try {
      await client.query('ROLLBACK');
    } catch (rollbackError) {
      // The connection is unusable; a pool client released with this error is destroyed, not handed out again.
      broken.error = rollbackError instanceof Error ? rollbackError : new Error(String(rollbackError));
    }
    throw error;
  }
  // PostgreSQL answers COMMIT of a failed transaction with a ROLLBACK tag and no error, which is what happens
  // when `body` catches a query error and returns normally. Reporting success would be a lie.
  if (commit.command === 'ROLLBACK') {
    throw new Error(
      `transaction fenced on "${resource}" was rolled back: a statement in the callback failed`,
    );
  }
  return value;
}

/** The gate's own default is READ COMMITTED, where its wait for the fence row never ends in 40001. */
function beginStatement(call: FenceCall): string {
  const begin = `BEGIN ISOLATION LEVEL ${(call.isolationLevel ?? 'read committed').toUpperCase()}`;
  // One simple-protocol round trip carries both statements; the value is a checked integer, not caller text.
  return call.lockTimeoutMs === undefined ? begin : `${begin}; ${postgresLockTimeout(call.lockTimeoutMs)}`;
}
