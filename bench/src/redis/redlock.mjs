/**
 * redlock 5 (mike-marcacci) and its fork @sesamecare-oss/redlock, both on one ioredis client. Waits use redlock's
 * own retry loop: the retry count is sized so it keeps trying for the caller's whole wait. Scenario C holds each
 * lock inside `using()`, the library's auto-extension (it extends `automaticExtensionThreshold` before expiry).
 */
import { packageVersion } from '../lib/index.mjs';
import { connectIoredis } from './ioredis.mjs';

export function redlockSubject({
  pkg,
  Redlock,
  countRequests,
  countCommands,
  retryDelayMs = 10,
  retryJitterMs = 5,
}) {
  let client;
  let redlock;
  const settings = { driftFactor: 0.01, retryDelay: retryDelayMs, retryJitter: retryJitterMs };

  return {
    name: pkg,
    version: packageVersion(pkg),
    config: `ioredis ${packageVersion('ioredis')}; retryDelay ${retryDelayMs} ms, retryJitter ${retryJitterMs} ms, retryCount = wait / retryDelay; C: using() auto-extension (threshold 500 ms)`,
    countRequests,
    countCommands,
    async setup() {
      client = await connectIoredis(pkg);
      redlock = new Redlock([client], { ...settings, retryCount: 0, automaticExtensionThreshold: 500 });
      // Errors of automatic extensions surface here; without a listener an EventEmitter 'error' would throw.
      redlock.on('error', () => {});
    },
    async acquire(name, { ttlMs, waitMs }) {
      const retryCount = waitMs > 0 ? Math.ceil(waitMs / retryDelayMs) : 0;
      let lock;
      try {
        lock = await redlock.acquire([name], ttlMs, { ...settings, retryCount });
      } catch (error) {
        // A busy lock is reported as a failed quorum; connection problems would be too, so surface non-busy ones.
        if (error?.name === 'ExecutionError' || /quorum/.test(String(error?.message))) return null;
        throw error;
      }
      return { release: () => lock.release() };
    },
    hold(name, { ttlMs, onLost }) {
      return new Promise((resolveHeld, rejectHeld) => {
        let releaseRoutine;
        const routineDone = new Promise((resolve) => {
          releaseRoutine = resolve;
        });
        const using = redlock.using([name], ttlMs, { ...settings, retryCount: 0 }, async (signal) => {
          signal.addEventListener('abort', onLost, { once: true });
          resolveHeld({
            release: async () => {
              releaseRoutine();
              await using.catch(() => {});
            },
          });
          await routineDone;
        });
        using.catch(rejectHeld);
      });
    },
    async close() {
      client?.disconnect();
    },
  };
}
