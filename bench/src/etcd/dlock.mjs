/**
 * @dlock/etcd through @dlock/core's LockClient, as an application would use it: waiting is the adapter's queue
 * (one watch on the key just before ours), renewal is core's scheduler. Three configurations: a lease per lock,
 * session mode with the session lease as long as the lock's TTL, and session mode with a longer session lease.
 *
 * Besides the suite's own figures it counts, in scenario B, wake-ups (re-reads a queued contender makes after a
 * watch event: the adapter's read-only transactions) per acquisition, and grants out of queue order (a token lower
 * than the previous grant's: the token is the create revision of the contender's key, i.e. its place in the
 * queue), and adds both to the report's notes.
 */
import { lockClientSubject, packageVersion } from '../lib/index.mjs';
import { connectEtcd } from './client.mjs';

const PREFIX = 'dlock-bench-dlock/';

/** Scenario B's lock names carry the worker count: dlock-bench:b<workers>-<subject>:<random>. */
const scenarioOf = (name) => /^dlock-bench:(b\d+)-/.exec(name)?.[1];

export function dlockSubject({ label, session, notes }) {
  let etcd;
  const wakeups = new Map();
  const acquisitions = new Map();
  const lastToken = new Map();
  const outOfOrder = new Map();
  const bump = (map, key) => key && map.set(key, (map.get(key) ?? 0) + 1);

  /** The client the service gets: the real one, with read-only transactions (re-reads) counted per scenario. */
  const counting = (client) => ({
    kv: {
      txn: (request, options) => {
        const ops = request.success ?? [];
        if (!request.compare?.length && ops.every((op) => op.request_range)) {
          const key = ops[0]?.request_range?.key?.toString('utf8') ?? '';
          const escaped = key.slice(PREFIX.length, key.lastIndexOf('/'));
          bump(wakeups, scenarioOf(escaped.replace(/%2F/g, '/').replace(/%25/g, '%')));
        }
        return client.kv.txn(request, options);
      },
    },
    leaseClient: client.leaseClient,
    watchClient: client.watchClient,
  });

  const subject = lockClientSubject({
    adapter: '@dlock/etcd',
    name: `@dlock/etcd (${label})`,
    config: `etcd3 ${packageVersion('etcd3')}, @dlock/core ${packageVersion('@dlock/core')}; LockClient defaults; EtcdLockService ${session === false ? 'session: false (a lease per lock)' : `session: ${JSON.stringify(session)}`}`,
    countRequests: () => etcd.countRequests(),
    async connect({ EtcdLockService }) {
      etcd = connectEtcd();
      return new EtcdLockService({ client: counting(etcd.client), prefix: PREFIX, session });
    },
    disconnect: () => etcd?.client.close(),
  });

  return {
    ...subject,
    /** The library's acquire, with scenario B's grants counted and checked against queue order. */
    async acquire(name, options) {
      const handle = await subject.acquire(name, options);
      const scenario = scenarioOf(name);
      if (handle && scenario) {
        bump(acquisitions, scenario);
        if (handle.fencingToken < (lastToken.get(scenario) ?? 0n)) bump(outOfOrder, scenario);
        lastToken.set(scenario, handle.fencingToken);
      }
      return handle;
    },
    async close() {
      await subject.close();
      const parts = [...acquisitions].map(([scenario, count]) => {
        const woke = wakeups.get(scenario) ?? 0;
        const late = outOfOrder.get(scenario) ?? 0;
        return `${scenario.slice(1)} workers: ${woke} wake-ups for ${count} acquisitions (${(woke / count).toFixed(2)} per acquisition), ${late} out of queue order`;
      });
      if (parts.length)
        notes.push(`*Wake-ups and order*, @dlock/etcd (${label}), scenario B: ${parts.join('; ')}.`);
    },
  };
}
