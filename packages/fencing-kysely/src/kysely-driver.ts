import {
  errorProperty,
  type FenceCall,
  InvalidArgumentError,
  markFromRows,
  rolledBackError,
  type TransactionDriver,
  transactionEndedError,
} from '@dlock/fencing-common';
import { CompiledQuery, type Kysely, type Transaction } from 'kysely';
import type { FencingDialect, FencingDialectSql } from './dialect/dialect.js';
import { isKyselyLike } from './options.js';

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
export function kyselyDriver<DB>(
  gate: Gate,
  field: 'db' | 'trx' = 'db',
): TransactionDriver<Kysely<DB>, Transaction<DB>> {
  const { dialect, sql } = gate;
  return {
    async guard(trx, call) {
      if (call.lockTimeoutMs !== undefined && dialect.lockTimeout !== undefined) {
        await trx.executeQuery(CompiledQuery.raw(dialect.lockTimeout(call.lockTimeoutMs)));
      }
      const token = call.token.toString();
      const resource = resourceParameter(dialect, call.resource);
      const parameters = sql.guardParameters.map((p) => (p === 'resource' ? resource : token));
      const result = answerOf(
        await trx.executeQuery(CompiledQuery.raw(sql.guard, parameters)),
        field,
        'the guard',
        dialect.guardColumn,
      );
      // Only the first guard names the transaction: a callback's own checkFence after COMMIT and BEGIN must not
      // vouch for the new one.
      if (dialect.sameTransaction.kind === 'transaction-id' && !guardTransactionIds.has(trx)) {
        const txid = result.rows[0]?.txid;
        if (typeof txid === 'string') guardTransactionIds.set(trx, txid);
      }
      return dialect.verdict(result);
    },
    lockedMark: (trx, call) =>
      readMark(trx, sql.lockedHighWaterMark, resourceParameter(dialect, call.resource), field),
    classify: (error) => dialect.classify(error),
    transaction(db, call, body) {
      // What became of the fenced work. A handle that passed the shape check can still answer anything from
      // transaction(): an execute() that resolved without running it, or though it failed (a refused token), would
      // have runFenced resolve as if the fenced work had run.
      let done: { readonly value: Awaited<ReturnType<typeof body>> } | undefined;
      let failure: { readonly error: unknown } | undefined;
      const fenced = async (trx: Transaction<DB>) => {
        if (!isKyselyLike(trx)) {
          throw new InvalidArgumentError(
            field,
            'called back from transaction().execute() without a Transaction',
          );
        }
        const check = dialect.sameTransaction;
        guardTransactionIds.delete(trx);
        try {
          if (check.kind === 'savepoint') await trx.executeQuery(CompiledQuery.raw(check.set));
          const value = await body(trx);
          await confirmSameTransaction(dialect, trx, call, field);
          done = { value };
          return value;
        } catch (error) {
          failure = { error };
          throw error;
        } finally {
          guardTransactionIds.delete(trx);
        }
      };
      let pending: unknown;
      try {
        pending = execute(db.transaction(), call, fenced, field);
      } catch (error) {
        return Promise.reject(error);
      }
      // Kysely commits when `fenced` resolves and rolls back when it rejects; the gate only makes sure, before that
      // commit, that the transaction is still the one it fenced.
      return Promise.resolve(pending).then(
        () => {
          if (done !== undefined) return done.value;
          throw new InvalidArgumentError(
            field,
            failure === undefined
              ? 'answered transaction().execute() without running the fenced work in it'
              : `answered transaction().execute() by resolving though the fenced work failed (${describeError(failure.error)}): it must reject and roll back`,
          );
        },
        (error: unknown) => {
          if (typeof error === 'object' && error !== null && KYSELY_ABORTED in error)
            throw rolledBackError(call.resource, error);
          throw error;
        },
      );
    },
  };
}

/**
 * `builder.execute(fenced)`, with the isolation level `call` asks for; `InvalidArgumentError` (`field`) when what
 * `transaction()` answered has not the methods of Kysely's transaction builder.
 */
function execute<DB>(
  builder: unknown,
  call: FenceCall,
  fenced: (trx: Transaction<DB>) => Promise<unknown>,
  field: string,
): unknown {
  type Builder = {
    setIsolationLevel?: unknown;
    execute?: unknown;
  };
  const junk = (what: string) =>
    new InvalidArgumentError(
      field,
      `answered transaction() with ${what}: it must be Kysely's transaction builder`,
    );
  if (typeof builder !== 'object' || builder === null) throw junk(builder === null ? 'null' : typeof builder);
  let set = builder as Builder;
  if (call.isolationLevel !== undefined) {
    if (typeof set.setIsolationLevel !== 'function') throw junk('no setIsolationLevel()');
    const configured: unknown = (set.setIsolationLevel as (level: string) => unknown).call(
      set,
      call.isolationLevel,
    );
    if (typeof configured !== 'object' || configured === null)
      throw junk('a setIsolationLevel() that answered junk');
    set = configured as Builder;
  }
  if (typeof set.execute !== 'function') throw junk('no execute()');
  return (set.execute as (callback: typeof fenced) => unknown).call(set, fenced);
}

