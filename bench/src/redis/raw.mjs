/**
 * The floor, one per client family: `SET key token NX PX ttl` to acquire and a compare-and-delete script to
 * release, sent as raw commands with no lock library in between. The node-redis and ioredis floors send the same
 * commands in the same order; only the client's generic command call differs. When it has to wait it polls like
 * the peers do (a fixed retry delay), and scenario C renews each lock with its own timer at a third of the TTL
 * (what a hand-written extend loop usually does).
 */
import { randomBytes } from 'node:crypto';
import { now, packageVersion, sleep } from '../lib/index.mjs';
import { connectIoredis } from './ioredis.mjs';
import { connectNodeRedis } from './server.mjs';

const RELEASE =
  "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) end return 0";
const EXTEND =
  "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('pexpire', KEYS[1], ARGV[2]) end return 0";

/** Each family's leanest way to send one command given as words, and to hang up. */
const WIRES = {
  'node-redis': {
    pkg: 'redis',
    connect: () => connectNodeRedis('raw node-redis'),
    // `sendCommand` skips node-redis's per-command argument builders; @dlock/redis takes the same path.
    send: (client, words) => client.sendCommand(words),
    close: (client) => client.close(),
  },
  ioredis: {
    pkg: 'ioredis',
    connect: () => connectIoredis('raw ioredis'),
    // `call` is ioredis's generic command: the same words, without its per-command wrappers.
    send: (client, words) => client.call(...words),
    close: (client) => client.disconnect(),
  },
};

/** @param {{ family: 'node-redis' | 'ioredis', countRequests?, countCommands?, retryDelayMs?, retryJitterMs? }} o */
export function rawSubject({ family, countRequests, countCommands, retryDelayMs = 10, retryJitterMs = 5 }) {
  const wire = WIRES[family];
  if (!wire) throw new TypeError(`rawSubject: unknown client family ${family}`);
  let client;
  let releaseSha;
  let extendSha;
  const send = (words) => wire.send(client, words);

  const evalScript = async (sha, script, key, args) => {
    try {
      return await send(['EVALSHA', sha, '1', key, ...args]);
    } catch (error) {
      if (!String(error?.message).startsWith('NOSCRIPT')) throw error;
      return send(['EVAL', script, '1', key, ...args]);
    }
  };

  const acquire = async (name, { ttlMs, waitMs, signal }) => {
    const token = randomBytes(20).toString('base64url');
    const deadline = now() + waitMs;
    for (;;) {
      const ok = await send(['SET', name, token, 'NX', 'PX', String(ttlMs)]);
      if (ok === 'OK') return { token, release: () => evalScript(releaseSha, RELEASE, name, [token]) };
      const left = deadline - now();
      if (left <= 0 || signal?.aborted) return null;
      await sleep(Math.min(left, retryDelayMs + (Math.random() * 2 - 1) * retryJitterMs), signal);
    }
  };

  return {
    name: `raw ${family}`,
    version: `${wire.pkg} ${packageVersion(wire.pkg)}`,
    baseline: true,
    config: `SET NX PX + compare-and-delete script (EVALSHA); waits poll every ${retryDelayMs}±${retryJitterMs} ms; C: one timer per lock extending at TTL/3`,
    countRequests,
    countCommands,
    async setup() {
      client = await wire.connect();
      releaseSha = await send(['SCRIPT', 'LOAD', RELEASE]);
      extendSha = await send(['SCRIPT', 'LOAD', EXTEND]);
    },
    acquire,
    async hold(name, { ttlMs, onLost }) {
      const held = await acquire(name, { ttlMs, waitMs: 0 });
      if (!held) throw new Error(`raw: ${name} is busy`);
      const timer = setInterval(async () => {
        try {
          const extended = await evalScript(extendSha, EXTEND, name, [held.token, String(ttlMs)]);
          if (extended !== 1) {
            clearInterval(timer);
            onLost();
          }
        } catch {
          // A failed extension is retried by the next tick; the TTL leaves room for two misses.
        }
      }, ttlMs / 3);
      return {
        release: async () => {
          clearInterval(timer);
          await held.release();
        },
      };
    },
    async close() {
      if (client) await wire.close(client);
    },
  };
}
