import { rejection } from '@dlock/test-utils';
import type pg from 'pg';
import { describe, expect, it } from 'vitest';
import {
  FencingGate,
  InvalidArgumentError,
  MAX_FENCING_TOKEN,
  StaleFencingTokenError,
} from '../src/index.js';
import { checkedOut, committedTokens, newClient, protectedWrite, uniqueName, withGate } from './helpers.js';

const fenceTable = uniqueName('fence');
const dataTable = uniqueName('data');
let pool: pg.Pool;
let gate: FencingGate;
let counter = 0;
const freshResource = () => `gate-test/${counter++}`;

withGate({ fenceTable, dataTable, poolSize: 5 }, (opened, openedGate) => {
  pool = opened;
  gate = openedGate;
});

const write = protectedWrite(dataTable);

describe('FencingGate.run', () => {
  it('accepts the first token, an equal token and a higher token, raising the mark', async () => {
    const r = freshResource();
    await gate.run(pool, r, 5n, write(r, 5n));
    expect(await gate.highWaterMark(pool, r)).toBe(5n);
    await gate.run(pool, r, '5', write(r, 5n));
    expect(await gate.highWaterMark(pool, r)).toBe(5n);
    await gate.run(pool, r, 7, write(r, 7n));
    expect(await gate.highWaterMark(pool, r)).toBe(7n);
    expect(await committedTokens(pool, dataTable, r)).toEqual([5n, 5n, 7n]);
  });

  it('rejects a stale token, and nothing of its mutation is visible', async () => {
    const r = freshResource();
    await gate.run(pool, r, 10n, write(r, 10n));
    let mutationRan = false;
    const error = await rejection(
      gate.run(pool, r, 9n, async (tx) => {
        mutationRan = true;
        return write(r, 9n)(tx);
      }),
    );
    expect(error).toBeInstanceOf(StaleFencingTokenError);
    expect(error).toMatchObject({ code: 'STALE_FENCING_TOKEN', resource: r, token: 9n, highWaterMark: 10n });
    expect(mutationRan).toBe(false);
    expect(await gate.highWaterMark(pool, r)).toBe(10n);
    expect(await committedTokens(pool, dataTable, r)).toEqual([10n]);
  });

  it('rolls the mark back with the mutation when the mutation fails', async () => {
    const r = freshResource();
    const boom = new Error('mutation failed');
    const first = await rejection(
      gate.run(pool, r, 3n, async (tx) => {
        await write(r, 3n)(tx);
        throw boom;
      }),
    );
    expect(first).toBe(boom);
    expect(await gate.highWaterMark(pool, r)).toBeNull();

    await gate.run(pool, r, 3n, write(r, 3n));
    const second = await rejection(
      gate.run(pool, r, 8n, async (tx) => {
        await write(r, 8n)(tx);
        await tx.query('SELECT 1/0');
      }),
    );
    expect(second).toMatchObject({ code: '22012' });
    expect(await gate.highWaterMark(pool, r)).toBe(3n);
    expect(await committedTokens(pool, dataTable, r)).toEqual([3n]);
    expect(checkedOut(pool)).toBe(0);
  });

  it('refuses to report success when the callback swallowed a failed statement', async () => {
    const r = freshResource();
    const error = await rejection(
      gate.run(pool, r, 4n, async (tx) => {
        await write(r, 4n)(tx);
        await tx.query('SELECT 1/0').catch(() => undefined);
        return 'looks fine';
      }),
    );
    expect(error).toBeInstanceOf(Error);
    expect(String(error)).toMatch(/rolled back/);
    expect(await gate.highWaterMark(pool, r)).toBeNull();
    expect(await committedTokens(pool, dataTable, r)).toEqual([]);
  });

  it('refuses to report success when the callback ended the fenced transaction itself', async () => {
    // A callback that rolls back undoes the mark; what it writes next is not fenced at all.
    const r = freshResource();
    await gate.runFenced(pool, r, 10n, write(r, 10n));
    const rolledBack = await rejection(
      gate.runFenced(pool, r, 11n, async (tx) => {
        await tx.query('ROLLBACK');
        await write(r, 11n)(tx);
        return 'looks fine';
      }),
    );
    expect(rolledBack).toBeInstanceOf(Error);
    expect(String(rolledBack)).toMatch(/ended the transaction/);
    expect(await gate.highWaterMark(pool, r)).toBe(10n);

    // A helper that commits on its own ends the fenced transaction early: the fence row is unlocked, a newer
    // holder writes, and the older callback's next write lands after it. The gate cannot stop that write, but it
    // must not say the callback ran fenced.
    const s = freshResource();
    const committedEarly = await rejection(
      gate.runFenced(pool, s, 20n, async (tx) => {
        await tx.query('BEGIN'); // only a warning inside a transaction
        await write(s, 20n)(tx);
        await tx.query('COMMIT');
        await gate.runFenced(pool, s, 21n, write(s, 21n));
        await write(s, 20n)(tx);
        return 'looks fine';
      }),
    );
    expect(committedEarly).toBeInstanceOf(Error);
    expect(String(committedEarly)).toMatch(/ended the transaction/);
    expect(await committedTokens(pool, dataTable, s)).toEqual([20n, 21n, 20n]);
    expect(checkedOut(pool)).toBe(0);
  });

  it('returns the callback value and handles the largest int64 token exactly', async () => {
    const r = freshResource();
    expect(await gate.run(pool, r, MAX_FENCING_TOKEN - 1n, async () => 'ok')).toBe('ok');
    expect(await gate.run(pool, r, MAX_FENCING_TOKEN.toString(), async () => 42)).toBe(42);
    expect(await gate.highWaterMark(pool, r)).toBe(MAX_FENCING_TOKEN);
    await expect(gate.run(pool, r, MAX_FENCING_TOKEN - 1n, async () => 0)).rejects.toMatchObject({
      highWaterMark: MAX_FENCING_TOKEN,
      token: MAX_FENCING_TOKEN - 1n,
    });
  });

  it('works on a checked-out PoolClient and on a plain Client, and leaves them idle', async () => {
    const r = freshResource();
    const poolClient = await pool.connect();
    try {
      await gate.run(poolClient, r, 1n, write(r, 1n));
      expect(poolClient.getTransactionStatus()).toBe('I');
    } finally {
      poolClient.release();
    }
    const client = await newClient();
    try {
      await gate.run(client, r, 2n, async (tx) => {
        // The callback gets the caller's own client type back, not a structural stand-in.
        expect(tx).toBe(client);
        await write(r, 2n)(tx);
      });
      await expect(gate.run(client, r, 1n, async () => undefined)).rejects.toBeInstanceOf(
        StaleFencingTokenError,
      );
      expect(client.getTransactionStatus()).toBe('I');
    } finally {
      await client.end();
    }
    expect(await committedTokens(pool, dataTable, r)).toEqual([1n, 2n]);
  });

  it('refuses a client that is already inside a transaction, without touching it', async () => {
    const client = await newClient();
    try {
      await client.query('BEGIN');
      const error = await rejection(gate.run(client, freshResource(), 1n, async () => undefined));
      expect(error).toMatchObject({ code: 'INVALID_ARGUMENT', field: 'db' });
      expect(client.getTransactionStatus()).toBe('T');
      await client.query('ROLLBACK');
    } finally {
      await client.end();
    }
  });
});

