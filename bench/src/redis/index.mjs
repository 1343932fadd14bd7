/**
 * The Redis suite: a raw node-redis floor, @dlock/redis, redlock, @sesamecare-oss/redlock and redis-semaphore's
 * Mutex, side by side against one Redis server (DLOCK_BENCH_REDIS_URL, default redis://127.0.0.1:6379).
 * Run through `node src/run.mjs redis` (or `pnpm bench`); flags are described in ../lib/suite.mjs.
 */
import { Redlock as SesameRedlock } from '@sesamecare-oss/redlock';
import Redlock from 'redlock';
import { fmt, runSuite, sleep } from '../lib/index.mjs';
import { dlockSubject } from './dlock.mjs';
import { rawSubject } from './raw.mjs';
import { redisSemaphoreSubject } from './redis-semaphore.mjs';
import { redlockSubject } from './redlock.mjs';
import { openServerProbe, REDIS_URL } from './server.mjs';

const probe = await openServerProbe();
const counters = { countRequests: probe.countRequests, countCommands: probe.countCommands };

// `INFO commandstats` is server-wide: say how much of it other clients contribute while the bench is idle.
const idle0 = await probe.countCommands();
await sleep(1000);
const idle1 = await probe.countCommands();
const background = idle1 >= idle0 ? idle1 - idle0 : Number.NaN;

await runSuite({
  backend: 'redis',
  title: 'Redis',
  server: { name: 'Redis', version: probe.version, address: REDIS_URL },
  subjects: [
    rawSubject(counters),
    dlockSubject(counters),
    redlockSubject({ pkg: 'redlock', Redlock, ...counters }),
    redlockSubject({ pkg: '@sesamecare-oss/redlock', Redlock: SesameRedlock, ...counters }),
    redisSemaphoreSubject(counters),
  ],
  uncontended: { iterations: 3000, rounds: 10 },
  contended: { workers: [8, 64], holdMs: 2, durationMs: 5000 },
  held: { locks: 1000, ttlMs: 3000, durationMs: 10_000 },
  notes: [
    '*requests*: commands this process sent (counted on its sockets; a pipelined command counts, a Lua script ' +
      'is one). *server commands*: `INFO commandstats` deltas, which also count the commands scripts run ' +
      'inside Redis and every other client of the server. *client CPU*: `process.cpuUsage()` of the bench process.',
    Number.isNaN(background)
      ? 'The server’s command counters were reset during the idle probe before the run: *server commands* may be missing.'
      : `Other clients ran ${fmt(background)} commands/s on the server in a 1 s idle probe before the run` +
        (background > 20 ? ': the *server commands* columns include theirs, read *requests* instead.' : '.'),
  ],
  onClose: () => probe.close(),
});
