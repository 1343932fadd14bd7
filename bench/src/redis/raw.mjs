/**
 * The floor: node-redis with `SET key token NX PX ttl` to acquire and a compare-and-delete script to release, no
 * client library in between. When it has to wait it polls like the peers do (a fixed retry delay), and scenario C
 * renews each lock with its own timer at a third of the TTL (what a hand-written extend loop usually does).
 */
import { randomBytes } from 'node:crypto';
import { now, packageVersion, sleep } from '../lib/index.mjs';
import { connectNodeRedis } from './server.mjs';

const RELEASE =
  "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) end return 0";
const EXTEND =
  "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('pexpire', KEYS[1], ARGV[2]) end return 0";

export function rawSubject({ countRequests, countCommands, retryDelayMs = 10, retryJitterMs = 5 }) {
  let client;
  let releaseSha;
  let extendSha;

  // Raw commands (`sendCommand`) are node-redis's leanest path, and the one @dlock/redis takes too.
  const evalScript = async (sha, script, key, args) => {
    try {
      return await client.sendCommand(['EVALSHA', sha, '1', key, ...args]);
    } catch (error) {
      if (!String(error?.message).startsWith('NOSCRIPT')) throw error;
      return client.sendCommand(['EVAL', script, '1', key, ...args]);
    }
  };

  const acquire = async (name, { ttlMs, waitMs, signal }) => {
    const token = randomBytes(20).toString('base64url');
    const deadline = now() + waitMs;
    for (;;) {
      const ok = await client.sendCommand(['SET', name, token, 'NX', 'PX', String(ttlMs)]);
      if (ok === 'OK') return { token, release: () => evalScript(releaseSha, RELEASE, name, [token]) };
      const left = deadline - now();
      if (left <= 0 || signal?.aborted) return null;
      await sleep(Math.min(left, retryDelayMs + (Math.random() * 2 - 1) * retryJitterMs), signal);
    }
  };

  return {
    name: 'raw node-redis',
    version: `redis ${packageVersion('redis')}`,
    baseline: true,
    config: `SET NX PX + compare-and-delete script (EVALSHA); waits poll every ${retryDelayMs}±${retryJitterMs} ms; C: one timer per lock extending at TTL/3`,
    countRequests,
    countCommands,
    async setup() {
      client = await connectNodeRedis('raw');
      releaseSha = await client.scriptLoad(RELEASE);
      extendSha = await client.scriptLoad(EXTEND);
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
      await client?.close();
    },
  };
}
