import { MAX_NAME_BYTES, validateName } from '@dlock/core';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import {
  contenderKey,
  escapeName,
  lockDirectory,
  newOwnershipToken,
  newServiceId,
  prefixRangeEnd,
  unescapeName,
} from './keys.js';

const utf8Bytes = (s: string): number => Buffer.byteLength(s, 'utf8');

/** Names as core accepts them: any well-formed Unicode up to the byte limit, biased towards the escaped characters. */
const lockName = fc
  .oneof(
    fc.string({ unit: 'binary', minLength: 1, maxLength: 300 }),
    fc.string({
      unit: fc.constantFrom('%', '/', '2', '5', 'F', 'f', 'a', '.', 'é', '🔒', '\u0000'),
      minLength: 1,
    }),
  )
  .filter((name) => utf8Bytes(name) <= MAX_NAME_BYTES);

const inRange = (key: Buffer, start: Buffer, end: Buffer): boolean =>
  Buffer.compare(key, start) >= 0 && Buffer.compare(key, end) < 0;

describe('name → key mapping', () => {
  it('round-trips and never contains a slash', () => {
    fc.assert(
      fc.property(lockName, (name) => {
        const escaped = escapeName(name);
        expect(escaped.includes('/')).toBe(false);
        expect(unescapeName(escaped)).toBe(name);
      }),
      { numRuns: 2_000 },
    );
  });

  it('is injective: different names never share a directory, and no directory contains another', () => {
    fc.assert(
      fc.property(lockName, lockName, fc.string({ maxLength: 20 }), (a, b, prefix) => {
        fc.pre(a !== b);
        const dirA = lockDirectory(prefix, a);
        const dirB = lockDirectory(prefix, b);
        expect(dirA.equals(dirB)).toBe(false);
        // Every contender key of a lies in a's range and outside b's, so range reads never mix two locks.
        const key = contenderKey(dirA, newServiceId(), 12);
        expect(inRange(key, dirA, prefixRangeEnd(dirA))).toBe(true);
        expect(inRange(key, dirB, prefixRangeEnd(dirB))).toBe(false);
      }),
      { numRuns: 2_000 },
    );
  });

  it('accepts the longest names core allows', () => {
    const longest = '\u{1F512}'.repeat(MAX_NAME_BYTES / 4);
    expect(validateName(longest)).toBe(longest);
    expect(lockDirectory('dlock/', longest).length).toBe('dlock/'.length + MAX_NAME_BYTES + 1);
    const slashes = '/'.repeat(MAX_NAME_BYTES);
    expect(lockDirectory('', slashes).length).toBe(3 * MAX_NAME_BYTES + 1);
  });
});

describe('prefixRangeEnd', () => {
  it('bounds exactly the keys that start with the prefix', () => {
    fc.assert(
      fc.property(
        fc.uint8Array({ minLength: 1, maxLength: 8 }),
        fc.uint8Array({ maxLength: 8 }),
        (p, rest) => {
          const prefix = Buffer.from(p);
          const end = prefixRangeEnd(prefix);
          const inside = Buffer.concat([prefix, Buffer.from(rest)]);
          const allFf = prefix.every((b) => b === 0xff);
          if (!allFf) expect(inRange(inside, prefix, end)).toBe(true);
          else expect(end.equals(Buffer.from([0]))).toBe(true);
        },
      ),
    );
  });
});

describe('tokens and ids', () => {
  it('are long enough, unique, and never contain a slash', () => {
    const a = newOwnershipToken();
    expect(a).not.toBe(newOwnershipToken());
    expect(a.length).toBeGreaterThanOrEqual(20);
    const id = newServiceId();
    expect(id).toMatch(/^[0-9a-f]{16}$/);
    expect(contenderKey(Buffer.from('d/'), id, 3).toString()).toBe(`d/${id}_3`);
  });
});
