import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Worker } from 'node:worker_threads';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ensureFencingTable, highWaterMark } from '../src/index.js';
import {
  isNonDecreasing,
  maxOf,
  openTestDb,
  protectedTable,
  shuffle,
  type TestDb,
  uniqueName,
} from './databases.js';

const WORKERS = 8;
const PER_WORKER = 7; // 56 racers per round
const ROUNDS = 3;

interface Result {
  token: string;
  outcome: string;
  mark?: string;
}

/**
 * SQLite's writer lock is per database file, so the real race is between connections, and better-sqlite3 waits
 * for a busy database synchronously: each racer gets its own thread and connection, as separate processes would.
 */
describe(`SQLite: ${WORKERS} connections in ${WORKERS} threads racing on one file`, () => {
  const table = 'dlock_fencing';
  const data = uniqueName('data');
  let dir: string;
  let file: string;
  let t: TestDb;
  let workers: Worker[] = [];

  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), 'dlock-fencing-threads-'));
    file = join(dir, 'race.db');
    t = await openTestDb('sqlite', { sqliteFile: file });
    await ensureFencingTable(t.db, { table });
    await protectedTable('sqlite', data).create(t.db);
    workers = Array.from(
      { length: WORKERS },
      () =>
        new Worker(new URL('./sqlite-race-worker.mjs', import.meta.url), {
          workerData: { file, table, data },
        }),
    );
    await Promise.all(workers.map((w) => new Promise((resolve) => w.once('message', resolve))));
  });

  afterAll(async () => {
    await Promise.all(
      workers.map((w) => {
        const exited = new Promise((resolve) => w.once('exit', resolve));
        w.postMessage({ type: 'close' });
        return exited;
      }),
    );
    await t.close();
    rmSync(dir, { recursive: true, force: true });
  });

  it(`first writers with shuffled tokens never commit out of order, ${ROUNDS} rounds`, async () => {
    for (let round = 0; round < ROUNDS; round++) {
      const resource = `threads/${round}`;
      const tokens = shuffle(Array.from({ length: WORKERS * PER_WORKER }, (_, i) => BigInt(i + 1)));
      const replies = await Promise.all(
        workers.map((w, i) => {
          const reply = new Promise<Result[]>((resolve) => w.once('message', resolve));
          const mine = tokens.slice(i * PER_WORKER, (i + 1) * PER_WORKER).map(String);
          w.postMessage({ resource, tokens: mine });
          return reply;
        }),
      );
      const results = replies.flat();
      // Every racer either got through or was refused as stale: the gate's write-first transactions never hit
      // the read-then-write upgrade that would fail with SQLITE_BUSY.
      expect(results.filter((r) => r.outcome !== 'accepted' && r.outcome !== 'STALE_FENCING_TOKEN')).toEqual(
        [],
      );
      for (const r of results.filter((x) => x.outcome === 'STALE_FENCING_TOKEN')) {
        expect(BigInt(r.mark!) > BigInt(r.token)).toBe(true);
      }
      const committed = await protectedTable('sqlite', data).tokens(t.db, resource);
      const accepted = results.filter((r) => r.outcome === 'accepted').map((r) => BigInt(r.token));
      expect(committed.length).toBe(accepted.length);
      expect(isNonDecreasing(committed)).toBe(true);
      expect(committed.at(-1)).toBe(maxOf(tokens));
      expect(await highWaterMark(t.db, resource, { table })).toBe(maxOf(tokens));
    }
  });
});
