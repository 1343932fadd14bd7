import { LockClient } from '@dlock/core';
import { PostgresLockService } from '@dlock/postgres';
import { describe, expect, it } from 'vitest';
import { newPool, usePrivateSchema } from './helpers.js';

const pool = newPool(10);
const tables = usePrivateSchema(pool);

const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

async function until(predicate: () => Promise<boolean> | boolean, maxMs: number): Promise<boolean> {
  const end = performance.now() + maxMs;
  while (performance.now() < end) {
    if (await predicate()) return true;
    await sleep(10);
  }
  return predicate();
}

async function observers(name: string): Promise<string[]> {
  const result = await pool.query<{ id: string }>(
    `SELECT id FROM "${tables.name}".dlock_waiters WHERE kind = 'o' AND name = $1`,
    [name],
  );
  return result.rows.map((r) => r.id);
}

describe('notices across services (each standing in for another process)', () => {
  it("watchChanges hears another service's grant, metadata update and release, in well under a poll", async () => {
    const writer = new PostgresLockService({ pool, schema: tables.name, listen: false });
    const observer = new PostgresLockService({ pool, schema: tables.name });
    let changes = 0;
    const unwatch = observer.watchChanges('leader', () => {
      changes++;
    });
    expect(await until(async () => (await observers('leader')).includes(observer.channel), 2_000)).toBe(true);
    // Once in place, the subscription says so (a change before it could have been missed).
    expect(await until(() => changes >= 1, 2_000)).toBe(true);
    const signal = new AbortController().signal;
    const result = await (async () => {
      let seen = changes;
      const expectNotice = async (step: () => Promise<unknown>): Promise<number> => {
        const started = performance.now();
        await step();
        expect(await until(() => changes > seen, 1_000)).toBe(true);
        seen = changes;
        return performance.now() - started;
      };
      const granted = await writer.acquire({
        name: 'leader',
        ownerId: 'w',
        ttlMs: 10_000,
        waitMs: 0,
        signal,
      });
      expect(await until(() => changes > seen, 1_000)).toBe(true);
      seen = changes;
      if (!granted.acquired) throw new Error('not granted');
      const lease = {
        name: 'leader',
        ownerId: 'w',
        ownershipToken: granted.grant.ownershipToken,
        fencingToken: granted.grant.fencingToken,
      };
      const updateMs = await expectNotice(() => writer.updateMetadata(lease, 'v2'));
      const releaseMs = await expectNotice(() => writer.release(lease));
      return { updateMs, releaseMs };
    })();
    console.log(
      `notices after update ${result.updateMs.toFixed(0)} ms, release ${result.releaseMs.toFixed(0)} ms`,
    );
    unwatch();
    expect(await until(async () => (await observers('leader')).length === 0, 2_000)).toBe(true);
    await Promise.all([writer.close(), observer.close()]);
  });

  it('watch() wakes a caller of another service on a release, and an election observer follows along', async () => {
    const a = new PostgresLockService({ pool, schema: tables.name });
    const b = new PostgresLockService({ pool, schema: tables.name });
    const holder = await new LockClient(a).acquire('watched', { ttlMs: 10_000 });
    let released = 0;
    const unwatch = b.watch('watched', () => {
      released++;
    });
    await until(async () => (await observers('watched')).length === 1, 2_000);
    const before = released;
    await holder.release();
    expect(await until(() => released > before, 1_000)).toBe(true);
    unwatch();

    const seen: (string | undefined)[] = [];
    const stop = new AbortController();
    const watching = (async () => {
      const election = new LockClient(b).election('chair', { ttlMs: 20_000 });
      for await (const leader of election.observe({ signal: stop.signal })) seen.push(leader?.value);
    })();
    await sleep(200);
    const leadership = await new LockClient(a)
      .election('chair', { ttlMs: 20_000 })
      .campaign({ value: 'one' });
    expect(await until(() => seen.includes('one'), 1_000)).toBe(true);
    await leadership.proclaim('two');
    expect(await until(() => seen.includes('two'), 1_000)).toBe(true);
    await leadership.resign();
    expect(await until(() => seen.at(-1) === undefined && seen.length > 2, 1_000)).toBe(true);
    stop.abort();
    await watching;
    await Promise.all([a.close(), b.close()]);
  });
});