/** A short text of what the fenced work failed with, for the error that says a handle resolved all the same. */
function describeError(error: unknown): string {
  const text = error instanceof Error ? `${error.name}: ${error.message}` : String(error);
  return text.length > 200 ? `${text.slice(0, 200)}…` : text;
}

/** How a callback can end the fenced transaction through Kysely, for {@link transactionEndedError}. */
const KYSELY_HOW =
  'COMMIT or ROLLBACK on its trx, an implicit commit such as DDL on MySQL, or a deadlock that rolled it back';

/** Throws a `FenceBrokenError` unless `trx` is still in the transaction whose guard passed. */
async function confirmSameTransaction<DB>(
  dialect: FencingDialect,
  trx: Transaction<DB>,
  call: FenceCall,
  field: string,
): Promise<void> {
  const check = dialect.sameTransaction;
  if (check.kind === 'transaction-id') {
    const fenced = guardTransactionIds.get(trx);
    let answer: unknown;
    try {
      answer = await trx.executeQuery(CompiledQuery.raw(check.statement));
    } catch (error) {
      // PostgreSQL refuses every statement in a failed transaction: the callback swallowed a failed statement.
      if (errorProperty(error, 'code') === '25P02') throw rolledBackError(call.resource, error);
      throw error;
    }
    // A missing id is a junk answer, never taken for another transaction: that would tell the caller it ended it.
    const current = answerOf(answer, field, 'the transaction id', 'txid', true).rows[0]?.txid;
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
export async function readMark<DB>(
  db: Kysely<DB>,
  text: string,
  resource: unknown,
  field: string,
): Promise<bigint | null> {
  const { rows } = answerOf(
    await db.executeQuery(CompiledQuery.raw(text, [resource])),
    field,
    'the mark',
    'last_token',
  );
  return markFromRows(rows);
}

/** A statement's answer as the gate reads it: a copy, so nothing is read from the handle's answer twice. */
interface Answer {
  readonly rows: readonly AnswerRow[];
  readonly numAffectedRows?: bigint;
}

/** A row as copied: only the column the statement returns (none for MySQL's guard, which counts rows). */
type AnswerRow = { readonly [column in 'txid' | 'accepted' | 'last_token']?: unknown };

/**
 * The columns the gate's statements cast to text, each a decimal number (a mark, PostgreSQL's transaction id). A
 * plugin that turns numeric text into numbers answers junk here: a transaction id that is not text was never
 * recorded, so the same-transaction check was skipped, or compared unequal and blamed the callback for ending it.
 */
const DECIMAL_COLUMNS: ReadonlySet<string> = new Set(['txid', 'last_token']);

/**
 * `result` checked to be Kysely's `QueryResult`: an object with an array of at most one row object (`exactlyOne`:
 * exactly one), each holding `column` when one is named, as decimal text for a column cast to text and as any
 * value but null otherwise. A handle that passed the shape check can still answer anything (a plugin's
 * `transformResult`, a hand-made executor); read as it is, junk failed with a raw TypeError, or counted as an
 * accepted row. It is the caller's handle that is wrong, so the error names it; inside the fenced transaction it
 * rolls that back. What the gate reads is copied here, once: a getter or a Proxy's trap that throws is junk too.
 */
function answerOf(
  result: unknown,
  field: string,
  statement: string,
  column?: string,
  exactlyOne = false,
): Answer {
  let answer: Answer | string;
  try {
    answer = copyOf(result, column, exactlyOne);
  } catch {
    answer = 'an answer that threw when read';
  }
  if (typeof answer === 'string') {
    throw new InvalidArgumentError(
      field,
      `answered ${statement} with ${answer}: its executeQuery() must resolve to a Kysely QueryResult ({ rows: [...] }) from the database`,
    );
  }
  return answer;
}

/** The parts of `result` the gate reads, copied; or what is wrong with it. */
function copyOf(result: unknown, column: string | undefined, exactlyOne: boolean): Answer | string {
  if (result === null) return 'null';
  if (typeof result !== 'object') return typeof result;
  const { rows, numAffectedRows } = result as { rows?: unknown; numAffectedRows?: unknown };
  if (!Array.isArray(rows)) return 'an object without a rows array';
  const listed: unknown[] = Array.from(rows);
  if (listed.length > 1 || (exactlyOne && listed.length === 0)) {
    return `${listed.length} rows (${exactlyOne ? 'exactly' : 'at most'} one expected)`;
  }
  const copied: AnswerRow[] = [];
  for (const row of listed) {
    if (typeof row !== 'object' || row === null) return 'rows that are not row objects';
    if (column === undefined) {
      copied.push({});
      continue;
    }
    if (!(column in row)) return `a row without its ${column} column`;
    const value: unknown = (row as Record<string, unknown>)[column];
    const sound = DECIMAL_COLUMNS.has(column)
      ? typeof value === 'string' && /^[0-9]{1,19}$/.test(value)
      : value !== undefined && value !== null;
    if (!sound) {
      const got =
        value === null ? 'null' : typeof value === 'string' ? 'text that is not a number' : typeof value;
      return `a row whose ${column} is ${got}${DECIMAL_COLUMNS.has(column) ? ' (decimal text expected)' : ''}`;
    }
    copied.push({ [column]: value });
  }
  return typeof numAffectedRows === 'bigint' ? { rows: copied, numAffectedRows } : { rows: copied };
}
