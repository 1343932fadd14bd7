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
  shuffle,
  takeRaceSlot,
  uniqueName,
} from './helpers.js';

const RACERS = 50;
const ROUNDS = 6;
const fenceTable = uniqueName('fence_race');
const dataTable = uniqueName('data_race');
const gate = new FencingGate({ table: fenceTable });
let admin: pg.Pool;
let clients: pg.Client[] = [];
let freeSlot: () => Promise<void>;

beforeAll(async () => {
  freeSlot = await takeRaceSlot();
  admin = newPool(2);
  await gate.ensureSchema(admin);
  await createProtectedTable(admin, dataTable);
  // One real server connection per racer, opened up front so the race is between backends, not connects.
  clients = await Promise.all(Array.from({ length: RACERS }, () => newClient()));
}, 120_000);

afterAll(async () => {
  await Promise.all(clients.map((c) => c.end()));
  await admin.query(gate.sql.dropTable);
  await admin.query(`DROP TABLE IF EXISTS "${dataTable}"`);
  await admin.end();
  await freeSlot();
});

/** Every racer runs the gate and a protected insert on its own connection; returns who got through. */
async function race(resource: string, tokens: readonly bigint[]) {
  const results = await Promise.allSettled(
    tokens.map((token, i) =>
      gate.run(clients[i] as pg.Client, resource, token, async (tx) => {
        await tx.query(`INSERT INTO "${dataTable}" (resource, token) VALUES ($1, $2::bigint)`, [
          resource,
          token.toString(),
        ]);
        return token;
      }),
    ),
  );
  const accepted: bigint[] = [];
  for (const [i, result] of results.entries()) {
    if (result.status === 'fulfilled') {
      accepted.push(result.value);
      continue;
    }
    // The only acceptable failure is a stale token, and it must carry a mark that really beats it.
    expect(result.reason).toBeInstanceOf(StaleFencingTokenError);
    const stale = result.reason as StaleFencingTokenError;
    expect(stale.token).toBe(tokens[i]);
    expect(stale.highWaterMark > stale.token).toBe(true);
  }
  return accepted;
}

async function assertFenced(resource: string, tokens: readonly bigint[], accepted: readonly bigint[]) {
  const committed = await committedTokens(admin, dataTable, resource);
  const max = maxOf(tokens);
  // Nothing a rejected racer wrote is visible: the committed rows are exactly the accepted racers' rows.
  expect([...committed].sort(compare)).toEqual([...accepted].sort(compare));
  // Writers got past the gate one at a time (seq order = commit order) and never with a lower token.
  expect(isNonDecreasing(committed)).toBe(true);
  expect(committed.at(-1)).toBe(max);
  expect(await gate.highWaterMark(admin, resource)).toBe(max);
}

const compare = (a: bigint, b: bigint) => (a < b ? -1 : a > b ? 1 : 0);

describe(`${RACERS} concurrent writers on separate connections`, () => {
  it(`first writers on a resource without a row, distinct shuffled tokens, ${ROUNDS} rounds`, async () => {
    for (let round = 0; round < ROUNDS; round++) {
      const resource = `race/first/${round}`;
      const tokens = shuffle(Array.from({ length: RACERS }, (_, i) => BigInt(i + 1)));
      const accepted = await race(resource, tokens);
      await assertFenced(resource, tokens, accepted);
    }
  });

  it(`first writers with repeated tokens (equal tokens are one grant writing twice), ${ROUNDS} rounds`, async () => {
    for (let round = 0; round < ROUNDS; round++) {
      const resource = `race/dup/${round}`;
      const tokens = shuffle(
        Array.from({ length: RACERS }, (_, i) => BigInt((i % 10) + 1) * 1_000_000_000_000n),
      );
      const accepted = await race(resource, tokens);
      await assertFenced(resource, tokens, accepted);
      // The highest grant can never be refused, whichever order its writes arrived in.
      expect(accepted.filter((t) => t === 10_000_000_000_000n)).toHaveLength(RACERS / 10);
    }
  });

  it(`writers racing past an existing mark, ${ROUNDS} rounds`, async () => {
    for (let round = 0; round < ROUNDS; round++) {
      const resource = `race/existing/${round}`;
      await gate.run(admin, resource, 25n, async () => undefined);
      const tokens = shuffle(Array.from({ length: RACERS }, (_, i) => BigInt(i + 1)));
      const accepted = await race(resource, tokens);
      expect(accepted.every((t) => t >= 25n)).toBe(true);
      await assertFenced(resource, tokens, accepted);
    }
  });
});
