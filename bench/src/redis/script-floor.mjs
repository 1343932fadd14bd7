/**
 * Where @dlock/redis's uncontended cycle spends its time beyond the raw floor, in one run on one ioredis connection:
 *
 *   node src/redis/script-floor.mjs [--cycles=N] [--rounds=R] [--warmup=W] [--placement=split|shared|free]
 *
 * Four subjects take turns, R rounds of N sequential acquire + release cycles each, after W warm-up cycles each:
 *   raw       the floor of the (A) table: SET NX PX + a compare-and-delete script
 *   empty     two scripts that run no command and return at once, sent with the arguments the adapter sends: what
 *             two script calls of that shape cost before their bodies do anything
 *   scripts   @dlock/redis's own acquire and release scripts with the arguments the adapter sends, called straight
 *             through ioredis's `call`: the server's share of a dlock cycle, with no library code in the client
 *   dlock     @dlock/redis through LockClient, as in the (A) table
 * So raw → empty is the price of a script call where raw sends a native command, empty → scripts what the scripts'
 * bodies cost (the clock, the writes, the checks), and scripts → dlock the client library's own cost. Prints per
 * subject: ops/s (median of the rounds); the server process's CPU per cycle (from /proc, when the server runs on
 * this machine), the bench process's, and the server's µs inside commands (`INFO commandstats`; a script's commands
 * are also counted on their own, so this adds them twice: compare the rows, not the absolute figures). Loopback
 * only, bounded by its counts; it reads the built packages.
 * `--placement` as for the suites (lib/placement.mjs; default split): a private redis-server, pinned with this process.
 */
import { execFileSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { LockClient } from '@dlock/core';
import { RedisLockService } from '@dlock/redis';
import { lockKeys } from '../../../packages/redis/dist/keys.js';
import { lockScripts } from '../../../packages/redis/dist/single/scripts.js';
import { PLACEMENTS, pin, startPinnedRedis } from '../lib/placement.mjs';

const USAGE =
  'usage: node src/redis/script-floor.mjs [--cycles=N] [--rounds=R] [--warmup=W] [--placement=split|shared|free]';
const opts = { cycles: 3000, rounds: 10, warmup: 2000, placement: 'split' };
for (const arg of process.argv.slice(2)) {
  const m = /^--(cycles|rounds|warmup)=(\d+)$/.exec(arg) ?? /^--(placement)=(\w+)$/.exec(arg);
  if (!m || (m[1] === 'placement' && !PLACEMENTS.includes(m[2]))) {
    console.error(USAGE);
    process.exit(2);
  }
  opts[m[1]] = m[1] === 'placement' ? m[2] : Number(m[2]);
}

// The server address is read when the bench's modules load: start the private server first.
const server = await startPinnedRedis(opts.placement);
Object.assign(process.env, server.env);
if (server.clientCpu !== undefined) pin(process.pid, server.clientCpu);
const { now } = await import('../lib/index.mjs');
const { connectIoredis } = await import('./ioredis.mjs');

// The adapter's defaults: the fence retention (a week) and the ownership token's length.
const FENCE_RETENTION_MS = 7 * 24 * 3600 * 1000;
const TTL = '10000';
const RAW_RELEASE =
  "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) end return 0";
// A token-sized reply, as the acquire script gives.
const EMPTY = "return '1764640000123456'";

/** The server's CPU time so far (µs), when its process is on this machine and readable; else undefined. */
function serverCpu(pid) {
  try {
    const fields = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1].split(' ');
    return ((Number(fields[11]) + Number(fields[12])) * 1e6) / CLOCK_TICKS;
  } catch {
    return undefined;
  }
}
const CLOCK_TICKS = (() => {
  try {
    return Number(execFileSync('getconf', ['CLK_TCK'], { encoding: 'utf8', timeout: 5000 }).trim()) || 100;
  } catch {
    return 100;
  }
})();

