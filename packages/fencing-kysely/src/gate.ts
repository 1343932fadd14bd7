import {
  assertCallback,
  assertResource,
  checkGate,
  type FenceCall,
  type FencingTokenInput,
  InvalidArgumentError,
  rejectUnknownKeys,
  runGate,
  type TransactionDriver,
} from '@dlock/fencing-common';
import type { Kysely, Transaction } from 'kysely';
import { kyselyDriver, readMark, resourceParameter } from './kysely-driver.js';
import {
  assertKysely,
  type CheckFenceOptions,
  FENCING_OPTION_KEYS,
  type FencedOptions,
  type FencingTableOptions,
  parseFenceInput,
  resolveCall,
  resolveGate,
} from './options.js';

function isTransaction<DB>(db: Kysely<DB>): db is Transaction<DB> {
  return db.isTransaction;
}

/**
 * Runs `fn` in a new transaction fenced by `token`: the gate is the transaction's first statement, then `fn(trx)`
 * runs in the same transaction, which commits when `fn` resolves. A stale token, a failed mutation or a failed
 * commit rolls back both the mark and your data. The same verb as `gate.runFenced` in `@dlock/fencing-pg`.
 *
 * `db` is a `Kysely` instance, never a `Transaction`: the call owns the transaction it commits. Inside a
 * transaction of yours, call {@link checkFence} first instead. Run every protected query on `trx`, never on `db`,
 * which may hand out another connection.
 *
 * @example
 * ```ts
 * await runFenced(db, 'orders/42', lock.fencingToken, (trx) =>
 *   trx.updateTable('orders').set({ status: 'shipped' }).where('id', '=', 42).execute(),
 * );
 * ```
 *
 * @throws {StaleFencingTokenError} `token` is below the stored mark; nothing was written.
 * @throws {FenceConflictError} serialization failure or deadlock; retry the whole call (`withFenceRetry`).
 * @throws {FenceBusyError} the fence row stayed locked past the wait bound.
 * @throws {InvalidArgumentError} bad resource, token or options (an unknown key included), or a `Transaction`
 *   as `db`, before any SQL; or, once it answers, a `db` whose `executeQuery` or `transaction()` answers what Kysely
 *   does not (field `db`; what the transaction wrote is rolled back).
 */
export async function runFenced<DB, T>(
  db: Kysely<DB>,
  resource: string,
  token: FencingTokenInput,
  fn: (trx: Transaction<DB>) => Promise<T>,
  options: FencedOptions = {},
): Promise<T> {
  const { driver, call } = prepareRun(db, resource, token, fn, options);
  if (isTransaction(db)) {
    // Kysely cannot open a transaction inside one, and committing it is the caller's to do.
    throw new InvalidArgumentError('db', 'is already a transaction; call checkFence() within it instead');
  }
  return runGate(driver, db, call, fn);
}

/**
 * The gate alone, inside a `Transaction` you opened (a controlled one too): call it before anything else in that
 * transaction and on the same `trx` as the writes; commit or roll back yourself, and roll back when it throws (a
 * stale token leaves the fence row locked until you do). The same verb as `gate.checkFence` in
 * `@dlock/fencing-pg`.
 *
 * @example
 * ```ts
 * await db.transaction().execute(async (trx) => {
 *   await checkFence(trx, 'orders/42', lock.fencingToken);
 *   await trx.updateTable('orders').set({ status: 'shipped' }).where('id', '=', 42).execute();
 * });
 * ```
 *
 * @throws {StaleFencingTokenError} `token` is below the stored mark.
 * @throws {FenceConflictError} serialization failure or deadlock in the gate; retry the whole transaction.
 * @throws {FenceBusyError} the fence row stayed locked past the wait bound.
 * @throws {InvalidArgumentError} bad resource, token or options, `isolationLevel` set, or a `Kysely` instance
 *   that is not a transaction, before any SQL; or, once it answers, a `trx` whose `executeQuery` answers what
 *   Kysely does not (field `trx`; roll back).
 */
export async function checkFence<DB>(
  trx: Transaction<DB>,
  resource: string,
  token: FencingTokenInput,
  options: CheckFenceOptions = {},
): Promise<void> {
  const fence = parseFenceInput(options, resource, token);
  assertKysely(trx, 'trx');
  const { gate, call } = resolveCall(trx, fence, options);
  if (!isTransaction(trx)) {
    // Outside a transaction the mark would commit on its own and fence nothing.
    throw new InvalidArgumentError('trx', 'is not a transaction; open one, or call runFenced() instead');
  }
  refuseIsolationLevel(call);
  await checkGate(kyselyDriver<DB>(gate, 'trx'), trx, call);
}

/**
 * Runs `fn` fenced by `token`. Given a `Kysely` instance it is {@link runFenced}; given a `Transaction` it is
 * {@link checkFence} followed by `fn(trx)` in that transaction, which you commit or roll back.
 *
 * @deprecated Use {@link runFenced} with a `Kysely` instance, or {@link checkFence} inside your own transaction:
 * the verbs both fencing gates share. `fenced` behaves as before and stays until 1.0.
 */
export async function fenced<DB, T>(
  db: Kysely<DB> | Transaction<DB>,
  resource: string,
  token: FencingTokenInput,
  fn: (trx: Transaction<DB>) => Promise<T>,
  options: FencedOptions = {},
): Promise<T> {
  const { driver, call } = prepareRun(db, resource, token, fn, options);
  if (!isTransaction(db)) return runGate(driver, db, call, fn);
  refuseIsolationLevel(call);
  await checkGate(driver, db, call);
  return fn(db);
}

/** The checks of a call that takes a callback, in the order the gate has always made them, before any SQL. */
function prepareRun<DB>(
  db: Kysely<DB>,
  resource: unknown,
  token: unknown,
  fn: unknown,
  options: FencedOptions,
): { driver: TransactionDriver<Kysely<DB>, Transaction<DB>>; call: FenceCall } {
  const fence = parseFenceInput(options, resource, token);
  assertCallback(fn);
  assertKysely(db, 'db');
  const { gate, call } = resolveCall(db, fence, options);
  return { driver: kyselyDriver<DB>(gate), call };
}

function refuseIsolationLevel(call: FenceCall): void {
  if (call.isolationLevel !== undefined) {
    throw new InvalidArgumentError(
      'options.isolationLevel',
      'applies only when the gate opens the transaction (runFenced), not to yours',
    );
  }
}

/**
 * The stored mark for `resource`, or `null` if no token was ever accepted for it. A read, not a fence.
 * `options` may be the same object passed to {@link runFenced}; `isolationLevel` and `lockTimeoutMs` do nothing
 * here.
 *
 * @throws {InvalidArgumentError} bad resource, `db` or options, before any SQL; or a `db` whose `executeQuery`
 *   answers what Kysely does not (field `db`).
 */
export async function highWaterMark<DB>(
  db: Kysely<DB>,
  resource: string,
  options: FencingTableOptions = {},
): Promise<bigint | null> {
  rejectUnknownKeys(options, 'options', FENCING_OPTION_KEYS);
  const checked = assertResource(resource);
  assertKysely(db, 'db');
  const gate = resolveGate(db, options);
  return readMark(db, gate.sql.highWaterMark, resourceParameter(gate.dialect, checked), 'db');
}
