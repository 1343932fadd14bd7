import { describe, expect, it } from 'vitest';
import { newPool, usePrivateSchema } from './helpers.js';

// A waiter whose row expired (its process frozen past the row's lease) has left the queue, whether or not a
// statement has deleted the row yet: when it comes back it queues behind the waiters that are live, so the queue
// stays in arrival order among live waiters. Driven with the service's own statements, on the real server.
const pool = newPool(4);
const tables = usePrivateSchema(pool, 'dlock_pg_requeue');

interface Step {
  readonly token: string | null;
  readonly ahead: string | null;
}

/** One call of the acquire statement, as the service sends it, for claim `id` (waiter row lease 60 s). */
async function acquire(kind: 'l' | 's', name: string, id: string, waiterMs = 60_000): Promise<Step> {
  const schema = `"${tables.name}"`;
  // The permit function takes the permit count (1) before the statement's bound in ms; otherwise the calls are alike.
  const [statement, permits] = kind === 'l' ? ['dlock_lock', []] : ['dlock_permit', [1]];
  const values = [name, id, 30_000, null, waiterMs, 'nobody_listens', ...permits, 5_000, 'o'];
  const placeholders = values.map((_, i) => `$${i + 1}`).join(', ');
  const result = await pool.query<Step>(`SELECT * FROM ${schema}.${statement}(${placeholders})`, values);
  const row = result.rows[0];
  if (!row) throw new Error('no row');
  return row;
}

describe('a waiter whose row expired comes back at the back of the queue', () => {
  it.each(['l', 's'] as const)('kind %s', async (kind) => {
    const name = `requeue-${kind}`;
    expect((await acquire(kind, name, 'holder', 0)).token).not.toBeNull();
    expect(await acquire(kind, name, 'first')).toMatchObject({ token: null, ahead: '0' });
    expect(await acquire(kind, name, 'second')).toMatchObject({ token: null, ahead: '1' });
    // 'first' freezes past its row's lease; nothing on the name runs meanwhile, so its row is still there.
    await pool.query(
      `UPDATE "${tables.name}".dlock_waiters SET expires_at = clock_timestamp() - interval '1 second'
        WHERE kind = $1 AND name = $2 AND id = 'first'`,
      [kind, name],
    );
    // Back, it looks again with the same id: 'second' is ahead of it now, and stays first in line.
    expect(await acquire(kind, name, 'first')).toMatchObject({ token: null, ahead: '1' });
    expect(await acquire(kind, name, 'second')).toMatchObject({ token: null, ahead: '0' });
    // Live waiters keep their place when they look again.
    expect(await acquire(kind, name, 'first')).toMatchObject({ token: null, ahead: '1' });
    const order = await pool.query<{ id: string }>(
      `SELECT id FROM "${tables.name}".dlock_waiters WHERE kind = $1 AND name = $2 ORDER BY seq`,
      [kind, name],
    );
    expect(order.rows.map((r) => r.id)).toEqual(['second', 'first']);
  });
});
