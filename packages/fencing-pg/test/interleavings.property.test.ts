import fc from 'fast-check';
import type pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { FencingGate, StaleFencingTokenError } from '../src/index.js';
import {
  committedTokens,
  createProtectedTable,
  isNonDecreasing,
  maxOf,
  newClient,
  newPool,
  uniqueName,
} from './helpers.js';

const MAX_WRITERS = 6;
const fenceTable = uniqueName('fence_prop');
const dataTable = uniqueName('data_prop');
const gate = new FencingGate({ table: fenceTable });
let admin: pg.Pool;
let clients: pg.Client[] = [];
let run = 0;

beforeAll(async () => {
  admin = newPool(2);
  await gate.ensureSchema(admin);
  await createProtectedTable(admin, dataTable);
  clients = await Promise.all(Array.from({ length: MAX_WRITERS }, () => newClient()));
});

afterAll(async () => {
  await Promise.all(clients.map((c) => c.end()));
  await admin.query(gate.sql.dropTable);
  await admin.query(`DROP TABLE IF EXISTS "${dataTable}"`);
  await admin.end();
});

const writer = fc.record({
  token: fc.bigInt({ min: 1n, max: 8n }),
  // Some writers fail after their protected insert: their mark must vanish with it.
  fails: fc.boolean(),
  // Some writers use check() inside a transaction they open themselves instead of run().
  manual: fc.boolean(),
});

describe('generated interleavings of concurrent writers', () => {
  it('never commit a token below an earlier committed one, and the mark ends at the max committed token', async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.scheduler(),
        fc.array(writer, { minLength: 2, maxLength: MAX_WRITERS }),
        fc.option(fc.bigInt({ min: 1n, max: 8n }), { nil: undefined }),
        async (s, writers, seed) => {
          const resource = `prop/${run++}`;
          if (seed !== undefined) await gate.run(admin, resource, seed, async () => undefined);
          // The scheduler decides when each step of each writer may start; the database decides the rest.
          const step = <T>(label: string, f: () => Promise<T>) => s.schedule(Promise.resolve(label)).then(f);
          const insert = (tx: pg.Client, token: bigint) =>
            tx.query(`INSERT INTO "${dataTable}" (resource, token) VALUES ($1, $2::bigint)`, [
              resource,
              token.toString(),
            ]);
          const attempts = writers.map(async ({ token, fails, manual }, i) => {
            const client = clients[i] as pg.Client;
            const mutate = async () => {
              await step(`w${i} insert`, () => insert(client, token));
              await step(`w${i} finish`, async () => {
                if (fails) throw new Error('app failure');
              });
            };
            if (!manual) {
              return step(`w${i} start`, () => gate.run(client, resource, token, mutate));
            }
            await step(`w${i} begin`, () => client.query('BEGIN'));
            try {
              await step(`w${i} check`, () => gate.check(client, resource, token));
              await mutate();
              await client.query('COMMIT');
            } catch (error) {
              await client.query('ROLLBACK');
              throw error;
            }
          });
          const outcomes = await s.waitFor(Promise.allSettled(attempts));

          const committed = await committedTokens(admin, dataTable, resource);
          expect(isNonDecreasing(committed)).toBe(true);
          // The seed counts as committed: it went through the gate before the writers started.
          expect(await gate.highWaterMark(admin, resource)).toBe(maxOf([seed, ...committed]) ?? null);

          const topToken = maxOf([seed, ...writers.map((w) => w.token)]) ?? 0n;
          for (const [i, outcome] of outcomes.entries()) {
            const w = writers[i]!;
            if (outcome.status === 'fulfilled') {
              expect(w.fails).toBe(false);
              continue;
            }
            if (outcome.reason instanceof StaleFencingTokenError) {
              expect(outcome.reason.highWaterMark > w.token).toBe(true);
              // A writer holding the highest token there is can never be called stale.
              expect(w.token < topToken).toBe(true);
            } else {
              expect(w.fails).toBe(true);
            }
          }
          // Exactly the writers that fulfilled have a committed row.
          expect(committed.length).toBe(outcomes.filter((o) => o.status === 'fulfilled').length);
        },
      ),
      { numRuns: 60 },
    );
  });
});
