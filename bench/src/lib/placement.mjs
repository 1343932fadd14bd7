/**
 * Where a suite and its server run on the machine's CPUs (`--placement=`), for the single-node Redis suites.
 *
 * On a machine with few cores the scheduler decides, from one moment to the next, whether the bench process and the
 * server share a core or run on two, and a loopback round trip costs 2–3× more across cores than on one (raw
 * ioredis on the 2-core bench machine: 107–117 µs per acquire + release with both pinned to one core, 290–302 µs
 * pinned to two). Left free, a run flips between the two for hundreds of cycles at a time, so subjects measured in
 * the same round meet different costs: the unpinned (A) ratio of @dlock/redis moved between 0.56× and 0.83× from run
 * to run. Pinned, it repeats within a few hundredths.
 *
 *   split   the suite on one CPU, a private redis-server on another: every round trip crosses cores, as it crosses
 *           a network between a service and its Redis (the default, where it can be done)
 *   shared  both on one CPU: the rate is the inverse of client plus server CPU per cycle
 *   free    nothing pinned, and the server at DLOCK_BENCH_REDIS_URL
 *
 * Only a server the bench starts can be pinned: with DLOCK_BENCH_REDIS_URL set, the placement is free.
 */
import { execFileSync } from 'node:child_process';
import os from 'node:os';

export const PLACEMENTS = ['split', 'shared', 'free'];

/** CPUs the runner may use, from its own affinity mask (`taskset -pc`), or undefined where that cannot be read. */
function allowedCpus() {
  if (process.platform !== 'linux') return undefined;
  try {
    const out = execFileSync('taskset', ['-pc', String(process.pid)], {
      encoding: 'utf8',
      stdio: ['ignore', 'pipe', 'ignore'],
      timeout: 5000,
    });
    const list = out.split(':').pop()?.trim() ?? '';
    const cpus = [];
    for (const part of list.split(',')) {
      const [a, b = a] = part.split('-').map(Number);
      for (let cpu = a; cpu <= b; cpu++) cpus.push(cpu);
    }
    return cpus.every(Number.isInteger) && cpus.length > 0 ? cpus : undefined;
  } catch {
    return undefined;
  }
}

/**
 * The placement to use: `wanted` unless the machine cannot do it. Returns { name, clientCpu, serverCpu, why }, where
 * `why` says why a pinned placement fell back to free.
 */
export function choosePlacement(wanted) {
  if (wanted === 'free') return { name: 'free' };
  if (process.env['DLOCK_BENCH_REDIS_URL'] !== undefined) {
    return { name: 'free', why: 'DLOCK_BENCH_REDIS_URL names a server the bench did not start' };
  }
  const cpus = allowedCpus();
  if (cpus === undefined) return { name: 'free', why: '`taskset` is not available' };
  if (wanted === 'split' && cpus.length < 2) {
    return { name: 'free', why: `only ${cpus.length} CPU is allowed (${os.cpus().length} on the machine)` };
  }
  const [clientCpu, other] = cpus;
  return { name: wanted, clientCpu, serverCpu: wanted === 'split' ? other : clientCpu };
}

/** Pins every thread of `pid` to `cpu`. */
export function pin(pid, cpu) {
  execFileSync('taskset', ['-a', '-pc', String(cpu), String(pid)], { stdio: 'ignore', timeout: 5000 });
}

/** One sentence for the report. */
export function describePlacement(placement, server) {
  if (placement.name === 'free') {
    return 'Placement: free (nothing pinned; the scheduler may move the bench and the server between sharing a core and running on two mid-run).';
  }
  const where =
    placement.name === 'split'
      ? `this process on CPU ${placement.clientCpu}, the server on CPU ${placement.serverCpu}`
      : `this process and the server both on CPU ${placement.clientCpu}`;
  return (
    `Placement: ${placement.name} (\`--placement=${placement.name}\`): ${where}, every thread pinned with \`taskset\`; ` +
    `the server is a private \`redis-server\` the bench started for this run (${server}, nothing on disk).`
  );
}

/**
 * Starts a private redis-server (`startRedisServer` from @dlock/test-utils) pinned as `wanted` says. Returns
 * { placement, clientCpu, env, stop }: `env` (DLOCK_BENCH_REDIS_URL and DLOCK_BENCH_PLACEMENT) for the process to
 * pin to `clientCpu`, and `stop`, which stops the server by its pid. Falls back to free, saying why on stderr, where
 * the machine cannot pin or the server does not start; then `env` is empty and `stop` does nothing.
 */
export async function startPinnedRedis(wanted) {
  const placement = choosePlacement(wanted);
  const free = { placement: 'free', clientCpu: undefined, env: {}, stop: async () => {} };
  if (placement.why) process.stderr.write(`[bench] placement: free (${placement.why})\n`);
  if (placement.name === 'free') return free;
  let server;
  try {
    const { startRedisServer } = await import('@dlock/test-utils');
    server = await startRedisServer();
    pin(server.process.pid, placement.serverCpu);
  } catch (error) {
    await server?.process.stop().catch(() => {});
    process.stderr.write(`[bench] placement: free (no private redis-server: ${error.message})\n`);
    return free;
  }
  process.stderr.write(`[bench] placement: ${placement.name}, private redis-server at ${server.url}\n`);
  return {
    placement: placement.name,
    clientCpu: placement.clientCpu,
    env: {
      DLOCK_BENCH_REDIS_URL: server.url,
      DLOCK_BENCH_PLACEMENT: describePlacement(placement, server.url),
    },
    stop: () => server.process.stop(),
  };
}
