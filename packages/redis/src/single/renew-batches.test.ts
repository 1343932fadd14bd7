import type { RenewRequest } from '@dlock/core';
import { FakeClock } from '@dlock/testing';
import { describe, expect, it } from 'vitest';
import type { RedisConnection } from '../clients/connection.js';
import { keySlot } from '../clients/key-slot.js';
import { leaseKey } from '../keys.js';
import { Deadlines } from './deadlines.js';
import { ClusterRenewals } from './renew-batches.js';

const PREFIX = 'dlock:';

/** A lease of `name`; which master serves it is decided by `masterOfName` below. */
const request = (name: string): RenewRequest => ({
  lease: { name, ownerId: 'owner', ownershipToken: `own-${name}`, fencingToken: 7n },
  ttlMs: 2_000,
});

/**
 * Two masters: names starting "up" on one, "down" on the other. The "down" master's script call fails; the "up"
 * master renews every lock it is sent.
 */
function renewals(): ClusterRenewals {
  const names = ['up-a', 'up-b', 'down-a', 'down-b'];
  const masterOfSlot = new Map(
    names.map((name) => [keySlot(leaseKey(PREFIX, request(name).lease)), name.split('-')[0]]),
  );
  const client = { masterOf: (slot: number) => masterOfSlot.get(slot) } as unknown as RedisConnection;
  const send = async (args: string[]): Promise<unknown> => {
    const count = Number(args[4]);
    const keys = args.slice(5, 5 + count);
    if (keys.some((key) => key.includes('down'))) throw new Error('connection reset');
    return keys.map(() => 1);
  };
  return new ClusterRenewals({
    client,
    send,
    deadlines: new Deadlines(new FakeClock()),
    requestTimeoutMs: 1_000,
    keyPrefix: PREFIX,
  });
}

describe('ClusterRenewals', () => {
  it('answers one result per lease, in order, when a master fails: none for its locks, the others renewed', async () => {
    for (const order of [
      ['down-a', 'up-a', 'up-b'],
      ['up-a', 'up-b', 'down-a', 'down-b'],
      ['up-a', 'down-a', 'up-b'],
    ]) {
      const results = await renewals().renew(order.map(request));
      expect(results, order.join(',')).toHaveLength(order.length);
      order.forEach((name, i) => {
        expect(results[i], name).toEqual(name.startsWith('up') ? { renewed: true } : undefined);
      });
    }
  });
});
