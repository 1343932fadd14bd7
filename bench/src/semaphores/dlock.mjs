/**
 * An @dlock semaphore as an application would use it: `client.semaphore(name, { permits, ttlMs })` on a
 * LockClient with default options, `acquire({ waitMs, signal })`, `permit.release()`. Each worker is its own
 * application instance: a LockClient on a service and connections of its own.
 *
 *   dlockSemaphoreSubject({ key, name, adapter, config, openService, countRequests? }) → subject
 *     openService(adapterModule) → { service, close(), requests?() }   one worker's service and connections;
 *                                                                      `requests()` counts what they sent
 *     countRequests                a whole-process count instead (Redis: the commands written to its sockets)
 */
import { packageVersion } from '../lib/index.mjs';

export function dlockSemaphoreSubject({ key, name, adapter, config, openService, countRequests }) {
  return {
    key,
    name,
    countRequests,
    version: packageVersion(adapter),
    config: `${config}, @dlock/core ${packageVersion('@dlock/core')}; LockClient defaults`,
    async open() {
      const [{ LockClient }, adapterModule] = await Promise.all([import('@dlock/core'), import(adapter)]);
      const { service, close, requests } = await openService(adapterModule);
      const client = new LockClient(service);
      const semaphores = new Map();
      const semaphore = (semName, permits, ttlMs) => {
        let s = semaphores.get(semName);
        if (!s) {
          s = client.semaphore(semName, { permits, ttlMs });
          semaphores.set(semName, s);
        }
        return s;
      };
      return {
        requests,
        async acquire(semName, { permits, ttlMs, waitMs, signal }) {
          let permit;
          try {
            permit = await semaphore(semName, permits, ttlMs).acquire({ waitMs, signal });
          } catch (error) {
            if (error?.code === 'ACQUIRE_TIMEOUT') return null;
            throw error;
          }
          return { slot: permit.slot, token: permit.fencingToken, release: () => permit.release() };
        },
        async close() {
          await client.close();
          await service.close?.();
          await close();
        },
      };
    },
  };
}
