import { type Lease, type PermitHolder, type PermitsInfo, PermitsMismatchError } from '@dlock/core';
import { unexpectedReply } from '../errors.js';
import { semaphoreKeys, semaphoreSlotKey } from '../keys.js';
import type { SendCommand } from '../lua-script.js';
import type { Claim, QueueKind, QueueTarget, ScriptReply } from './claims.js';
import type { CallState, Deadlines } from './deadlines.js';
import { DECIMAL } from './script-replies.js';
import type { SemaphoreScripts } from './semaphore-scripts.js';

/**
 * The acquire and leave scripts' replies (see `semaphore-scripts.ts`): {fence, slot} for a grant made by the script,
 * {fence, slot, PTTL} for one handed over earlier, {"permits", stored} for another limit in use, else the ms until
 * the lease the caller waits for ends (0: none known): alone, or for a queued caller as {ms, ceiling}.
 */
function parseReply(reply: unknown, claim: Claim, what: string): ScriptReply {
  if (typeof reply === 'number') return { granted: false, pttl: reply };
  if (Array.isArray(reply)) {
    const [first, second, third] = reply as unknown[];
    if (
      reply.length === 2 &&
      typeof first === 'number' &&
      typeof second === 'string' &&
      DECIMAL.test(second)
    ) {
      return { granted: false, pttl: first, ceiling: BigInt(second) };
    }
    if (reply.length === 2 && first === 'permits' && typeof second === 'number') {
      // Refused before anything was written: nothing of this claim is in Redis.
      claim.placed = false;
      throw new PermitsMismatchError(claim.call.name, claim.call.target.permits ?? 0, second);
    }
    if (
      typeof first === 'string' &&
      DECIMAL.test(first) &&
      typeof second === 'number' &&
      Number.isInteger(second) &&
      second >= 0
    ) {
      if (reply.length === 2) return { granted: true, fence: BigInt(first), slot: second };
      if (reply.length === 3 && typeof third === 'number') {
        return { granted: true, fence: BigInt(first), slot: second, pttl: third };
      }
    }
  }
  throw unexpectedReply(what, reply);
}

export interface SemaphoreProtocolParts {
  readonly scripts: SemaphoreScripts;
  readonly send: SendCommand;
  readonly deadlines: Deadlines;
  readonly requestTimeoutMs: number;
  readonly keyPrefix: string;
}

/**
 * The semaphore's protocol: its queue (acquire and leave, run by the lock's queue driver, `RedisProtocol`, under
 * core's `acquireInQueue`), and the operations on a permit's lease. Each is one Lua script (`semaphore-scripts.ts`),
 * atomic on the server; renewals are the lock's own (a permit's slot key is valued like a lock key).
 */
export class SemaphoreProtocol {
  readonly #parts: SemaphoreProtocolParts;
  readonly #queue: QueueKind;

