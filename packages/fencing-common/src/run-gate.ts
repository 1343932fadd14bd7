import {
  FenceBrokenError,
  FenceBusyError,
  FenceConflictError,
  InvalidArgumentError,
  isDLockError,
  StaleFencingTokenError,
} from './errors.js';
import type { FenceCall, GateDriver, RetryableKind, TransactionDriver } from './gate-driver.js';
import { rejectUnknownKeys } from './option-keys.js';
import { parseIsolationLevel, parseLockTimeoutMs } from './transaction-settings.js';
import { assertCallback, assertResource, describeValue, parseFencingToken } from './validate.js';

/**
 * The gate alone, inside a transaction the caller opened: guard, and when the guard does not say "accepted", read
 * the locked mark and refuse a token below it. Retryable driver errors become {@link FenceConflictError} or
 * {@link FenceBusyError}: here the gate is the one that waited, so a lock-wait timeout is its own.
 *
 * When it throws, the caller must roll back; a stale token leaves the fence row locked until then.
 */
export async function checkGate<Tx>(driver: GateDriver<Tx>, tx: Tx, call: FenceCall): Promise<void> {
  assertDriver(driver, false);
  assertFenceCall(call);
  try {
    if ((await driver.guard(tx, call)) !== 'accepted') await judgeByMark(driver, tx, call);
  } catch (error) {
    throw toFencingError(classify(driver, error), error, call.resource, true);
  }
}

/**
 * The whole fenced write: the driver opens a transaction, the gate passes as its first step, then `fn` runs in the
 * same transaction and the driver commits. Any failure rolls everything back, the mark included.
 *
 * A conflict aborts the whole transaction wherever it happens, so it is mapped from `fn` and the commit too; a
 * lock-wait timeout is reported as {@link FenceBusyError} only when the gate was the one waiting, and otherwise
 * passes through as the driver's own error.
 */
export async function runGate<Db, Tx, T>(
  driver: TransactionDriver<Db, Tx>,
  db: Db,
  call: FenceCall,
  fn: (tx: Tx) => Promise<T>,
): Promise<T> {
  assertDriver(driver, true);
  assertFenceCall(call);
  assertCallback(fn);
  let inGuard = true;
  try {
    return await driver.transaction(db, call, async (tx) => {
      if ((await driver.guard(tx, call)) !== 'accepted') await judgeByMark(driver, tx, call);
      inGuard = false;
      return fn(tx);
    });
  } catch (error) {
    throw toFencingError(classify(driver, error), error, call.resource, inGuard);
  }
}

/**
 * The guard did not say "accepted": the locked mark decides. Kept out of the accepted path, which is every write
 * that should pass, so that path pays for no extra async step.
 */
async function judgeByMark<Tx>(driver: GateDriver<Tx>, tx: Tx, call: FenceCall): Promise<void> {
  const mark: unknown = await driver.lockedMark(tx, call);
  if (typeof mark !== 'bigint' && mark !== null) {
    // `undefined > token` is false: compared as it is, a missing mark would admit a stale write.
    throw new InvalidArgumentError(
      'driver.lockedMark',
      `must resolve to a bigint or null (got ${describeValue(mark)})`,
    );
  }
  if (mark === null) {
    throw new FenceBrokenError(
      call.resource,
      'row-vanished',
      `fence row for "${call.resource}" vanished while locked: the gate cannot judge token ${call.token}, so it ` +
        'refuses the write (was the fence table altered or replaced?)',
    );
  }
  // The guard can only raise the mark, so mark >= token here: equal means this write is the one that set it (an
  // insert the statement could not tell apart); greater means another holder got there first.
  if (mark > call.token) throw new StaleFencingTokenError(call.resource, call.token, mark);
}

/**
 * The driver's reading of `error`. `classify` must not throw; one that does would replace the error the caller needs
 * (a failed statement, a stale token) with its own, so the error is then taken as not retryable.
 */
function classify<Tx>(driver: GateDriver<Tx>, error: unknown): RetryableKind {
  try {
    return driver.classify(error);
  } catch {
    return undefined;
  }
}

/** Maps what a retry can cure to the retryable fencing errors; everything else passes through unchanged. */
function toFencingError(kind: RetryableKind, error: unknown, resource: string, inGuard: boolean): unknown {
  // The gate's own verdicts (stale, broken) are final; a driver's classify must not rename them.
  if (isDLockError(error)) return error;
  if (kind === 'conflict') return new FenceConflictError(resource, error);
  if (kind === 'busy' && inGuard) return new FenceBusyError(resource, error);
  return error;
}

const CALL_KEYS: readonly string[] = ['resource', 'token', 'isolationLevel', 'lockTimeoutMs'];
const DRIVER_STEPS = ['guard', 'lockedMark', 'classify'] as const;

/** A driver with every step the algorithm calls, checked before any of them runs. */
function assertDriver(driver: unknown, withTransaction: boolean): void {
  if (typeof driver !== 'object' || driver === null) {
    throw new InvalidArgumentError('driver', 'must be a gate driver object');
  }
  const steps = driver as Partial<Record<(typeof DRIVER_STEPS)[number] | 'transaction', unknown>>;
  for (const step of DRIVER_STEPS) {
    if (typeof steps[step] !== 'function')
      throw new InvalidArgumentError(`driver.${step}`, 'must be a function');
  }
  if (withTransaction && typeof steps.transaction !== 'function') {
    throw new InvalidArgumentError('driver.transaction', 'must be a function');
  }
}

/**
 * The gates build `call` from checked input; checking it again here keeps a hand-written gate from sending a
 * malformed fence (a number token, an unchecked name) to the database.
 */
function assertFenceCall(call: unknown): asserts call is FenceCall {
  if (typeof call !== 'object' || call === null || Array.isArray(call)) {
    throw new InvalidArgumentError('call', 'must be a FenceCall object (see parseFence)');
  }
  rejectUnknownKeys(call, 'call', CALL_KEYS);
  const fields = call as Partial<Record<keyof FenceCall, unknown>>;
  assertResource(fields.resource, 'call.resource');
  if (typeof fields.token !== 'bigint') throw new InvalidArgumentError('call.token', 'must be a bigint');
  parseFencingToken(fields.token, 'call.token');
  parseIsolationLevel(fields.isolationLevel, 'call.isolationLevel');
  parseLockTimeoutMs(fields.lockTimeoutMs, 'call.lockTimeoutMs');
}
