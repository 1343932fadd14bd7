import { PostgresLockService } from '@dlock/postgres';
import pg from 'pg';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { newPool, PG_URL, usePrivateSchema } from './helpers.js';

// A pg.Client passed where a pool belongs has query and connect like one, but what its connect() hands out (the
// client itself) has no release. Giving that back once its statement answered threw inside a promise callback: an
// unhandled rejection (a crash under Node's default) and a call that never settled with the answer it got.
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
    const client = new pg.Client({ connectionString: PG_URL });
    client.on('error', () => {});
    const service = new PostgresLockService({
      pool: client as unknown as pg.Pool,
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
      await client.end().catch(() => undefined);
    }
  });
});
