/**
 * The Redis server under test and the two ways requests are counted:
 *   countRequests  requests this process sent (request-counter.mjs), minus the probe's own INFO calls
 *   countCommands  `INFO commandstats` deltas: every command the server ran, including those inside Lua scripts,
 *                  from every client (Redis 7.0 keeps no per-client totals), so only meaningful on a quiet server
 */
import { createClient } from 'redis';
import { ENDPOINTS } from '../lib/index.mjs';
import { countOutgoingRequests } from './request-counter.mjs';

export const REDIS_URL = ENDPOINTS.redis;
const sent = countOutgoingRequests(Number(new URL(REDIS_URL).port || 6379));

/** A connected node-redis client with a bounded connect; errors after connect are logged once, not thrown. */
export async function connectNodeRedis(name) {
  const client = createClient({ url: REDIS_URL, socket: { connectTimeout: 5000, reconnectStrategy: false } });
  let reported = false;
  client.on('error', (error) => {
    if (!reported) process.stderr.write(`[redis] ${name}: ${error.message}\n`);
    reported = true;
  });
  await client.connect();
  return client;
}

export function sumCommandStats(info) {
  let total = 0;
  for (const line of info.split('\n')) {
    const m = /^cmdstat_([^:]+):calls=(\d+)/.exec(line.trim());
    // The probe's own INFO calls are not the subject's work.
    if (m && m[1] !== 'info') total += Number(m[2]);
  }
  return total;
}

/** One probe connection shared by all subjects of a run. */
export async function openServerProbe() {
  const before = sent();
  const client = await connectNodeRedis('probe');
  const info = await client.info('server');
  const version = /redis_version:(\S+)/.exec(info)?.[1] ?? 'unknown';
  let probeRequests = sent() - before;
  return {
    version,
    countRequests: async () => sent() - probeRequests,
    countCommands: async () => {
      probeRequests += 1;
      return sumCommandStats(await client.info('commandstats'));
    },
    close: () => client.close(),
  };
}
