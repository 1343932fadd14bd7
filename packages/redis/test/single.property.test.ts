import type { Lease } from '@dlock/core';
import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { lockKeys, RedisLockService } from '../src/index.js';
import { connect, disconnect, type Redis, SideRedis, sleep } from './helpers.js';

/*
 * The single-node scripts on a real server, driven by random sequences of acquires and releases (by current and
 * stale holders) and of the ways a key goes: a lease running out, a tombstone reaching its anchor, the fence key's
 * retention passing, Redis losing everything. After every step: tokens strictly increase, at most one holder, the
 * lock key states who holds it, and a free lock is free to anyone (nobody queues here).
 *
 * A key is only ever taken away at least 2 ms after the last grant, as time would: a lease lasts at least 1 ms, a
 * tombstone a second, and the fence key outlives both. (Removing one a few µs after the grant that reserved a block
 * of tokens would model a clock that stepped back; the second property models that on purpose.)
 */

type Op =
  | { readonly kind: 'acquire'; readonly owner: number }
  | { readonly kind: 'release'; readonly owner: number }
  /** The holder's lease runs out: its lock key is gone. */
  | { readonly kind: 'expire' }
  /** The tombstone reaches its anchor. */
  | { readonly kind: 'tombstone-expires' }
  /** The fence key's retention passes (whatever the lock key does). */
  | { readonly kind: 'fence-expires' }
  /** Redis restarts empty. */
  | { readonly kind: 'flush' };

const OWNERS = 3;
const owner = fc.integer({ min: 0, max: OWNERS - 1 });
const common: fc.Arbitrary<Op>[] = [
  owner.map((o) => ({ kind: 'acquire', owner: o }) as const),
  owner.map((o) => ({ kind: 'acquire', owner: o }) as const),
  owner.map((o) => ({ kind: 'release', owner: o }) as const),
  owner.map((o) => ({ kind: 'release', owner: o }) as const),
  fc.constant({ kind: 'expire' } as const),
  fc.constant({ kind: 'tombstone-expires' } as const),
];
const withLoss = fc.array(
  fc.oneof(
    ...common,
    fc.constant({ kind: 'fence-expires' } as const),
    fc.constant({ kind: 'flush' } as const),
  ),
  { minLength: 5, maxLength: 40 },
);
const withoutLoss = fc.array(fc.oneof(...common), { minLength: 5, maxLength: 40 });

let side: SideRedis;
let admin: Redis;
let client: Redis;
let service: RedisLockService;
let run = 0;

beforeAll(async () => {
  side = await SideRedis.start();
  admin = await connect(side.url);
  client = await connect(side.url);
  service = new RedisLockService({ client });
});
afterAll(async () => {
  await service.close();
  await disconnect(client);
  await disconnect(admin);
  await side.stop();
});

/** Expires `key` now, if it is there and `when` says so, and waits until the server agrees. */
async function expireNow(key: string, when: (value: string) => boolean): Promise<void> {
  const value = await admin.get(key);
  if (value === null || !when(value)) return;
  await admin.pExpire(key, 1);
  while ((await admin.exists(key)) === 1) await sleep(1);
}

async function check(ops: readonly Op[], ahead: boolean): Promise<void> {
  run += 1;
  const name = `prop-${run}`;
  const keys = lockKeys('dlock:', name);
  if (ahead) {
    // The counter an hour ahead of the server clock, as after the clock stepped back: from here on only the
    // counter can tell the next token.
    await admin.set(keys.fence, String(BigInt(Date.now()) * 1_000n + 3_600_000_000n));
  }
  const leases = new Map<number, Lease>();
  let holder: Lease | undefined;
  let last = 0n;
  for (const op of ops) {
    switch (op.kind) {
      case 'acquire': {
        const result = await service.acquire({
          name,
          ownerId: `owner-${op.owner}`,
          ttlMs: 30_000,
          waitMs: 0,
          signal: new AbortController().signal,
        });
        // Nobody queues: a free lock is granted, a held one refused.
        expect(result.acquired, `acquire while ${holder ? 'held' : 'free'}`).toBe(holder === undefined);
        if (result.acquired) {
          const token = result.grant.fencingToken;
          expect(token, 'tokens strictly increase').toBeGreaterThan(last);
          last = token;
          holder = { name, ownerId: `owner-${op.owner}`, ...result.grant };
          leases.set(op.owner, holder);
        }
        break;
      }
      case 'release': {
        const lease = leases.get(op.owner);
        if (lease === undefined) break;
        const held = holder !== undefined && holder.ownershipToken === lease.ownershipToken;
        expect(await service.release(lease), 'release answers whether it held').toBe(held);
        if (held) holder = undefined;
        break;
      }
      case 'expire':
        await sleep(2);
        await expireNow(keys.lock, (value) => !value.startsWith('~ '));
        holder = undefined;
        break;
      case 'tombstone-expires':
        await sleep(2);
        await expireNow(keys.lock, (value) => value.startsWith('~ '));
        break;
      case 'fence-expires':
        await sleep(2);
        await admin.del(keys.fence);
        break;
      case 'flush':
        await sleep(2);
        await admin.sendCommand(['FLUSHALL']);
        holder = undefined;
        break;
    }
    const value = await admin.get(keys.lock);
    if (holder === undefined) {
      expect(value === null || value.startsWith('~ '), `free: ${value}`).toBe(true);
    } else {
      expect(value?.startsWith(`${holder.ownershipToken} ${holder.fencingToken} `), `held: ${value}`).toBe(
        true,
      );
    }
  }
  await admin.del([keys.lock, keys.fence]);
}

describe('the single-node scripts against a real server', () => {
  it('keep one holder at a time and tokens strictly increasing across expiries, tombstones and data loss', async () => {
    await fc.assert(
      fc.asyncProperty(withLoss, (ops) => check(ops, false)),
      { numRuns: 60 },
    );
  });

  it('keep tokens strictly increasing with the counter ahead of the server clock, expiries included', async () => {
    await fc.assert(
      fc.asyncProperty(withoutLoss, (ops) => check(ops, true)),
      { numRuns: 60 },
    );
  });
});
