import { StaleFencingTokenError as CommonStale, isDLockError } from '@dlock/fencing-common';
import { afterAll, describe, expect, it } from 'vitest';
import { newPool, uniqueName } from './helpers.js';

// Imports the package by name, so this runs the built dist through its exports map, as users get it.
const built = await import('@dlock/fencing-pg');

describe('the built package', () => {
  const pool = newPool(2);
  const gate = new built.FencingGate({ table: uniqueName('fence_dist') });
  afterAll(async () => {
    await pool.query(gate.sql.dropTable);
    await pool.end();
  });

  it('exports the gate and the shared errors, which are the common package’s classes', async () => {
    await gate.ensureSchema(pool);
    await gate.run(pool, 'dist', 2n, async () => undefined);
    const error = await gate.run(pool, 'dist', 1n, async () => undefined).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(built.StaleFencingTokenError);
    expect(built.StaleFencingTokenError).toBe(CommonStale);
    expect(isDLockError(error)).toBe(true);
    expect(built.fencingSql().guard).toContain('ON CONFLICT (resource) DO UPDATE');
    await expect(
      gate.run(pool, 'dist', 2n, async () => undefined, { lockTimeoutMS: 50 } as never),
    ).rejects.toMatchObject({ code: 'INVALID_ARGUMENT', field: 'options.lockTimeoutMS' });
  });
});
