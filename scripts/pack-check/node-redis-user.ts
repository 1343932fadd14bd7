// A node-redis user on the current major (`npm install redis` gives 6): `ioredis` is not installed, and the service
// takes the user's own connected client. Compiled against node-redis' own types by scripts/pack-check.sh.
import { RedisLockService } from '@dlock/redis';
import { createClient } from 'redis';
import { handOff } from './handoff.js';

// From scripts/pack-check.sh: $REDIS_URL, or the local server.
const url = process.argv[2] ?? 'redis://127.0.0.1:6379';

const redis = await createClient({ url }).connect();
try {
  console.log(await handOff('node-redis', new RedisLockService({ client: redis }), (key) => redis.lLen(key)));
} finally {
  await redis.close();
}
