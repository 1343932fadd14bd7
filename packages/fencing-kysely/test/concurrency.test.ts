import fc from 'fast-check';
import type { Kysely } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  ensureFencingTable,
  FenceConflictError,
  fenced,
  fencingMigration,
  highWaterMark,
  StaleFencingTokenError,
} from '../src/index.js';
import {
  ALL_KINDS,
  isNonDecreasing,
  maxOf,
  openTestDb,
  protectedTable,
  shuffle,
  type TestDb,
  takeRaceSlot,
  uniqueName,
} from './databases.js';

const RACERS = 50;
const ROUNDS = 4;
const compare = (a: bigint, b: bigint) => (a < b ? -1 : a > b ? 1 : 0);

describe.each(ALL_KINDS)('concurrent writers on %s', (kind) => {
  const options = { table: uniqueName('fence_conc') };
  const data = uniqueName('data_conc');
  let t: TestDb;
  let db: Kysely<unknown>;
  let writes: ReturnType<typeof protectedTable>;
  let run = 0;
  let freeSlot: (() => Promise<void>) | undefined;

  beforeAll(async () => {
    if (kind === 'postgres') freeSlot = await takeRaceSlot();
    // One pool connection per racer on the servers, so each transaction has its own backend.
    t = await openTestDb(kind, { connections: RACERS });
    db = t.db;
    writes = protectedTable(t.dialect, data);
    await ensureFencingTable(db, options);
    await writes.create(db);
  }, 120_000);

  afterAll(async () => {
    await fencingMigration(options).down(db);
    await writes.drop(db);
    await t.close();
    await freeSlot?.();
  });

  async function race(resource: string, tokens: readonly bigint[]): Promise<bigint[]> {
    const results = await Promise.allSettled(
      tokens.map((token) =>
        fenced(
          db,
          resource,
          token,
          async (trx) => {
            await writes.insert(trx, resource, token);
            return token;
          },
          options,
        ),
      ),
    );
    const accepted: bigint[] = [];
    for (const [i, result] of results.entries()) {
      if (result.status === 'fulfilled') {
        accepted.push(result.value);
        continue;
      }
      expect(result.reason).toBeInstanceOf(StaleFencingTokenError);
      expect((result.reason as StaleFencingTokenError).token).toBe(tokens[i]);
      expect((result.reason as StaleFencingTokenError).highWaterMark > (tokens[i] as bigint)).toBe(true);
    }
    return accepted;
  }

  async function assertFenced(resource: string, tokens: readonly bigint[], accepted: readonly bigint[]) {
    const committed = await writes.tokens(db, resource);
    const max = maxOf(tokens);
    expect([...committed].sort(compare)).toEqual([...accepted].sort(compare));
    expect(isNonDecreasing(committed)).toBe(true);
    expect(committed.at(-1)).toBe(max);
    expect(await highWaterMark(db, resource, options)).toBe(max);
  }

  it(`${RACERS} first writers with shuffled tokens, ${ROUNDS} rounds`, async () => {
    for (let round = 0; round < ROUNDS; round++) {
      const resource = `race/first/${round}`;
      const tokens = shuffle(Array.from({ length: RACERS }, (_, i) => BigInt(i + 1)));
      const accepted = await race(resource, tokens);
      await assertFenced(resource, tokens, accepted);
    }
  });

  it(`${RACERS} writers with repeated tokens past an existing mark, ${ROUNDS} rounds`, async () => {
    for (let round = 0; round < ROUNDS; round++) {
      const resource = `race/existing/${round}`;
      await fenced(db, resource, 3n, async () => undefined, options);
      const tokens = shuffle(Array.from({ length: RACERS }, (_, i) => BigInt((i % 10) + 1)));
      const accepted = await race(resource, tokens);
      expect(accepted.every((token) => token >= 3n)).toBe(true);
      expect(accepted.filter((token) => token === 10n)).toHaveLength(RACERS / 10);
      await assertFenced(resource, tokens, accepted);
    }
  });

  it('generated interleavings never commit a token below a committed one', async () => {
    const writer = fc.record({
      token: fc.bigInt({ min: 1n, max: 6n }),
      fails: fc.boolean(),
      own: fc.boolean(),
    });
    await fc.assert(
      fc.asyncProperty(
        fc.scheduler(),
        fc.array(writer, { minLength: 2, maxLength: 5 }),
        fc.option(fc.bigInt({ min: 1n, max: 6n }), { nil: undefined }),
        async (s, writers, seed) => {
          const resource = `prop/${run++}`;
          if (seed !== undefined) await fenced(db, resource, seed, async () => undefined, options);
          const step = <T>(label: string, f: () => Promise<T>) => s.schedule(Promise.resolve(label)).then(f);
          const attempts = writers.map(({ token, fails, own }, i) => {
            const body = async (trx: Kysely<unknown>) => {
              await step(`w${i} insert`, () => writes.insert(trx, resource, token));
              await step(`w${i} finish`, async () => {
                if (fails) throw new Error('app failure');
              });
            };
            // Half the writers let fenced() open the transaction, half hand it their own.
            return step(`w${i} start`, () =>
              own
                ? db.transaction().execute((trx) => fenced(trx, resource, token, body, options))
                : fenced(db, resource, token, body, options),
            );
          });
          const outcomes = await s.waitFor(Promise.allSettled(attempts));

          const committed = await writes.tokens(db, resource);
          expect(isNonDecreasing(committed)).toBe(true);
          expect(await highWaterMark(db, resource, options)).toBe(maxOf([seed, ...committed]) ?? null);
          const top = maxOf([seed, ...writers.map((w) => w.token)]) ?? 0n;
          for (const [i, outcome] of outcomes.entries()) {
            const w = writers[i]!;
            if (outcome.status === 'fulfilled') {
              expect(w.fails).toBe(false);
            } else if (outcome.reason instanceof StaleFencingTokenError) {
              expect(outcome.reason.highWaterMark > w.token).toBe(true);
              expect(w.token < top).toBe(true);
            } else if (outcome.reason instanceof FenceConflictError) {
              // InnoDB only: when the transaction that inserted a resource's first row rolls back, waiters
              // inherit gap locks and one becomes a deadlock victim (1213). Retryable, and nothing committed.
              expect(t.dialect).toBe('mysql');
              expect(outcome.reason.cause).toMatchObject({ errno: 1213 });
            } else {
              expect(w.fails).toBe(true);
            }
          }
          expect(committed.length).toBe(outcomes.filter((o) => o.status === 'fulfilled').length);
        },
      ),
      { numRuns: 40 },
    );
  });
});
