import { RedisLockService } from '@dlock/redis';
import { createClient } from 'redis';
import type { ConnectedService } from './connected-service.js';
import { CONNECT_MS, within } from './deadline.js';

/** A node-redis client and the adapter on it. Reconnects once it has connected; the first connect must succeed. */
export async function connectRedis(url: string, label: string): Promise<ConnectedService> {
  let connected = false;
  const client = createClient({
    url,
    socket: {
      connectTimeout: CONNECT_MS,
      reconnectStrategy: (retries, cause) => (connected ? Math.min(50 * 2 ** retries, 1_000) : cause),
    },
  });
  client.on('error', () => {}); // every failure also reaches the call that hit it
  await within(client.connect(), CONNECT_MS, `--lock: cannot reach Redis at ${label}`, () =>
    client.destroy(),
  );
  await within(client.ping(), CONNECT_MS, `--lock: Redis at ${label} does not answer`, () =>
    client.destroy(),
  );
  connected = true;
  const service = new RedisLockService({ client });
  return {
    service,
    close: async () => {
      await service.close();
      await client.close().catch(() => client.destroy());
    },
  };
}
