import { randomBytes } from 'node:crypto';
import { type Lease, systemClock } from '@dlock/core';
import { maxOf } from '@dlock/test-utils';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { QuorumLock, UNDECIDED } from '../src/redlock/redlock-protocol.js';
import { type Fault, ModelNode, World } from './redlock-model.js';

/*
 * The quorum algorithm itself (src/redlock/redlock-protocol.ts) over in-process nodes with the scripts' semantics:
 * arbitrary sequences of grants, releases, renewals, time passing, crashes, lost requests and lost replies.
 */

const TTL_MS = 1_000;
const NAME = 'model-lock';

type Op =
  | { readonly kind: 'acquire' }
  /** Two acquires at once, by different owners. */
  | { readonly kind: 'race' }
  | { readonly kind: 'release' }
  | { readonly kind: 'renew' }
  | { readonly kind: 'advance'; readonly ms: number }
  | { readonly kind: 'crash'; readonly node: number }
  | { readonly kind: 'recover'; readonly node: number }
  | { readonly kind: 'restart'; readonly node: number };

function opArb(nodes: number, restarts: boolean): fc.Arbitrary<Op> {
  const node = fc.integer({ min: 0, max: nodes - 1 });
  const ops: fc.Arbitrary<Op>[] = [
    fc.constant({ kind: 'acquire' } as const),
    fc.constant({ kind: 'acquire' } as const),
    fc.constant({ kind: 'race' } as const),
    fc.constant({ kind: 'release' } as const),
    fc.constant({ kind: 'renew' } as const),
    fc.integer({ min: 1, max: 2 * TTL_MS }).map((ms) => ({ kind: 'advance', ms }) as const),
    node.map((n) => ({ kind: 'crash', node: n }) as const),
    node.map((n) => ({ kind: 'recover', node: n }) as const),
  ];
  if (restarts) ops.push(node.map((n) => ({ kind: 'restart', node: n }) as const));
  return fc.oneof(...ops);
}

function faultArb(restarts: boolean): fc.Arbitrary<readonly Fault[]> {
  const faults: Fault[] = ['ok', 'ok', 'drop-request', 'drop-reply'];
  if (restarts) faults.push('restart');
  return fc.array(fc.constantFrom(...faults), { minLength: 50, maxLength: 300 });
}

interface Held {
  readonly lease: Lease;
  /** World time (µs) until which no other grant may exist: every key of a majority lives at least this long. */
  validUntilUs: number;
  gaveUp: boolean;
}

interface RunResult {
  /** Tokens of every grant, in the order the grants were handed out. */
  readonly tokens: bigint[];
  /** Grants whose token was not above every token handed out before their acquire started. */
  readonly notAbove: number;
  /** Two grants with the same token. */
  readonly duplicates: number;
  /** Grants issued while an earlier grant was still valid and not given up. */
  readonly overlaps: number;
}

async function run(
  nodeCount: number,
  ops: readonly Op[],
  faults: readonly Fault[],
  seedFromClock = true,
): Promise<RunResult> {
  const world = new World();
  world.setFaults(faults);
  const nodes = Array.from({ length: nodeCount }, () => new ModelNode(world, { seedFromClock }));
  const lock = new QuorumLock({
    nodes,
    // The models answer at once: the deadline only bounds a release's tries again on a node that failed (crashed
    // nodes fail every one), in real time.
    nodeTimeoutMs: 50,
    clock: systemClock,
    newOwnershipToken: () => randomBytes(20).toString('base64url'),
  });
  const tokens: bigint[] = [];
  let notAbove = 0;
  let overlaps = 0;
  let held: Held | undefined;

  const acquire = async (owner: string): Promise<Held | undefined> => {
    const startedAt = world.nowUs;
    const result = await lock
      .acquire({ name: NAME, ownerId: owner, ttlMs: TTL_MS, waitMs: 0, signal: new AbortController().signal })
      .catch(() => undefined);
    if (!result?.acquired) return undefined;
    const { ownershipToken, fencingToken } = result.grant;
    return {
      lease: { name: NAME, ownerId: owner, ownershipToken, fencingToken },
      validUntilUs: startedAt + TTL_MS * 1000,
      gaveUp: false,
    };
  };
  /** Records grants whose acquires all started after every grant so far was handed out. */
  const admit = (grants: readonly (Held | undefined)[]): void => {
    const before = maxOf(tokens) ?? 0n;
    for (const grant of grants) {
      if (!grant) continue;
      if (grant.lease.fencingToken <= before) notAbove += 1;
      if (held && !held.gaveUp && world.nowUs < held.validUntilUs) overlaps += 1;
      tokens.push(grant.lease.fencingToken);
      held = grant;
    }
  };

  for (const op of ops) {
    switch (op.kind) {
      case 'acquire':
        admit([await acquire('a')]);
        break;
      case 'race':
        admit(await Promise.all([acquire('b'), acquire('c')]));
        break;
      case 'release':
        if (held && !held.gaveUp) {
          held.gaveUp = true;
          await lock.release(held.lease).catch(() => undefined);
        }
        break;
      case 'renew': {
        if (!held || held.gaveUp || world.nowUs >= held.validUntilUs) break;
        const sentAt = world.nowUs;
        const [decision] = await lock.renew([{ lease: held.lease, ttlMs: TTL_MS }]);
        if (decision === UNDECIDED) break;
        if (decision?.renewed) held.validUntilUs = Math.max(held.validUntilUs, sentAt + TTL_MS * 1000);
        else held.gaveUp = true;
        break;
      }
      case 'advance':
        world.nowUs += op.ms * 1000;
        break;
      case 'crash':
        (nodes[op.node] as ModelNode).down = true;
        break;
      case 'recover':
        (nodes[op.node] as ModelNode).down = false;
        break;
      case 'restart':
        (nodes[op.node] as ModelNode).restart();
        break;
    }
  }
  const duplicates = tokens.length - new Set(tokens).size;
  return { tokens, notAbove, duplicates, overlaps };
}