describe('FencingGate.check', () => {
  it('fences a transaction the caller opened; a stale token is refused and rolled back by the caller', async () => {
    const r = freshResource();
    const client = await pool.connect();
    try {
      await client.query('BEGIN');
      await gate.check(client, r, 20n);
      await write(r, 20n)(client);
      await client.query('COMMIT');

      await client.query('BEGIN');
      await expect(gate.check(client, r, 19n)).rejects.toMatchObject({ highWaterMark: 20n, token: 19n });
      await client.query('ROLLBACK');
    } finally {
      client.release();
    }
    expect(await gate.highWaterMark(pool, r)).toBe(20n);
    expect(await committedTokens(pool, dataTable, r)).toEqual([20n]);
  });

  it('refuses a pool, an idle client and a failed transaction', async () => {
    const r = freshResource();
    // The types refuse a pool already; this is the runtime guard for JavaScript callers.
    await expect(gate.check(pool as unknown as pg.Client, r, 1n)).rejects.toMatchObject({
      code: 'INVALID_ARGUMENT',
      field: 'tx',
    });
    const client = await pool.connect();
    try {
      await expect(gate.check(client, r, 1n)).rejects.toMatchObject({ field: 'tx', message: /not inside/ });
      await client.query('BEGIN');
      await client.query('SELECT 1/0').catch(() => undefined);
      await expect(gate.check(client, r, 1n)).rejects.toMatchObject({ field: 'tx', message: /failed/ });
      await client.query('ROLLBACK');
    } finally {
      client.release();
    }
    expect(await gate.highWaterMark(pool, r)).toBeNull();
  });
});

describe('schema and table names', () => {
  it('ensureSchema is idempotent, also when racing itself on a new table', async () => {
    const racing = new FencingGate({ table: uniqueName('fence_race') });
    try {
      await Promise.all(Array.from({ length: 4 }, () => racing.ensureSchema(pool)));
      await racing.ensureSchema(pool);
      await racing.run(pool, 'r', 1n, async () => undefined);
      expect(await racing.highWaterMark(pool, 'r')).toBe(1n);
    } finally {
      await pool.query(racing.sql.dropTable);
    }
  });

  it('quotes a configured schema and mixed-case table name', async () => {
    const schema = uniqueName('Fence_Schema');
    const custom = new FencingGate({ schema, table: 'Marks' });
    await pool.query(`CREATE SCHEMA "${schema}"`);
    try {
      await custom.ensureSchema(pool);
      await custom.run(pool, 'r', 9n, async () => undefined);
      const stored = await pool.query(`SELECT last_token::text AS t FROM "${schema}"."Marks"`);
      expect(stored.rows).toEqual([{ t: '9' }]);
    } finally {
      await pool.query(`DROP SCHEMA "${schema}" CASCADE`);
    }
  });

  it('rejects unsafe identifiers when the gate is built', () => {
    for (const options of [
      { table: 'x"; DROP TABLE users; --' },
      { table: '' },
      { schema: 'a.b' },
      { table: 'a'.repeat(64) },
    ]) {
      expect(() => new FencingGate(options)).toThrow(InvalidArgumentError);
    }
  });

  it('refuses, at the database too, a resource longer than the limit written around the gate', async () => {
    await expect(
      pool.query(`INSERT INTO "${fenceTable}" (resource, last_token) VALUES ($1, 1)`, ['x'.repeat(1025)]),
    ).rejects.toMatchObject({ code: '23514' });
  });
});
