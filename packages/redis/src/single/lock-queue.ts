import { unexpectedReply } from '../errors.js';
import type { Claim, QueueKind, ScriptReply } from './claims.js';
import { DECIMAL } from './script-replies.js';
import type { LockScripts } from './scripts.js';

/** A lock's queue: the acquire script places the claim (taking the lock if free), the leave script takes it out. */
export function lockQueue(scripts: LockScripts): QueueKind {
  return {
    acquire: scripts.acquire,
    leave: scripts.leave,
    acquireArgs(claim, waitMs, channel) {
      const { call } = claim;
      // The owner id always, the metadata when the grant carries some (see the acquire script).
      const args = [claim.owner, String(call.ttlMs), String(waitMs), waitMs > 0 ? channel : '', call.ownerId];
      const { stored } = call.target;
      if (stored !== undefined) args.push(stored);
      return args;
    },
    parse: parseLockReply,
  };
}

/**
 * The acquire and leave scripts answer with the fencing token (a string) when they granted the lock to the caller,
 * with {fencing token, PTTL} when the caller already held it, and with the holder's PTTL otherwise: alone (the leave
 * script) or as {PTTL, ceiling} (the acquire script's refusal).
 */
function parseLockReply(reply: unknown, _claim: Claim, what: string): ScriptReply {
  if (typeof reply === 'string' && DECIMAL.test(reply)) return { granted: true, fence: BigInt(reply) };
  if (typeof reply === 'number') return { granted: false, pttl: reply };
  if (Array.isArray(reply) && reply.length === 2) {
    const [first, second] = reply as unknown[];
    if (typeof first === 'string' && DECIMAL.test(first) && typeof second === 'number') {
      return { granted: true, fence: BigInt(first), pttl: second };
    }
    if (typeof first === 'number' && typeof second === 'string' && DECIMAL.test(second)) {
      return { granted: false, pttl: first, ceiling: BigInt(second) };
    }
  }
  throw unexpectedReply(what, reply);
}
