import { describe, expect, it } from 'vitest';
import { newOwnershipToken, OWNERSHIP_TOKEN_BYTES } from './tokens.js';

describe('ownership tokens', () => {
  it('carry 20 random bytes as 27 base64url characters', () => {
    const token = newOwnershipToken();
    expect(token).toMatch(/^[A-Za-z0-9_-]{27}$/);
    expect(Buffer.from(token, 'base64url')).toHaveLength(OWNERSHIP_TOKEN_BYTES);
    expect(OWNERSHIP_TOKEN_BYTES).toBeGreaterThanOrEqual(20);
  });

  it('never repeat, across many refills of the random pool', () => {
    const seen = new Set<string>();
    for (let i = 0; i < 20_000; i++) seen.add(newOwnershipToken());
    expect(seen.size).toBe(20_000);
  });

  it('use every byte value (the pool is really random, not zeroes)', () => {
    const counts = new Uint32Array(256);
    for (let i = 0; i < 5_000; i++)
      for (const b of Buffer.from(newOwnershipToken(), 'base64url')) counts[b] = (counts[b] ?? 0) + 1;
    expect(counts.every((c) => c > 0)).toBe(true);
  });
});
