// The scenario each Redis client user of scripts/pack-check.sh runs, copied next to that user's program: one
// RedisLockService and one LockClient on the user's own client; a second acquire queues in Redis behind the first
// and is handed the lock by the first one's release, with a higher fencing token. Everything it opens it closes, so
// that the process can end by itself.
import { LockClient } from '@dlock/core';
import { DEFAULT_KEY_PREFIX, lockKeys, type RedisLockService } from '@dlock/redis';

const TTL_MS = 10_000;
const WAIT_MS = 5_000;

/** `queueLength` is LLEN through the user's client: it shows the second caller waiting in Redis, not in-process. */
export async function handOff(
  label: string,
  service: RedisLockService,
  queueLength: (key: string) => Promise<number>,
): Promise<string> {
  const locks = new LockClient(service);
  try {
    const name = `pack-check ${label} ${process.pid} {é}`;
    const first = await locks.acquire(name, { ttlMs: TTL_MS });
    const second = locks.acquire(name, { ttlMs: TTL_MS, waitMs: WAIT_MS });
    // Observed here so that a rejection while the first is still held surfaces at `await second`, not as an
    // unhandled rejection.
    second.catch(() => undefined);
    const queue = lockKeys(DEFAULT_KEY_PREFIX, name).queue;
    const queuedBy = performance.now() + WAIT_MS;
    while ((await queueLength(queue)) === 0) {
      if (performance.now() > queuedBy) throw new Error(`${label}: the second acquire never queued in Redis`);
      await new Promise((resolve) => setTimeout(resolve, 10));
    }
    const releasedAt = performance.now();
    await first.release();
    const next = await second;
    const afterMs = Math.round(performance.now() - releasedAt);
    if (next.fencingToken <= first.fencingToken) {
      throw new Error(`${label}: token ${next.fencingToken} after ${first.fencingToken} did not increase`);
    }
    // A waiter that missed the hand-off message would only look again when the first lease would have ended.
    if (afterMs > TTL_MS / 4)
      throw new Error(`${label}: the queued acquire took ${afterMs} ms after the release`);
    await next.release();
    return `hand-off ok: ${label}, the queued acquire got the lock ${afterMs} ms after the release, fencing token ${first.fencingToken} -> ${next.fencingToken}`;
  } finally {
    await locks.close();
    await service.close();
  }
}
