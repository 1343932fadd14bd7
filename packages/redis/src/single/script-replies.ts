import type { LockInfo } from '@dlock/core';
import { unexpectedReply } from '../errors.js';

/** A fencing token as the scripts answer it: a decimal string, read into a bigint. */
export const DECIMAL = /^[1-9]\d*$/;

/** The inspect script's {waiters[, fencing token, PTTL[, metadata[, owner id]]]} (metadata null: none). */
export function parseInspect(reply: unknown): LockInfo {
  if (!Array.isArray(reply) || reply.length < 1 || reply.length > 5 || typeof reply[0] !== 'number') {
    throw unexpectedReply('inspect', reply);
  }
  const [waiters, fence, pttl, metadata, ownerId] = reply as [number, unknown, unknown, unknown, unknown];
  if (reply.length === 1) return { held: false, waiters };
  if (typeof fence !== 'string' || !DECIMAL.test(fence) || typeof pttl !== 'number') {
    throw unexpectedReply('inspect', reply);
  }
  // PTTL is -1 (no expiry) or -2 (gone) only for a key no grant of ours wrote: reported without an expiry.
  const expiry = pttl >= 0 ? { expiresInMs: pttl } : {};
  if (reply.length === 3) return { held: true, fencingToken: BigInt(fence), ...expiry, waiters };
  if (reply.length === 5) {
    if (typeof ownerId !== 'string' || (metadata !== null && typeof metadata !== 'string')) {
      throw unexpectedReply('inspect', reply);
    }
    const stored = metadata === null ? {} : { metadata };
    return { held: true, ownerId, fencingToken: BigInt(fence), ...stored, ...expiry, waiters };
  }
  if (typeof metadata !== 'string') throw unexpectedReply('inspect', reply);
  return { held: true, fencingToken: BigInt(fence), metadata, ...expiry, waiters };
}

/** The update script's 1 (updated) or 0 (the lease no longer holds the key). */
export function parseUpdate(reply: unknown): boolean {
  if (reply !== 1 && reply !== 0) throw unexpectedReply('update metadata', reply);
  return reply === 1;
}

/** The release script's "released" (a named function: no closure per release). */
export function isOne(reply: unknown): boolean {
  return reply === 1;
}
