/** A connected ioredis client for the peer libraries, with bounded connect and no endless reconnects. */
import { Redis } from 'ioredis';
import { REDIS_URL } from './server.mjs';

export async function connectIoredis(name) {
  const client = new Redis(REDIS_URL, {
    lazyConnect: true,
    connectTimeout: 5000,
    maxRetriesPerRequest: 1,
    retryStrategy: () => null,
  });
  let reported = false;
  client.on('error', (error) => {
    if (!reported) process.stderr.write(`[redis] ${name}: ${error.message}\n`);
    reported = true;
  });
  await client.connect();
  return client;
}
