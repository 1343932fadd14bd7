/**
 * The rows of the elections suite. A subject opens *instances*: one application process's worth of connections
 * (a leader, a standby or an observer), each on connections of its own.
 *
 *   subject.open() → instance
 *   instance.campaign(name, value) → { elected, resign(), proclaim?(value) }
 *       starts at once and campaigns without a budget; `elected` resolves with { key, ttlMs? } at the candidate's
 *       first act (the moment it may start leading). `resign()` also gives up a campaign not yet won.
 *   instance.observe(name, onLeader) → stop()
 *       calls onLeader(key | null) with the current leader first, then on every change it notices. A leader's
 *       `key` is what its `elected` resolved with: the value it campaigned with (or proclaimed), or, where no value
 *       is stored (the hand-rolled loop), its fencing token.
 *   instance.close()
 */
import { ENDPOINTS, packageVersion, sleep } from '../lib/index.mjs';

/** A LockClient on a service of its own, as every application instance has. */
async function openClient(openService) {
  const { LockClient } = await import('@dlock/core');
  const { service, close } = await openService();
  const client = new LockClient(service);
  return {
    service,
    client,
    async close() {
      await client.close();
      await service.close?.();
      await close();
    },
  };
}

/**
 * The loop teams write today around a plain lock: try it once (no wait) with the TTL; on success act while the
 * client renews it; on failure sleep a retry interval and try again. Observers poll who holds the lock (the
 * service's `inspect`) at the same interval and report a new holder by its fencing token.
 */
export function handRolledSubject({ openService, ttlMs, retryMs = ttlMs / 4 }) {
  return {
    key: 'hand-rolled',
    name: 'hand-rolled loop over a lock',
    baseline: true,
    version: packageVersion('@dlock/core'),
    retryMs,
    config:
      `LockClient.tryAcquire(name, { ttlMs, waitMs: 0 }) every ${retryMs} ms (TTL/4) until granted, renewed by ` +
      `the LockClient, release() to step down; observers poll service.inspect(name) every ${retryMs} ms`,
    async open() {
      const { service, client, close } = await openClient(openService);
      return {
        campaign(name) {
          const stop = new AbortController();
          let handle;
          const elected = (async () => {
            for (;;) {
              if (stop.signal.aborted) throw new Error('campaign given up');
              const granted = await client.tryAcquire(name, { ttlMs, waitMs: 0 });
              if (granted) {
                handle = granted;
                return { key: String(granted.fencingToken), ttlMs: granted.ttlMs };
              }
              await sleep(retryMs, stop.signal);
            }
          })();
          return {
            elected,
            async resign() {
              stop.abort();
              await elected.catch(() => {});
              if (handle?.state === 'held') await handle.release();
            },
          };
        },
        observe(name, onLeader) {
          const stop = new AbortController();
          let last;
          const polling = (async () => {
            while (!stop.signal.aborted) {
              try {
                const info = await service.inspect(name);
                const key = info.held ? String(info.fencingToken) : null;
                if (key !== last) {
                  last = key;
                  onLeader(key);
                }
              } catch {
                // an unanswered poll is only a late one: the next one asks again
              }
              await sleep(retryMs, stop.signal);
            }
          })();
          return async () => {
            stop.abort();
            await polling;
          };
        },
        close,
      };
    },
  };
}

/** @dlock/core's election on the same service: candidates queue behind the leader, observers get its notices. */
export function coreElectionSubject({ openService, ttlMs }) {
  return {
    key: 'election',
    name: '@dlock election',
    version: packageVersion('@dlock/core'),
    config:
      'client.election(name, { ttlMs }): campaign({ value, waitMs: Infinity }), resign(), proclaim(); ' +
      'observers iterate observe()',
    async open() {
      const { client, close } = await openClient(openService);
      return {
        campaign(name, value) {
          const stop = new AbortController();
          let leadership;
          const elected = client
            .election(name, { ttlMs })
            .campaign({ value, waitMs: Number.POSITIVE_INFINITY, signal: stop.signal })
            .then((won) => {
              leadership = won;
              return { key: value };
            });
          return {
            elected,
            async resign() {
              if (!leadership) {
                stop.abort();
                await elected.catch(() => {});
              }
              if (leadership?.state === 'leading') await leadership.resign();
            },
            proclaim: (next) => leadership.proclaim(next),
          };
        },
        observe(name, onLeader) {
          const stop = new AbortController();
          const iterating = (async () => {
            for await (const leader of client.election(name, { ttlMs }).observe({ signal: stop.signal })) {
              onLeader(leader ? leader.value : null);
            }
          })().catch(() => {});
          return async () => {
            stop.abort();
            await iterating;
          };
        },
        close,
      };
    },
  };
}

/**
 * etcd3's own `Election` (the Go client's layout: the lowest create revision under the election's prefix leads,
 * each candidate watches the key just before its own), on a client of its own. Its TTL is in whole seconds.
 */
export function etcd3ElectionSubject({ ttlMs }) {
  const ttlSeconds = Math.ceil(ttlMs / 1000);
  const prefix = 'dlock-bench-elections-etcd3/';
  return {
    key: 'etcd3',
    name: 'etcd3 Election',
    version: packageVersion('etcd3'),
    config:
      `client.election(name, ${ttlSeconds}): campaign(value).wait(), resign(), proclaim(); observers listen ` +
      "to observe()'s change events",
    async open() {
      const { Etcd3 } = await import('etcd3');
      const client = new Etcd3({ hosts: ENDPOINTS.etcd });
      return {
        campaign(name, value) {
          const campaign = client.election(`${prefix}${name}`, ttlSeconds).campaign(value);
          // wait() rejects with the same error; the event only needs a listener.
          campaign.on('error', () => {});
          const elected = campaign.wait().then(() => ({ key: value }));
          return {
            elected,
            resign: () => campaign.resign(),
            proclaim: (next) => campaign.proclaim(next),
          };
        },
        observe(name, onLeader) {
          let stopped = false;
          const observing = client
            .election(`${prefix}${name}`, ttlSeconds)
            .observe()
            .then(async (observer) => {
              observer.on('error', () => {});
              observer.on('change', (value) => onLeader(value ?? null));
              onLeader(observer.leader() ?? null);
              if (stopped) await observer.cancel();
              return observer;
            });
          return async () => {
            stopped = true;
            const observer = await observing.catch(() => undefined);
            await observer?.cancel();
          };
        },
        async close() {
          client.close();
        },
      };
    },
  };
}
