import {
  classifyPostgresError,
  errorProperty,
  type FenceCall,
  InvalidArgumentError,
  markFromRows,
  postgresLockTimeout,
  rolledBackError,
  type TransactionDriver,
  transactionEndedError,
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
      if (accepted.rows.length !== 1) return 'read-mark';
      // The first guard of a transaction names it; a callback's own checkFence on the same client must not rename
      // it, or a callback that committed and began again could vouch for its new transaction.
      if (!fencedTransactions.has(client)) {
        const txid = (accepted.rows[0] as { txid?: unknown } | undefined)?.txid;
        if (typeof txid === 'string') fencedTransactions.set(client, txid);
      }
      return 'accepted';
    },
    lockedMark: (client, call) => readMark(client, sql.highWaterMark, call.resource),
    classify: classifyPostgresError,
    async transaction(db, call, body) {
      const begin = beginStatement(call);
      if (!isPool(db)) {
        // pg queues a second caller's statements on the same connection: its BEGIN would only warn and the first
        // caller's COMMIT or ROLLBACK would end both transactions, whatever the second one later reports.
        if (clientsInUse.has(db)) {
          throw new InvalidArgumentError(
            'db',
            'is already running a fenced transaction; await it first, or pass a pool so each call gets a client',
          );
        }
        clientsInUse.add(db);
        try {
          return await inTransaction(db, begin, call.resource, body);
        } finally {
          clientsInUse.delete(db);
        }
      }
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

/** Clients (not pools) that a `runFenced` call is using right now. */
const clientsInUse = new WeakSet<PgClientLike>();

/** The transaction id the gate's guard reported on a client, until the transaction `inTransaction` opened ends. */
const fencedTransactions = new WeakMap<PgClientLike, string>();

/** Put in the check's failure so that failure cannot be mistaken for another 22P02. */
const ENDED = 'dlock: the fenced transaction was ended inside the callback';

/** How a callback can end the fenced transaction on node-postgres, for {@link transactionEndedError}. */
const PG_HOW = 'COMMIT or ROLLBACK on its client';

/**
 * The check and COMMIT in one simple-protocol round trip. When the transaction is no longer the one the guard ran
 * in (the callback sent COMMIT or ROLLBACK and then BEGIN), the cast fails, PostgreSQL skips the COMMIT that
 * follows in the same query, and the gate rolls back instead. The text is what fails, not a constant division,
 * because the planner folds constants before it knows which branch runs.
 */
function commitIfStillFenced(txid: string | undefined): string {
  // The id comes from the server; checked anyway, because it is spliced into SQL text.
  if (txid === undefined || !/^[0-9]{1,20}$/.test(txid)) return 'COMMIT';
  return `SELECT (CASE WHEN txid_current() = ${txid} THEN '0' ELSE '${ENDED}' END)::int; COMMIT`;
}

/** What the commit query answered: pg gives one result per statement when the text holds several. */
function lastResult(result: PgQueryResultLike | readonly PgQueryResultLike[]): PgQueryResultLike | undefined {
  return Array.isArray(result) ? result.at(-1) : (result as PgQueryResultLike);
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
  let commit: PgQueryResultLike | undefined;
  fencedTransactions.delete(client);
  try {
    await client.query(begin);
    value = await body(client);
    // An idle client here means the callback sent COMMIT or ROLLBACK itself (a helper with its own transaction,
    // say). Our COMMIT would then only warn and report success, while the mark was undone or the fence row
    // unlocked early and the callback's later statements ran in autocommit, unfenced. pg reads the status from
    // the ReadyForQuery that settled the last query, so after a statement that succeeded it is current. A callback
    // that began again afterwards leaves the client in a transaction: the check sent with COMMIT catches that.
    if (transactionStatus(client) === 'I') throw transactionEndedError(resource, PG_HOW);
    try {
      commit = lastResult(await client.query(commitIfStillFenced(fencedTransactions.get(client))));
    } catch (error) {
      const code = errorProperty(error, 'code');
      if (code === '22P02' && error instanceof Error && error.message.includes(ENDED)) {
        throw transactionEndedError(resource, PG_HOW, error);
      }
      // The check met a transaction that had already failed: the callback swallowed a failed statement.
      if (code === '25P02') throw rolledBackError(resource, error);
      throw error;
    }
  } catch (error) {
    try {
      await client.query('ROLLBACK');
    } catch (rollbackError) {
      // The connection is unusable; a pool client released with this error is destroyed, not handed out again.
      broken.error = rollbackError instanceof Error ? rollbackError : new Error(String(rollbackError));
    }
    throw error;
  } finally {
    fencedTransactions.delete(client);
  }
  // PostgreSQL answers COMMIT of a failed transaction with a ROLLBACK tag and no error, which is what happens
  // when `body` catches a query error and returns normally. Reporting success would be a lie.
  if (commit?.command === 'ROLLBACK') throw rolledBackError(resource);
  return value;
}

/** The gate's own default is READ COMMITTED, where its wait for the fence row never ends in 40001. */
function beginStatement(call: FenceCall): string {
  const begin = `BEGIN ISOLATION LEVEL ${(call.isolationLevel ?? 'read committed').toUpperCase()}`;
  // One simple-protocol round trip carries both statements; the value is a checked integer, not caller text.
  return call.lockTimeoutMs === undefined ? begin : `${begin}; ${postgresLockTimeout(call.lockTimeoutMs)}`;
}

/** The client's transaction status where pg reports it (`I`, `T`, `E`), otherwise `undefined`. */
export function transactionStatus(client: PgClientLike): string | null | undefined {
  return typeof client.getTransactionStatus === 'function' ? client.getTransactionStatus() : undefined;
}
