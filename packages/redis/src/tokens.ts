import { randomFillSync } from 'node:crypto';

/** Bytes of randomness per ownership token (Redis' own lock guidance asks for 20 from a CSPRNG). */
export const OWNERSHIP_TOKEN_BYTES = 20;

const POOL_TOKENS = 256;
const pool = Buffer.alloc(OWNERSHIP_TOKEN_BYTES * POOL_TOKENS);
let offset = pool.length;

/**
 * A fresh ownership token: 20 bytes from `crypto`, base64url (27 characters, no `:` or spaces, so it can sit in
 * space-separated script messages). Bytes are drawn from the CSPRNG 256 tokens at a time: one syscall per 256
 * acquires instead of one each.
 *
 * @internal Exported from the package root only for the built-package test (`test/dist.test.ts`); not API.
 */
export function newOwnershipToken(): string {
  if (offset === pool.length) {
    randomFillSync(pool);
    offset = 0;
  }
  const token = pool.toString('base64url', offset, offset + OWNERSHIP_TOKEN_BYTES);
  offset += OWNERSHIP_TOKEN_BYTES;
  return token;
}
