// An ioredis user (as with BullMQ): `redis` is not installed, and the service takes the user's own ioredis client,
// unconnected yet as `new Redis(url)` leaves it. Compiled against ioredis' own types by scripts/pack-check.sh.
import { RedisLockService } from '@dlock/redis';
import { Redis } from 'ioredis';
import { handOff } from './handoff.js';

// From scripts/pack-check.sh: $REDIS_URL, or the local server.
const url = process.argv[2] ?? 'redis://127.0.0.1:6379';

const redis = new Redis(url);
try {
  console.log(await handOff('ioredis', new RedisLockService({ client: redis }), (key) => redis.llen(key)));
} finally {
  await redis.quit();
}
