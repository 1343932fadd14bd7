/**
 * What the node-redis and ioredis suites share: one Redis server (DLOCK_BENCH_REDIS_URL), one probe counting
 * requests and server commands for every subject, an idle check of the server before the run, and the goals
 * @dlock/redis is judged against. Each suite runs in its own process (see ../run.mjs) and writes its own README
 * section, so the two clients' figures never share a heap or an event loop.
 */
import { fmt, runSuite, sleep } from '../lib/index.mjs';
import { describePlacement } from '../lib/placement.mjs';
import { openServerProbe, REDIS_URL } from './server.mjs';
import { singleNodeTargets } from './targets.mjs';

/**
 * @param {object} o
 * @param {string} o.family                    'node-redis' | 'ioredis': README section `redis-<family>`
 * @param {(counters: object) => object[]} o.subjects   the raw baseline of that client first
 * @param {string[]} [o.peers]                 names of peer rows @dlock/redis must be ahead of in (A)
 * @param {string[]} [o.notes]
 */
export async function runSingleNodeSuite({ family, subjects, peers = [], notes = [] }) {
  const probe = await openServerProbe();
  const counters = { countRequests: probe.countRequests, countCommands: probe.countCommands };

  // `INFO commandstats` is server-wide: say how much of it other clients contribute while the bench is idle,
  // before the run and again after it (a burst from elsewhere in between would otherwise go unremarked).
  const idleRate = async () => {
    const c0 = await probe.countCommands();
    await sleep(1000);
    const c1 = await probe.countCommands();
    return c1 >= c0 ? c1 - c0 : Number.NaN;
  };
  const before = await idleRate();
  let after = Number.NaN;
  if (before > 20) {
    process.stderr.write(`[redis-${family}] other clients run ${fmt(before)} commands/s on the server\n`);
  }
  const backgroundNote = () => {
    const busy = before > 20 || after > 20;
    return (
      `Other clients ran ${fmt(before)} commands/s on the server in a 1 s idle probe before the run and ` +
      `${fmt(after)} in one after it` +
      (busy ? ': the *server commands* columns include theirs, read *requests* instead.' : '.') +
      (Number.isNaN(before) || Number.isNaN(after) ? ' (— : the counters were reset during the probe.)' : '')
    );
  };

  await runSuite({
    backend: `redis-${family}`,
    title: `Redis on ${family}`,
    server: { name: 'Redis', version: probe.version, address: REDIS_URL },
    subjects: subjects(counters),
    // Measured at the JIT's steady state: with the default 200 warm-up cycles, the longer code paths are still being
    // compiled in the measured rounds, and the figure moved by ±0.04× from run to run (see README, Placement).
    uncontended: { iterations: 3000, rounds: 10, warmup: 2000 },
    contended: { workers: [8, 64], holdMs: 2, durationMs: 5000 },
    held: { locks: 1000, ttlMs: 3000, durationMs: 10_000 },
    targets: singleNodeTargets({ dlock: '@dlock/redis', family, peers }),
    notes: [
      '*requests*: commands this process sent (counted on its sockets; a pipelined command counts, a Lua script ' +
        'is one). *server commands*: `INFO commandstats` deltas, which also count the commands scripts run ' +
        'inside Redis and every other client of the server. *client CPU*: `process.cpuUsage()` of the bench process.',
      ...notes,
      // The runner says where it pinned this process and its server; run on its own, a suite is not pinned.
      process.env['DLOCK_BENCH_PLACEMENT'] ?? describePlacement({ name: 'free' }),
      backgroundNote,
    ],
    onClose: async () => {
      after = await idleRate();
      await probe.close();
    },
  });
}
