/**
 * @dlock/redis through @dlock/core's LockClient: what an application would write. Waiting, renewal and release are
 * the library's own (no tuning): the client's renewal scheduler keeps scenario C's locks alive. One factory for
 * every client the adapter may be handed (node-redis, ioredis, either one's cluster client); `connect` opens the
 * connections and says which service options carry them.
 *
 * While the adapter does not accept a kind of client yet, its constructor refuses it with InvalidArgumentError.
 * That subject is then skipped, and said so plainly: the run prints a line and the README keeps it.
 */
import { lockClientSubject, packageVersion } from '../lib/index.mjs';

/**
 * @param {object} o
 * @param {string} o.clientLabel   how the row's configuration names the client, e.g. 'ioredis 5.11.1'
 * @param {string} o.wiring        the service options beyond the client, in words
 * @param {() => Promise<{ options: object, close: () => Promise<void> }>} o.connect
 * @param {string} [o.name]
 */
export function dlockSubject({
  name = '@dlock/redis',
  clientLabel,
  wiring,
  connect,
  countRequests,
  countCommands,
}) {
  let close = async () => {};
  return lockClientSubject({
    adapter: '@dlock/redis',
    name,
    config: `${clientLabel}, @dlock/core ${packageVersion('@dlock/core')}; LockClient defaults, RedisLockService ${wiring}`,
    countRequests,
    countCommands,
    async connect({ RedisLockService }) {
      const connected = await connect();
      close = connected.close;
      try {
        return new RedisLockService({ ...connected.options, keyPrefix: 'dlock-bench:' });
      } catch (error) {
        if (error?.code !== 'INVALID_ARGUMENT') throw error;
        throw new Error(
          `@dlock/redis ${packageVersion('@dlock/redis')} does not accept ${clientLabel} yet ` +
            `(RedisLockService threw InvalidArgumentError: ${error.message})`,
        );
      }
    },
    disconnect: () => close(),
  });
}
