import { InvalidArgumentError } from '@dlock/core';
import { PostgresLockService } from '@dlock/postgres';
import pg from 'pg';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { newPool, PG_URL, usePrivateSchema } from './helpers.js';

// A pool whose client cannot be given back (its release throws) once its statement answered threw inside a promise
// callback: an unhandled rejection (a crash under Node's default) and a call that never settled with its answer.
// A pg.Client passed where a pool belongs was the way to get there (its connect() hands out no client with a
// release); it is now refused up front, and a pool wrapper whose release throws stands in for it.
const tables = usePrivateSchema(newPool(2));
const unhandled: unknown[] = [];
const onUnhandled = (reason: unknown): void => {
  unhandled.push(reason);
};
beforeEach(() => {
  unhandled.length = 0;
  process.on('unhandledRejection', onUnhandled);
});
afterEach(() => {
  process.removeListener('unhandledRejection', onUnhandled);
});

describe('a client whose release fails', () => {
  it('settles its statement with the answer it got, and nothing goes unhandled', async () => {
    const inner = newPool(2);
    const pool = {
      query: inner.query.bind(inner),
      connect: async () => {
        const client = await inner.connect();
        // pg-pool sets a client's release at each checkout, so this one lasts for this checkout only.
        const release = client.release;
        client.release = (error?: Error | boolean) => {
          release.call(client, error);
          throw new TypeError('release failed');
        };
        return client;
      },
    };
    const service = new PostgresLockService({
      pool: pool as unknown as pg.Pool,
      schema: tables.name,
      listen: false,
      requestTimeoutMs: 1_000,
    });
    try {
      const outcome = await service.inspect('not-a-pool').then(
        (info) => `answered held=${String(info.held)}`,
        (error: Error) => error.message,
      );
      // Let a rejection nobody handles reach the process's event.
      await new Promise((resolve) => setTimeout(resolve, 50));
      expect({ outcome, unhandled: unhandled.map(String) }).toEqual({
        outcome: 'answered held=false',
        unhandled: [],
      });
    } finally {
      await service.close();
      await inner.end().catch(() => undefined);
    }
  });
});

describe('a pg.Client passed as the pool', () => {
  it('is refused at construction, before any I/O', () => {
    const client = new pg.Client({ connectionString: PG_URL });
    let error: unknown;
    try {
      new PostgresLockService({ pool: client as unknown as pg.Pool, listen: false });
    } catch (e) {
      error = e;
    }
    expect(error).toBeInstanceOf(InvalidArgumentError);
    expect(error).toMatchObject({ field: 'options.pool' });
    expect(String((error as Error).message)).toMatch(/pg\.Client/);
  });
});
