/**
 * The ioredis section: the raw ioredis floor (the same commands as the node-redis floor), @dlock/redis on an ioredis
 * client, and the peers that only run on ioredis: redlock, @sesamecare-oss/redlock and redis-semaphore's Mutex.
 */
import { Redlock as SesameRedlock } from '@sesamecare-oss/redlock';
import Redlock from 'redlock';
import { packageVersion } from '../../lib/index.mjs';
import { dlockSubject } from '../dlock.mjs';
import { connectIoredis } from '../ioredis.mjs';
import { rawSubject } from '../raw.mjs';
import { redisSemaphoreSubject } from '../redis-semaphore.mjs';
import { redlockSubject } from '../redlock.mjs';
import { runSingleNodeSuite } from '../single-node-suite.mjs';

await runSingleNodeSuite({
  family: 'ioredis',
  peers: ['redlock', '@sesamecare-oss/redlock', 'redis-semaphore Mutex'],
  subjects: (counters) => [
    rawSubject({ family: 'ioredis', ...counters }),
    dlockSubject({
      clientLabel: `ioredis ${packageVersion('ioredis')}`,
      wiring: 'given only `client` (its pub/sub connection is its own duplicate)',
      ...counters,
      async connect() {
        const client = await connectIoredis('@dlock/redis');
        return { options: { client }, close: async () => client.disconnect() };
      },
    }),
    redlockSubject({ pkg: 'redlock', Redlock, ...counters }),
    redlockSubject({ pkg: '@sesamecare-oss/redlock', Redlock: SesameRedlock, ...counters }),
    redisSemaphoreSubject(counters),
  ],
});
