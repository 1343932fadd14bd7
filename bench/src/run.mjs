/**
 * Runs the backend suites one after the other, each in its own child process, so one backend's clients, timers
 * and heap never colour another's figures:
 *
 *   node src/run.mjs [redis] [etcd] [zookeeper] [postgres] [--quick] [--no-readme] [--provisional] [--scenarios=A,B,C]
 *
 * With no backend named: every backend whose suites exist and whose server accepts a connection (addresses from
 * lib/env.mjs). A named backend that cannot run is an error. Flags go to every suite. A backend may have several
 * suites (Redis: one per client, and the cluster; every backend: its elections and its semaphores), each its own
 * child process; `redis:ioredis` or `etcd:elections` runs one of them.
 * Each suite has a hard time cap; this runner kills a child that outlives it by its pid.
 *
 * The single-node Redis suites run pinned (`--placement`, lib/placement.mjs): the runner starts a private
 * redis-server for them, pins it and the suite's process to CPUs, and stops it by its pid when they are done.
 */
import { spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import net from 'node:net';
import { fileURLToPath } from 'node:url';
import { ENDPOINTS } from './lib/env.mjs';
import { PLACEMENTS, startPinnedRedis } from './lib/placement.mjs';

const CHILD_CAP_MS = 20 * 60_000;

/** host:port of each backend's server, from the same settings the suites use. */
const servers = {
  redis: hostPort(new URL(ENDPOINTS.redis), 6379),
  etcd: hostPort(new URL(ENDPOINTS.etcd), 2379),
  zookeeper: hostPort(new URL(`zk://${ENDPOINTS.zookeeper.split(',')[0]}`), 2181),
  postgres: hostPort(new URL(ENDPOINTS.postgres), 5432),
};

function hostPort(url, defaultPort) {
  return { host: url.hostname.replace(/^\[|\]$/g, ''), port: Number(url.port || defaultPort) };
}

function answers({ host, port }) {
  return new Promise((resolve) => {
    const socket = net.connect({ host, port });
    const done = (ok) => {
      socket.destroy();
      resolve(ok);
    };
    socket.setTimeout(1000, () => done(false));
    socket.once('connect', () => done(true));
    socket.once('error', () => done(false));
  });
}

/** Suites that run pinned, against the runner's private redis-server, unless the placement is free. */
const PINNED = new Set(['redis:node-redis', 'redis:ioredis']);

/** Each backend's suites, in running order: name → file under src/. */
const SUITES = {
  redis: {
    'node-redis': 'redis/suites/node-redis.mjs',
    ioredis: 'redis/suites/ioredis.mjs',
    cluster: 'redis/suites/cluster.mjs',
    elections: 'elections/redis.mjs',
    semaphores: 'semaphores/redis.mjs',
  },
  etcd: { etcd: 'etcd/index.mjs', elections: 'elections/etcd.mjs', semaphores: 'semaphores/etcd.mjs' },
  zookeeper: {
    zookeeper: 'zookeeper/index.mjs',
    elections: 'elections/zookeeper.mjs',
    semaphores: 'semaphores/zookeeper.mjs',
  },
  postgres: { postgres: 'postgres/index.mjs' },
};

const suiteFile = (file) => fileURLToPath(new URL(`./${file}`, import.meta.url));

/** `pinned`: { cpu, env } to run the child on one CPU with extra environment (see `privateRedis`). */
function runChild(backend, file, flags, pinned) {
  return new Promise((resolve) => {
    const node = [process.execPath, suiteFile(file), ...flags];
    const [command, ...argv] = pinned ? ['taskset', '-c', String(pinned.cpu), ...node] : node;
    const child = spawn(command, argv, {
      cwd: fileURLToPath(new URL('..', import.meta.url)),
      stdio: 'inherit',
      env: pinned ? { ...process.env, ...pinned.env } : process.env,
    });
    const cap = setTimeout(() => {
      process.stderr.write(
        `[bench] ${backend}: still running after ${CHILD_CAP_MS / 60_000} min, killing it\n`,
      );
      child.kill('SIGKILL');
    }, CHILD_CAP_MS);
    child.once('exit', (code, signal) => {
      clearTimeout(cap);
      resolve(code ?? (signal ? 1 : 0));
    });
    child.once('error', (error) => {
      clearTimeout(cap);
      process.stderr.write(`[bench] ${backend}: ${error.message}\n`);
      resolve(1);
    });
  });
}

const USAGE = `usage: node src/run.mjs [backend|backend:suite ...] [--quick] [--no-readme|--readme] [--provisional]
                        [--scenarios=A,B,C] [--json=FILE] [--warmup=N] [--placement=split|shared|free]
  backends: ${Object.keys(SUITES).join(', ')} (none named: every backend whose server answers)
  --quick        reduced sizes; not comparable with full runs, and leaves README.md alone
  --no-readme    leave README.md and results/ as they are (--readme: write them even with --quick)
  --provisional  mark the figures as taken on a busy machine
  --scenarios=   run only these scenarios (letters A, B, C)
  --json=FILE    also write each suite's results to FILE
  --warmup=N     warm-up iterations per subject before (A) (default 200, and 2000 in the single-node Redis
                 suites: the JIT's steady state)
  --placement=   where the single-node Redis suites and a private redis-server run: split (default: on two CPUs),
                 shared (one CPU), free (nothing pinned, the server at DLOCK_BENCH_REDIS_URL)
`;

// pnpm 12 passes the `--` of `pnpm --filter @dlock/bench bench -- redis` on to the script: it separates nothing here.
const args = process.argv.slice(2).filter((a) => a !== '--');
if (args.includes('--help') || args.includes('-h')) {
  process.stdout.write(USAGE);
  process.exit(0);
}
const placementFlag = args.find((a) => a.startsWith('--placement='));
const flags = args.filter((a) => a.startsWith('-') && a !== placementFlag);
const named = args.filter((a) => !a.startsWith('-'));
// An unknown flag would reach the suites, which ignore it: a typo must not start a 20-minute run that means
// something else.
const FLAG = /^--(quick|no-readme|readme|provisional|scenarios=[ABC,]+|json=.+|warmup=\d+)$/i;
const badFlag = [...flags, ...(placementFlag ? [placementFlag] : [])].find((flag) =>
  flag === placementFlag ? !PLACEMENTS.includes(flag.slice('--placement='.length)) : !FLAG.test(flag),
);
if (badFlag !== undefined) {
  process.stderr.write(`[bench] unknown flag "${badFlag}"\n${USAGE}`);
  process.exit(2);
}
const known = Object.entries(SUITES).flatMap(([b, suites]) => [
  b,
  ...Object.keys(suites)
    .filter((k) => k !== b)
    .map((k) => `${b}:${k}`),
]);
for (const name of named) {
  if (!known.includes(name)) {
    process.stderr.write(`[bench] unknown backend "${name}"; known: ${known.join(', ')}\n`);
    process.exit(2);
  }
}

/** [backend, suite name, file] for every suite asked for, in the order of SUITES. */
const wanted = Object.entries(SUITES).flatMap(([backend, suites]) =>
  Object.entries(suites)
    .filter(([suite]) => !named.length || named.includes(backend) || named.includes(`${backend}:${suite}`))
    .map(([suite, file]) => [backend, suite, file]),
);

/** The private redis-server of the pinned suites, started on first use (see lib/placement.mjs). */
let redis;
async function privateRedis() {
  redis ??= await startPinnedRedis(placementFlag?.slice('--placement='.length) ?? 'split');
  return redis.clientCpu === undefined ? undefined : { cpu: redis.clientCpu, env: redis.env };
}

let failed = 0;
for (const [backend, suite, file] of wanted) {
  const label = suite === backend ? backend : `${backend}:${suite}`;
  const pinned = PINNED.has(`${backend}:${suite}`) ? await privateRedis() : undefined;
  const { host, port } = servers[backend];
  const why = !existsSync(suiteFile(file))
    ? 'no suite yet'
    : !pinned && !(await answers(servers[backend]))
      ? `no server answers at ${host}:${port}`
      : undefined;
  if (why) {
    process.stderr.write(`[bench] ${label}: skipped (${why})\n`);
    if (named.length) failed += 1;
    continue;
  }
  process.stderr.write(`[bench] ${label}: starting\n`);
  const code = await runChild(label, file, flags, pinned);
  if (code !== 0) {
    process.stderr.write(`[bench] ${label}: exited with ${code}\n`);
    failed += 1;
  }
}
await redis?.stop();
process.exit(failed ? 1 : 0);