  constructor(parts: SemaphoreProtocolParts) {
    this.#parts = parts;
    const { acquire, leave } = parts.scripts;
    this.#queue = {
      acquire,
      leave,
      acquireArgs: (claim, waitMs, channel, recheck) => [
        claim.owner,
        String(claim.call.ttlMs),
        String(waitMs),
        waitMs > 0 ? channel : '',
        String(claim.call.target.permits),
        recheck ? '1' : '0',
        // Stored with the grant, for inspect: the owner id, and the metadata when there is some.
        claim.call.ownerId,
        ...(claim.call.target.stored === undefined ? [] : [claim.call.target.stored]),
      ],
      parse: parseReply,
    };
  }

  /**
   * Where a permit of semaphore `name` with limit `permits` queues. The acquire script takes a free slot when nobody
   * waits (a slot a lease left free goes to the oldest waiter first), else queues the claim when it waits, and
   * answers the earliest lease's end for the head waiter; the leave script takes the claim out and lets go of a
   * slot granted to it (or keeps one handed over at the last moment).
   */
  target(name: string, permits: number, metadata?: string): QueueTarget {
    const target = { kind: this.#queue, keys: this.#keys(name), permits };
    return metadata === undefined ? target : { ...target, stored: metadata };
  }

  /**
   * The release script: owner-checked, it hands the slot to the oldest live waiter (one message to that waiter's
   * process) or frees it. False when the lease no longer holds its slot.
   */
  release(lease: Lease & { readonly slot: number }): Promise<boolean> {
    const { scripts, send, deadlines, requestTimeoutMs, keyPrefix } = this.#parts;
    const keys = [...this.#keys(lease.name), semaphoreSlotKey(keyPrefix, lease.name, lease.slot)];
    const claim = `${lease.ownershipToken} ${lease.fencingToken}`;
    const state: CallState = { abandoned: false };
    const script = scripts.release.run(send, keys, [claim, String(lease.slot)], state);
    return deadlines.boundAndMap(script, requestTimeoutMs, 'release permit', isOne, { state });
  }

  /**
   * The inspect script: the live leases by slot (owner id, token, time left by the server's clock, metadata) and the
   * queued callers whose deadline has not passed, or `PermitsMismatchError` for another limit in use.
   */
  async inspect(name: string, permits: number): Promise<PermitsInfo> {
    const { scripts, send, deadlines, requestTimeoutMs } = this.#parts;
    const reply = await deadlines.bound(
      scripts.inspect.run(send, this.#keys(name), [String(permits)]),
      requestTimeoutMs,
      'inspect permits',
    );
    if (!Array.isArray(reply)) throw unexpectedReply('inspect permits', reply);
    const [waiters, ...rest] = reply as unknown[];
    if (waiters === 'permits' && typeof rest[0] === 'number')
      throw new PermitsMismatchError(name, permits, rest[0]);
    if (typeof waiters !== 'number' || rest.length % 5 !== 0) throw unexpectedReply('inspect permits', reply);
    const held: PermitHolder[] = [];
    for (let at = 0; at < rest.length; at += 5) {
      const [slot, fence, pttl, ownerId, metadata] = rest.slice(at, at + 5);
      if (
        typeof slot !== 'number' ||
        typeof fence !== 'string' ||
        !DECIMAL.test(fence) ||
        typeof pttl !== 'number' ||
        (ownerId !== null && typeof ownerId !== 'string') ||
        (metadata !== null && typeof metadata !== 'string')
      ) {
        throw unexpectedReply('inspect permits', reply);
      }
      // A lease granted by an older version stored no owner id.
      const holder = {
        slot,
        ownerId: ownerId ?? '',
        fencingToken: BigInt(fence),
        expiresInMs: Math.max(0, pttl),
      };
      held.push(metadata === null ? holder : { ...holder, metadata });
    }
    return { permits, held, waiters };
  }

  /** The available script: slots no live lease holds, or `PermitsMismatchError` for another limit in use. */
  async available(name: string, permits: number): Promise<number> {
    const { scripts, send, deadlines, requestTimeoutMs } = this.#parts;
    const reply = await deadlines.bound(
      scripts.available.run(send, this.#keys(name), [String(permits)]),
      requestTimeoutMs,
      'available permits',
    );
    if (typeof reply === 'number' && Number.isInteger(reply) && reply >= 0) return reply;
    if (
      Array.isArray(reply) &&
      reply.length === 2 &&
      reply[0] === 'permits' &&
      typeof reply[1] === 'number'
    ) {
      throw new PermitsMismatchError(name, permits, reply[1]);
    }
    throw unexpectedReply('available permits', reply);
  }

  #keys(name: string): string[] {
    const { slots, fence, queue, waiters } = semaphoreKeys(this.#parts.keyPrefix, name);
    return [slots, fence, queue, waiters];
  }
}

function isOne(reply: unknown): boolean {
  return reply === 1;
}
