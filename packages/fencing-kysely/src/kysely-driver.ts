import { markFromRows, type TransactionDriver } from '@dlock/fencing-common';
import { CompiledQuery, type Kysely, type Transaction } from 'kysely';
import type { FencingDialect, FencingDialectSql } from './dialect/dialect.js';

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
      return dialect.verdict(await trx.executeQuery(CompiledQuery.raw(sql.guard, parameters)));
    },
    lockedMark: (trx, call) =>
      readMark(trx, sql.lockedHighWaterMark, resourceParameter(dialect, call.resource)),
    classify: (error) => dialect.classify(error),
    transaction(db, call, body) {
      const builder =
        call.isolationLevel === undefined
          ? db.transaction()
          : db.transaction().setIsolationLevel(call.isolationLevel);
      // Kysely commits when `body` resolves and rolls back when it rejects; the gate adds nothing to that.
      return builder.execute(body);
    },
  };
}

/** What a statement binds for `resource` on `dialect`: the string, or what the dialect sends in its place. */
export function resourceParameter(dialect: FencingDialect, resource: string): unknown {
  return dialect.resourceParameter === undefined ? resource : dialect.resourceParameter(resource);
}

/** Reads a mark as text into a bigint, whatever number type the driver would have used. */
export async function readMark<DB>(db: Kysely<DB>, text: string, resource: unknown): Promise<bigint | null> {
  return markFromRows((await db.executeQuery(CompiledQuery.raw(text, [resource]))).rows);
}
