import {
  errorProperty,
  type FenceCall,
  markFromRows,
  rolledBackError,
  type TransactionDriver,
  transactionEndedError,
} from '@dlock/fencing-common';
import { CompiledQuery, type Kysely, type Transaction } from 'kysely';
import type { FencingDialect, FencingDialectSql } from './dialect/dialect.js';

/** The transaction id the first guard in a transaction reported (PostgreSQL), until `runFenced` commits it. */
const guardTransactionIds = new WeakMap<object, string>();

/** Kysely's brand on the error its PostgreSQL driver throws when COMMIT was answered with ROLLBACK (0.29+). */
const KYSELY_ABORTED = Symbol.for('kysely.AbortedTransactionError');

/** A dialect and the statements it built for one table: everything a call needs to speak to the database. */
export interface Gate {
  readonly dialect: FencingDialect;
  readonly sql: FencingDialectSql;
}

/**
 * The gate's steps sent through Kysely, for any dialect: the dialect says what to send and how to read the answer,
 * this says how to send it. The algorithm around the steps lives in `@dlock/fencing-common`.
 */
export function kyselyDriver<DB>(gate: Gate): TransactionDriver<Kysely<DB>, Transaction<DB>> {
  const { dialect, sql } = gate;
  return {
    async guard(trx, call) {
      if (call.lockTimeoutMs !== undefined && dialect.lockTimeout !== undefined) {
        await trx.executeQuery(CompiledQuery.raw(dialect.lockTimeout(call.lockTimeoutMs)));
      }
      const token = call.token.toString();
      const resource = resourceParameter(dialect, call.resource);
      const parameters = sql.guardParameters.map((p) => (p === 'resource' ? resource : token));
      const result = await trx.executeQuery(CompiledQuery.raw(sql.guard, parameters));
      // Only the first guard names the transaction: a callback's own checkFence after COMMIT and BEGIN must not
      // vouch for the new one.
      if (dialect.sameTransaction.kind === 'transaction-id' && !guardTransactionIds.has(trx)) {
        const txid = (result.rows[0] as { txid?: unknown } | undefined)?.txid;
        if (typeof txid === 'string') guardTransactionIds.set(trx, txid);
      }
      return dialect.verdict(result);
    },
    lockedMark: (trx, call) =>
      readMark(trx, sql.lockedHighWaterMark, resourceParameter(dialect, call.resource)),
    classify: (error) => dialect.classify(error),
    transaction(db, call, body) {
      const builder =
        call.isolationLevel === undefined
          ? db.transaction()
          : db.transaction().setIsolationLevel(call.isolationLevel);
      // Kysely commits when `body` resolves and rolls back when it rejects; the gate only makes sure, before that
      // commit, that the transaction is still the one it fenced.
      return builder
        .execute(async (trx) => {
          const check = dialect.sameTransaction;
          if (check.kind === 'savepoint') await trx.executeQuery(CompiledQuery.raw(check.set));
          guardTransactionIds.delete(trx);
          try {
            const value = await body(trx);
            await confirmSameTransaction(dialect, trx, call);
            return value;
          } finally {
            guardTransactionIds.delete(trx);
          }
        })
        .catch((error: unknown) => {
          if (typeof error === 'object' && error !== null && KYSELY_ABORTED in error)
            throw rolledBackError(call.resource, error);
          throw error;
        });
    },
  };
}

/** How a callback can end the fenced transaction through Kysely, for {@link transactionEndedError}. */
const KYSELY_HOW =
  'COMMIT or ROLLBACK on its trx, an implicit commit such as DDL on MySQL, or a deadlock that rolled it back';

/** Throws a `FenceBrokenError` unless `trx` is still in the transaction whose guard passed. */
async function confirmSameTransaction<DB>(
  dialect: FencingDialect,
  trx: Transaction<DB>,
  call: FenceCall,
): Promise<void> {
  const check = dialect.sameTransaction;
  if (check.kind === 'transaction-id') {
    const fenced = guardTransactionIds.get(trx);
    let current: unknown;
    try {
      current = ((await trx.executeQuery(CompiledQuery.raw(check.statement))).rows[0] as { txid?: unknown })
        ?.txid;
    } catch (error) {
      // PostgreSQL refuses every statement in a failed transaction: the callback swallowed a failed statement.
      if (errorProperty(error, 'code') === '25P02') throw rolledBackError(call.resource, error);
      throw error;
    }
    if (fenced !== undefined && current !== fenced) throw transactionEndedError(call.resource, KYSELY_HOW);
    return;
  }
  try {
    await trx.executeQuery(CompiledQuery.raw(check.release));
  } catch (error) {
    if (!check.isMissing(error)) throw error;
    if (check.reopen !== undefined) {
      // Fails harmlessly when the callback already began a transaction again.
      await trx.executeQuery(CompiledQuery.raw(check.reopen)).catch(() => undefined);
    }
    throw transactionEndedError(call.resource, KYSELY_HOW, error);
  }
}

/** What a statement binds for `resource` on `dialect`: the string, or what the dialect sends in its place. */
export function resourceParameter(dialect: FencingDialect, resource: string): unknown {
  return dialect.resourceParameter === undefined ? resource : dialect.resourceParameter(resource);
}

/** Reads a mark as text into a bigint, whatever number type the driver would have used. */
export async function readMark<DB>(db: Kysely<DB>, text: string, resource: unknown): Promise<bigint | null> {
  return markFromRows((await db.executeQuery(CompiledQuery.raw(text, [resource]))).rows);
}
