/** The node-redis section: the raw node-redis floor and @dlock/redis on node-redis (`createClient`). */
import { packageVersion } from '../../lib/index.mjs';
import { dlockSubject } from '../dlock.mjs';
import { rawSubject } from '../raw.mjs';
import { connectNodeRedis } from '../server.mjs';
import { runSingleNodeSuite } from '../single-node-suite.mjs';

await runSingleNodeSuite({
  family: 'node-redis',
  subjects: (counters) => [
    rawSubject({ family: 'node-redis', ...counters }),
    dlockSubject({
      clientLabel: `redis ${packageVersion('redis')}`,
      wiring: 'with its own subscriber connection',
      ...counters,
      async connect() {
        const opened = [];
        const close = async () => {
          for (const c of opened) await c.close().catch(() => {});
        };
        try {
          opened.push(await connectNodeRedis('@dlock/redis'));
          opened.push(await connectNodeRedis('@dlock/redis subscriber'));
        } catch (error) {
          await close();
          throw error;
        }
        return { options: { client: opened[0], subscriber: opened[1] }, close };
      },
    }),
  ],
});
