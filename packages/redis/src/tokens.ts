import { randomFillSync } from 'node:crypto';

/** Bytes of randomness per ownership token (Redis' own lock guidance asks for 20 from a CSPRNG). */
export const OWNERSHIP_TOKEN_BYTES = 20;

/**
 * Each token takes 21 bytes of the pool, which encode to exactly 28 base64url characters, so that the tokens can be
 * cut out of one encoding of the whole pool; a token keeps the first 27 (its 20 bytes and 2 bits of the 21st).
 */
const STRIDE_BYTES = 21;
const STRIDE_CHARS = 28;
const TOKEN_CHARS = 27;
const POOL_TOKENS = 1_024;
const pool = Buffer.alloc(STRIDE_BYTES * POOL_TOKENS);
let text = '';
let offset = 0;

/**
 * A fresh ownership token: 20 bytes from `crypto`, base64url (27 characters, no `:` or spaces, so it can sit in
 * space-separated script messages). Bytes are drawn from the CSPRNG 1,024 tokens at a time and encoded in one go: one
 * syscall and one encoding per 1,024 acquires instead of one each.
 *
 * @internal Exported from the package root only for the built-package test (`test/dist.test.ts`); not API.
 */
export function newOwnershipToken(): string {
  if (offset === text.length) {
    randomFillSync(pool);
    text = pool.toString('base64url');
    offset = 0;
  }
  const token = text.substring(offset, offset + TOKEN_CHARS);
  offset += STRIDE_CHARS;
  return token;
}
