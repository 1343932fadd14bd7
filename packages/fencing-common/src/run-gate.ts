import { FenceBusyError, FenceConflictError, StaleFencingTokenError } from './errors.js';
import type { FenceCall, GateDriver, RetryableKind, TransactionDriver } from './gate-driver.js';

/**
 * The gate alone, inside a transaction the caller opened: guard, and when the guard does not say "accepted", read
 * the locked mark and refuse a token below it. Retryable driver errors become {@link FenceConflictError} or
 * {@link FenceBusyError}: here the gate is the one that waited, so a lock-wait timeout is its own.
 *
 * When it throws, the caller must roll back; a stale token leaves the fence row locked until then.
 */
export async function checkGate<Tx>(driver: GateDriver<Tx>, tx: Tx, call: FenceCall): Promise<void> {
  try {
    if ((await driver.guard(tx, call)) !== 'accepted') await judgeByMark(driver, tx, call);
  } catch (error) {
    throw toFencingError(driver.classify(error), error, call.resource, true);
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
  let inGuard = true;
  try {
    return await driver.transaction(db, call, async (tx) => {
      if ((await driver.guard(tx, call)) !== 'accepted') await judgeByMark(driver, tx, call);
      inGuard = false;
      return fn(tx);
    });
  } catch (error) {
    throw toFencingError(driver.classify(error), error, call.resource, inGuard);
  }
}

/**
 * The guard did not say "accepted": the locked mark decides. Kept out of the accepted path, which is every write
 * that should pass, so that path pays for no extra async step.
 */
async function judgeByMark<Tx>(driver: GateDriver<Tx>, tx: Tx, call: FenceCall): Promise<void> {
  const mark = await driver.lockedMark(tx, call);
  if (mark === null) throw new Error(`fence row for "${call.resource}" vanished while locked`);
  // The guard can only raise the mark, so mark >= token here: equal means this write is the one that set it (an
  // insert the statement could not tell apart); greater means another holder got there first.
  if (mark > call.token) throw new StaleFencingTokenError(call.resource, call.token, mark);
}

/** Maps what a retry can cure to the retryable fencing errors; everything else passes through unchanged. */
function toFencingError(kind: RetryableKind, error: unknown, resource: string, inGuard: boolean): unknown {
  if (kind === 'conflict') return new FenceConflictError(resource, error);
  if (kind === 'busy' && inGuard) return new FenceBusyError(resource, error);
  return error;
}