const client = await connectIoredis('script floor');
const dlockClient = await connectIoredis('script floor (dlock)');
const service = new RedisLockService({ client: dlockClient, keyPrefix: 'dlock-bench:' });
const locks = new LockClient(service);
try {
  const rawSha = await client.call('SCRIPT', 'LOAD', RAW_RELEASE);
  const scripts = lockScripts(FENCE_RETENTION_MS);
  const acquireSha = await client.call('SCRIPT', 'LOAD', scripts.acquire.source);
  const releaseSha = await client.call('SCRIPT', 'LOAD', scripts.release.source);
  const emptySha = await client.call('SCRIPT', 'LOAD', EMPTY);
  const serverPid = /process_id:(\d+)/.exec(await client.info('server'))?.[1];
  const k = lockKeys('dlock-bench:', 'floor-scripts');
  const keys = [k.lock, k.fence, k.queue, k.waiters];
  const ownerId = `${process.pid}:${randomBytes(6).toString('hex')}`;

  const subjects = {
    raw: async () => {
      const token = randomBytes(20).toString('base64url');
      if ((await client.call('SET', 'dlock-bench:floor-raw', token, 'NX', 'PX', TTL)) !== 'OK')
        throw new Error('raw: busy');
      await client.call('EVALSHA', rawSha, '1', 'dlock-bench:floor-raw', token);
    },
    empty: async () => {
      const token = randomBytes(20).toString('base64url');
      const fence = await client.call('EVALSHA', emptySha, '4', ...keys, token, TTL, '0', '', ownerId);
      await client.call('EVALSHA', emptySha, '4', ...keys, `${token} ${fence}`);
    },
    scripts: async () => {
      const token = randomBytes(20).toString('base64url');
      const fence = await client.call('EVALSHA', acquireSha, '4', ...keys, token, TTL, '0', '', ownerId);
      if (typeof fence !== 'string') throw new Error(`scripts: not granted (${JSON.stringify(fence)})`);
      if ((await client.call('EVALSHA', releaseSha, '4', ...keys, `${token} ${fence}`)) !== 1)
        throw new Error('scripts: not released');
    },
    dlock: async () => {
      const handle = await locks.tryAcquire('floor-dlock', { ttlMs: Number(TTL), waitMs: 0 });
      if (!handle) throw new Error('dlock: busy');
      await handle.release();
    },
  };
  const names = Object.keys(subjects);
  const usecInCommands = async () => {
    let total = 0;
    for (const line of (await client.info('commandstats')).split('\n')) {
      const m = /^cmdstat_(\w+):calls=\d+,usec=(\d+)/.exec(line.trim());
      if (m && m[1] !== 'info') total += Number(m[2]);
    }
    return total;
  };

  for (const name of names) for (let i = 0; i < opts.warmup; i++) await subjects[name]();
  const rates = Object.fromEntries(names.map((name) => [name, []]));
  const zero = () => Object.fromEntries(names.map((name) => [name, 0]));
  const usec = zero();
  const serverUs = zero();
  const clientUs = zero();
  for (let r = 0; r < opts.rounds; r++) {
    for (let j = 0; j < names.length; j++) {
      const name = names[(r + j) % names.length];
      const u0 = await usecInCommands();
      const s0 = serverCpu(serverPid);
      const c0 = process.cpuUsage();
      const t0 = now();
      for (let i = 0; i < opts.cycles; i++) await subjects[name]();
      rates[name].push(opts.cycles / ((now() - t0) / 1000));
      const c1 = process.cpuUsage(c0);
      clientUs[name] += c1.user + c1.system;
      serverUs[name] += (serverCpu(serverPid) ?? Number.NaN) - (s0 ?? Number.NaN);
      usec[name] += (await usecInCommands()) - u0;
    }
  }
  const median = (xs) => [...xs].sort((a, b) => a - b)[xs.length >> 1];
  const base = median(rates.raw);
  console.log(
    `${opts.rounds} rounds × ${opts.cycles} cycles per subject, after ${opts.warmup} warm-up cycles each; ` +
      `placement ${server.placement}`,
  );
  const cycles = opts.rounds * opts.cycles;
  const perCycle = (us) => (Number.isNaN(us) ? '  —' : (us / cycles).toFixed(1)).padStart(5);
  console.log('subject    ops/s            µs per cycle: server CPU  client CPU  in commands');
  for (const name of names) {
    const ops = median(rates[name]);
    console.log(
      `${name.padEnd(8)} ${Math.round(ops).toLocaleString('en-US').padStart(7)} (${(ops / base).toFixed(2)}×)` +
        `                 ${perCycle(serverUs[name])}       ${perCycle(clientUs[name])}       ${perCycle(usec[name])}`,
    );
  }
} finally {
  await locks.close();
  await service.close();
  client.disconnect();
  dlockClient.disconnect();
  await server.stop();
}
