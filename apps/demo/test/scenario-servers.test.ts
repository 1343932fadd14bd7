import { ETCD_ENDPOINT, PG_URL, REDIS_URL, ZK_CONNECT } from '@dlock/test-utils';
import { describe, expect, it } from 'vitest';
import { parseLockUrl } from '../dist/backends.js';
import { checkFenced, checkUnfenced, type Outcome, runScenario } from './helpers.js';

const postgres = { kind: 'postgres', url: PG_URL } as const;

/**
 * Both runs' books, and the takeover every backend must show: the frozen worker's lease ran out and passed on.
 * (The counts are lower bounds here: these run side by side on a busy machine, where a late renewal may cost a
 * worker its lock too; the books must balance all the same.)
 */
function checkBoth(outcome: Outcome): void {
  const unfenced = checkUnfenced(outcome);
  const fenced = checkFenced(outcome);
  for (const r of [unfenced, fenced]) {
    expect(r.pauses).toHaveLength(1);
    expect(r.pauses[0]?.overlappedTakeover).toBe(true);
    expect(r.pauses[0]?.takeoverTokens.length).toBeGreaterThan(0);
  }
  expect(unfenced.lostAmount).toBeGreaterThan(0);
  expect(unfenced.staleWritesLanded).toBeGreaterThanOrEqual(1);
  expect(fenced.writesRejected).toBeGreaterThanOrEqual(1);
  expect(fenced.redone).toBeGreaterThanOrEqual(1);
}

// Side by side: most of a scenario is the frozen worker's idle pause, and the backends share nothing. Every ledger
// is on the PostgreSQL server: a PGlite ledger runs its database on this thread, where the other scenarios' ledger
// calls wait behind it: on a loaded machine ledger calls took seconds and the takeover fell outside the pause
// (once in CI; reproduced 5 of 6 times beside other load). For the same reason the 1 s leases get a 5 s pause.
describe.concurrent('the scenario on real servers', () => {
  it('Redis locks, PostgreSQL ledger', async () => {
    checkBoth(await runScenario(parseLockUrl(REDIS_URL), postgres, { pauseMs: 5_000 }));
  });

  it('etcd locks (2 s leases), PostgreSQL ledger', async () => {
    const lock = parseLockUrl(ETCD_ENDPOINT.replace(/^https?:/, 'etcd:'));
    checkBoth(await runScenario(lock, postgres, { ttlMs: 2_000, pauseMs: 4_500, workers: 3, iterations: 2 }));
  });

  it('PostgreSQL locks (@dlock/postgres), the ledger in the same PostgreSQL', async () => {
    checkBoth(await runScenario(parseLockUrl(PG_URL), postgres, { pauseMs: 5_000 }));
  });

  it('ZooKeeper locks (the session is the lease), PostgreSQL ledger', async () => {
    const lock = parseLockUrl(`zk://${ZK_CONNECT}`);
    checkBoth(await runScenario(lock, postgres, { ttlMs: 4_000, pauseMs: 7_500, workers: 3, iterations: 2 }));
  });
});
