import type { Clock } from '../clock.js';
import { TransportError } from '../errors.js';
import type { AcquireRequest, AcquireResult } from '../service.js';
import type { BackgroundRetries } from './background-retries.js';
import type { QueueDriver, Standing } from './queue-driver.js';

/** Fresh starts per call (a claim lost while queued); more means something keeps interfering. */
const MAX_RESTARTS = 5;

/** What {@link acquireInQueue} needs besides the driver. */
export interface QueueTools {
  /** The service's clock: deadlines and `startedAt` are on its monotonic time. */
  readonly clock: Clock;
  /** Where a claim that could not be removed at once is retried. */
  readonly cleanups: BackgroundRetries;
  /**
   * How long after the call's deadline a leftover claim can still matter (its lease's TTL): the background
   * clean-up gives up after that.
   */
  readonly cleanupHorizonMs: (request: AcquireRequest) => number;
}

/**
 * The one queue algorithm for every queueing backend: enqueue; while someone is ahead, wait for a notice (or the
 * budget) and re-check; leave the queue on deadline, abort or failure. The driver supplies the atomic operations.
 *
 * Guarantees it gives every driver alike:
 * - a caller that gives up (its signal aborts: abort, `close()`, core's bound) never gets a grant: one that was
 *   granted meanwhile is given back by `leave`;
 * - whatever a failed or abandoned call may have left in the queue is removed, at once or in the background;
 * - a claim that vanished while it waited (its lease or session ended) is never reported as held: the attempt
 *   starts over with a new claim; after 5 such losses in one call it rejects with a `TransportError` (never a
 *   refusal: a lost claim says nothing about who holds the lock or its permits).
 */
export async function acquireInQueue<C, W>(
  driver: QueueDriver<C, W>,
  request: AcquireRequest,
  tools: QueueTools,
): Promise<AcquireResult> {
  const { clock } = tools;
  const { signal } = request;
  const startedAt = clock.monotonic();
  const deadline = startedAt + request.waitMs;
  const queue = request.waitMs > 0;
  for (let restart = 0; ; restart++) {
    if (signal.aborted) throw signal.reason;
    const claim = driver.claim(request, { startedAt });
    let standing: Standing<W>;
    try {
      standing = await driver.enqueue(claim, { queue });
      while (standing.kind === 'behind') {
        if (signal.aborted) throw signal.reason;
        const remaining = deadline - clock.monotonic();
        if (remaining <= 0) {
          const hint = standing.holderExpiresInMs;
          const notAcquired: AcquireResult =
            hint === undefined ? { acquired: false } : { acquired: false, holderExpiresInMs: hint };
          if (!driver.giveUp) {
            await leave(driver, claim, request, tools);
            return notAcquired;
          }
          standing = await driver.giveUp(claim);
          if (standing.kind !== 'first') return notAcquired;
          break;
        }
        const noticed = await driver.wait(claim, standing.wait, remaining, signal);
        if (noticed) standing = noticed;
        // A wait that only ran out at the deadline needs no re-read: the deadline branch leaves (or gives up
        // atomically, which catches a last-moment hand-off) without one.
        else if (deadline - clock.monotonic() > 0) standing = await driver.check(claim);
      }
      // Granted, but the caller may have gone meanwhile: then nobody would renew it, so give it back.
      if (standing.kind === 'first' && signal.aborted) throw signal.reason;
    } catch (error) {
      leaveInBackground(driver, claim, request, tools);
      throw error;
    }
    if (standing.kind === 'first') return { acquired: true, grant: standing.grant };
    // Gone: whatever is left of it (nothing, normally) goes in the background; a new claim queues at the back.
    // Past the deadline a restart makes one attempt and leaves: losing a claim is not contention.
    leaveInBackground(driver, claim, request, tools);
    if (restart + 1 >= MAX_RESTARTS) {
      // Not `acquired: false`: that says the lock (or every permit) stayed taken, and nothing here says so; permits
      // may be free. The service kept ending claims (their lease or session), which is its failure to report.
      throw new TransportError(
        `acquire "${request.name}": its claim in the queue vanished ${MAX_RESTARTS} times in a row (a lease or session that keeps ending), so no answer was reached`,
      );
    }
  }
}

async function leave<C, W>(
  driver: QueueDriver<C, W>,
  claim: C,
  request: AcquireRequest,
  tools: QueueTools,
): Promise<void> {
  try {
    await driver.leave(claim);
  } catch {
    leaveInBackground(driver, claim, request, tools);
  }
}

function leaveInBackground<C, W>(
  driver: QueueDriver<C, W>,
  claim: C,
  request: AcquireRequest,
  tools: QueueTools,
): void {
  tools.cleanups.run(() => driver.leave(claim), tools.clock.monotonic() + tools.cleanupHorizonMs(request));
}
