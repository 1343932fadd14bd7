/**
 * Where @dlock/redis's uncontended cycle spends its time beyond the raw floor, in one run on one ioredis connection:
 *
 *   node src/redis/script-floor.mjs [--cycles=N] [--rounds=R] [--warmup=W]
 *
 * Three subjects take turns, R rounds of N sequential acquire + release cycles each, after W warm-up cycles each:
 *   raw       the floor of the (A) table: SET NX PX + a compare-and-delete script
 *   scripts   @dlock/redis's own acquire and release scripts with the arguments the adapter sends, called straight
 *             through ioredis's `call`: the server's share of a dlock cycle, with no library code in the client
 *   dlock     @dlock/redis through LockClient, as in the (A) table
 * So raw → scripts is what the protocol costs the server (fencing token, restart safety, the queue check), and
 * scripts → dlock is the client library's own cost. Prints ops/s (median of the rounds) and the server's µs per cycle
 * inside commands (`INFO commandstats`; a script's commands are also counted on their own, so this adds them twice;
 * compare the rows, not the absolute figures). Loopback only, bounded by its counts; it reads the built packages.
 */
import { randomBytes } from 'node:crypto';
import { LockClient } from '@dlock/core';
import { RedisLockService } from '@dlock/redis';
import { lockKeys } from '../../../packages/redis/dist/keys.js';
import { lockScripts } from '../../../packages/redis/dist/single/scripts.js';
import { now } from '../lib/index.mjs';
import { connectIoredis } from './ioredis.mjs';

const USAGE = 'usage: node src/redis/script-floor.mjs [--cycles=N] [--rounds=R] [--warmup=W]';
const opts = { cycles: 3000, rounds: 10, warmup: 2000 };
for (const arg of process.argv.slice(2)) {
  const m = /^--(cycles|rounds|warmup)=(\d+)$/.exec(arg);
  if (!m) {
    console.error(USAGE);
    process.exit(2);
  }
  opts[m[1]] = Number(m[2]);
}

// The adapter's defaults: the fence retention (a week) and the ownership token's length.
const FENCE_RETENTION_MS = 7 * 24 * 3600 * 1000;
const TTL = '10000';
const RAW_RELEASE =
  "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) end return 0";

const client = await connectIoredis('script floor');
const dlockClient = await connectIoredis('script floor (dlock)');
const service = new RedisLockService({ client: dlockClient, keyPrefix: 'dlock-bench:' });
const locks = new LockClient(service);
try {
  const rawSha = await client.call('SCRIPT', 'LOAD', RAW_RELEASE);
  const scripts = lockScripts(FENCE_RETENTION_MS);
  const acquireSha = await client.call('SCRIPT', 'LOAD', scripts.acquire.source);
  const releaseSha = await client.call('SCRIPT', 'LOAD', scripts.release.source);
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
  const usec = Object.fromEntries(names.map((name) => [name, 0]));
  for (let r = 0; r < opts.rounds; r++) {
    for (let j = 0; j < names.length; j++) {
      const name = names[(r + j) % names.length];
      const u0 = await usecInCommands();
      const t0 = now();
      for (let i = 0; i < opts.cycles; i++) await subjects[name]();
      rates[name].push(opts.cycles / ((now() - t0) / 1000));
      usec[name] += (await usecInCommands()) - u0;
    }
  }
  const median = (xs) => [...xs].sort((a, b) => a - b)[xs.length >> 1];
  const base = median(rates.raw);
  console.log(
    `${opts.rounds} rounds × ${opts.cycles} cycles per subject, after ${opts.warmup} warm-up cycles each`,
  );
  for (const name of names) {
    const ops = median(rates[name]);
    const perCycle = usec[name] / (opts.rounds * opts.cycles);
    console.log(
      `${name.padEnd(8)} ${Math.round(ops).toLocaleString('en-US').padStart(7)} ops/s (${(ops / base).toFixed(2)}×)  ` +
        `server ${perCycle.toFixed(1)} µs/cycle in commands`,
    );
  }
} finally {
  await locks.close();
  await service.close();
  client.disconnect();
  dlockClient.disconnect();
}
