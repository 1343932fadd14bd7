/**
 * A subject that takes its locks through @dlock/core's LockClient over an @dlock adapter, as an application would:
 * waiting, renewal (scenario C) and release are the library's own, untuned. The backend's dlock.mjs supplies what
 * is its own (connecting, counters, wrappers around acquire) and passes every other Subject member through.
 */
import { packageVersion } from './env.mjs';

/**
 * @param {object} o
 * @param {string} o.adapter            the adapter package, imported at setup so that the other subjects still run
 *                                      while it is not built
 * @param {(adapter: object) => Promise<object>} o.connect   connects and returns the adapter's LockService
 * @param {() => Promise<void> | void} [o.disconnect]        closes what connect opened, after the service closed
 *                                      (also after a setup that failed half-way)
 * @returns {import('./subject.mjs').Subject} with `version` defaulting to the adapter's
 */
export function lockClientSubject({ adapter, connect, disconnect = () => {}, ...members }) {
  let service;
  let lockClient;
  return {
    version: packageVersion(adapter),
    ...members,
    async setup() {
      const [{ LockClient }, adapterModule] = await Promise.all([import('@dlock/core'), import(adapter)]);
      service = await connect(adapterModule);
      lockClient = new LockClient(service);
    },
    async acquire(name, { ttlMs, waitMs, signal }) {
      try {
        return await lockClient.tryAcquire(name, signal ? { ttlMs, waitMs, signal } : { ttlMs, waitMs });
      } catch (error) {
        if (signal?.aborted) return null;
        throw error;
      }
    },
    hold(name, { ttlMs, onLost }) {
      return lockClient.acquire(name, { ttlMs, onLost: () => onLost() });
    },
    async close() {
      await lockClient?.close();
      await service?.close?.();
      await disconnect();
    },
  };
}