function strictlyIncreasing(tokens: readonly bigint[]): boolean {
  return tokens.every((t, i) => i === 0 || (tokens[i - 1] as bigint) < t);
}

describe('Redlock quorum algorithm (model nodes)', () => {
  for (const nodeCount of [3, 5]) {
    it(`${nodeCount} nodes, crashes, races and lost messages: tokens unique and increasing, grants never overlap`, async () => {
      await fc.assert(
        fc.asyncProperty(
          fc.array(opArb(nodeCount, false), { minLength: 10, maxLength: 60 }),
          faultArb(false),
          async (ops, faults) => {
            expect(await run(nodeCount, ops, faults)).toMatchObject({
              notAbove: 0,
              duplicates: 0,
              overlaps: 0,
            });
          },
        ),
        { numRuns: 500 },
      );
    });

    it(`${nodeCount} nodes, also restarts that lose all data (even mid-acquire): tokens still unique and increasing`, async () => {
      await fc.assert(
        fc.asyncProperty(
          fc.array(opArb(nodeCount, true), { minLength: 10, maxLength: 60 }),
          faultArb(true),
          async (ops, faults) => {
            // Mutual exclusion is not promised across restarts; the tokens are.
            expect(await run(nodeCount, ops, faults)).toMatchObject({ notAbove: 0, duplicates: 0 });
          },
        ),
        { numRuns: 500 },
      );
    });
  }

  it('the grants are really there: most fault-free runs grant, and tokens grow by one per grant', async () => {
    const ops: Op[] = [];
    for (let i = 0; i < 20; i++) ops.push({ kind: 'acquire' }, { kind: 'release' });
    const { tokens } = await run(3, ops, []);
    expect(tokens).toHaveLength(20);
    for (let i = 1; i < tokens.length; i++) expect(tokens[i]).toBe((tokens[i - 1] as bigint) + 1n);
  });

  it('a minority down changes nothing; a majority down grants nothing', async () => {
    const minority = await run(
      5,
      [
        { kind: 'crash', node: 0 },
        { kind: 'crash', node: 3 },
        { kind: 'acquire' },
        { kind: 'release' },
        { kind: 'acquire' },
      ],
      [],
    );
    expect(minority.tokens).toHaveLength(2);
    const majority = await run(
      5,
      [
        { kind: 'crash', node: 0 },
        { kind: 'crash', node: 1 },
        { kind: 'crash', node: 4 },
        { kind: 'acquire' },
      ],
      [],
    );
    expect(majority.tokens).toHaveLength(0);
  });

  // The negative control: the same scenario with counters that restart at 0 (a plain INCR without persistence)
  // mints a lower token, so the property above is sensitive to exactly what the clock seed protects.
  const restartScenario: Op[] = [
    { kind: 'crash', node: 2 },
    { kind: 'acquire' }, // grant A on nodes 0 and 1 only
    { kind: 'release' },
    { kind: 'recover', node: 2 }, // node 2 still has the counter from before A
    { kind: 'restart', node: 1 }, // the only other node that saw A's token loses it
    { kind: 'crash', node: 0 },
    { kind: 'acquire' }, // grant B on nodes 1 and 2: neither remembers A's token
  ];

  it('a node restarted empty between grants: tokens still increase (clock seed)', async () => {
    const { tokens } = await run(3, [{ kind: 'acquire' }, { kind: 'release' }, ...restartScenario], []);
    expect(tokens).toHaveLength(3);
    expect(strictlyIncreasing(tokens)).toBe(true);
  });

  it('negative control: the same restart with counters seeded at 0 lets the token go backwards', async () => {
    const { tokens } = await run(
      3,
      [{ kind: 'acquire' }, { kind: 'release' }, ...restartScenario],
      [],
      false,
    );
    expect(tokens).toHaveLength(3);
    expect(strictlyIncreasing(tokens)).toBe(false);
  });
});
